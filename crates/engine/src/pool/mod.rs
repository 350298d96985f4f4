//! A pool: volumes whose durable home is an object store, committed in atomic transaction
//! groups. `Pool` is the facade the front ends (crates/fardisk, crates/bench) use; `Inner`, below,
//! is what an imported pool is: its identity and shared services, then each subsystem's state
//! behind that subsystem's own lock(s).
//!
//! # Layers
//! A module uses only modules of lower layers, never one above it:
//!
//! ```text
//!  open/     create; import: checks, claim, log replay (replay.rs), rewind; read-only import
//!    |
//!  the facade: mod.rs and write, read, cold_read, map_along, readahead, volume, snapshot, vdevs,
//!    |         scrub, hotset, map_warm, audit, status, lease (the Pool methods live here, by
//!    |         topic; nothing below sees Pool)
//!    v
//!  intent/   sync requests: records made durable on the intent log, or a txg waited for
//!    v
//!  syncer    one txg at a time: the commit, then reclaim; its loop adds compaction
//!    |-----------------.
//!    v                 |
//!  reclaim/            |  retained roots, deferred deletes, compaction, orphans (queues work
//!    |                 |  for the next txg, so it sits above txg/ and below the syncer)
//!    v                 v
//!  txg/      the open and syncing txg, queued work, and the commit: pack (segments and
//!    |       uploads), maps (block maps), space (space table), retry (waiting out outages)
//!    v
//!  fetch     verified block reads through the ARC, the cache device and the store
//!    v
//!  meta, health, counters, history, names, env, config   (leaves: nothing in the pool)
//! ```
//!
//! scripts/check-module-cycles.py checks that no `use`/path reference goes around in a circle.
//! Access through `Inner`'s fields follows the same order by design: a subsystem reads the state
//! of those below it (every layer reads `meta`, `health`, `config`), and calls nothing above.
//! `Inner` itself lives here, not in a module of its own: it names every subsystem's state, so
//! any module holding it would depend on all the others.

// The facade, by topic.
mod audit;
mod cold_read;
mod hotset;
mod lease;
mod map_along;
mod map_warm;
mod open;
mod read;
mod readahead;
mod scrub;
mod snapshot;
mod status;
mod vdevs;
mod volume;
mod write;
// Subsystems (their layers: the module doc above).
mod fetch;
mod intent;
mod reclaim;
mod syncer;
mod txg;
// Leaves.
mod config;
mod counters;
mod env;
mod health;
mod held;
mod held_reader;
mod history;
mod meta;
mod names;

pub use crate::fence::list_root_txgs;
pub use audit::SpaceAudit;
pub use config::{validate_prop, PoolConfig, POOL_PROPS};
pub use env::Env;
pub use health::PoolHealth;
pub use held::{list_held_files, HeldRecord, HeldRecords, HeldSummary, HELD_FILE_SUFFIX};
pub use held_reader::{HeldEntry, HeldReader};
pub use history::{
    decode_event, encode_event, read_history, this_host, write_history_event, HistoryEvent,
    HISTORY_KEPT,
};
pub use hotset::{decode as decode_hot_set, encode as encode_hot_set, HOT_SET_KEY};
pub use intent::LogDevices;
pub use lease::{lease_key, LeaseRecord, LEASE_MARGIN_MS};
pub use names::{check_pool_name, split_snapshot_name};
pub use open::{log_configs, CreateOptions, ImportOptions, PointInTime};
pub use scrub::{ScrubError, ScrubProgress, ScrubState, SCRUB_RATE_MAX_DEFAULT};
pub use snapshot::SnapshotInfo;
pub use status::{PoolStatus, VolumeInfo};
pub use vdevs::RemovedVdev;

use crate::blockmap::PageCache;
use crate::cache::BlockCache;
use crate::error::{Error, Result};
use crate::objstore::{DynStore, StoreStats};
use crate::rng::Rng;
use crate::root::Root;
use parking_lot::{Mutex, RwLock};
use std::sync::Arc;

/// An imported pool, shared by every handle and background task.
///
/// Lock order, outermost first: a lock may be taken while holding only locks listed before it.
/// 1. `txg.sync_lock` (one commit at a time) and the intent log's `order` (sync requests
///    queueing in the log): async, held across awaits, never held together;
/// 2. `readahead` (read.rs);
/// 3. `meta`;
/// 4. `txg.pending`, then `txg.state` (txg/mod.rs);
/// 5. the intent log's `state`, then its `log` slot (intent/mod.rs);
/// 6. leaves, under which nothing else is taken: `config`, `health`, reclaim's `roots` and
///    `pending_deletes`, `scrub`'s progress, `hot`, the lease's state, the page cache's and the
///    block cache's own locks, and the test hooks; `fetching` takes only the block cache's own
///    lock under it (fetch.rs's `claim`).
///
/// Every lock from 2 on is a blocking lock held for in-memory work only, never across an await.
pub(crate) struct Inner {
    // Identity, fixed at import.
    pub name: String,
    pub guid: u128,
    /// This writer's epoch (segment ids carry it).
    pub epoch: u64,
    pub import_id: u128,
    // Services every layer uses.
    pub store: DynStore,
    pub store_stats: Arc<StoreStats>,
    pub env: Env,
    pub rng: Rng,
    pub config: RwLock<PoolConfig>,
    /// Block-map pages (blockmap/): a leaf, with its own locks.
    pub cache: PageCache,
    /// The ARC and L2ARC: a leaf, with its own locks.
    pub blocks: Arc<dyn BlockCache>,
    pub health: Mutex<health::HealthState>,
    pub counters: counters::Counters,
    // Each subsystem's own state, top to bottom.
    /// The multihost lease (`multihost=on`), set at import (lease.rs).
    pub lease: std::sync::OnceLock<Arc<lease::Lease>>,
    /// The current or last scrub (scrub.rs).
    pub scrub: scrub::ScrubControl,
    /// Demand reads per region, for the hot set saved at export, and warm-up progress (hotset.rs).
    pub hot: hotset::HotTracker,
    pub warmup: hotset::WarmupCounters,
    /// Sequential streams per volume (read.rs).
    pub readahead: readahead::Readahead,
    /// The intent log and the records waiting for a sync request (intent/).
    pub intent: intent::Intent,
    /// Retained roots and freed segments waiting for deletion (reclaim/).
    pub reclaim: reclaim::Reclaim,
    /// The open, syncing and published txgs and the work queued for the next (txg/).
    pub txg: txg::Txgs,
    /// Block GETs in flight, which a second reader of the same block joins (fetch.rs).
    pub fetching: fetch::Fetching,
    /// The root the next txg records: volumes, snapshots, properties, vdevs (meta.rs).
    pub meta: RwLock<meta::Meta>,
    /// Set once the writer was fenced: what it held and where (held.rs). A leaf lock.
    pub held: Mutex<Option<held::HeldSummary>>,
    /// Test hook: a partial-block write that finds a semaphore here waits for one permit after
    /// reading its edge blocks and before taking the txg lock (write.rs).
    #[cfg(test)]
    pub pause_before_write_lock: Mutex<Option<Arc<tokio::sync::Semaphore>>>,
}

/// What a new in-memory pool is made of (shared by import and read-only import).
pub(crate) struct InnerParts<'a> {
    pub store: DynStore,
    pub store_stats: Arc<StoreStats>,
    pub rng: Rng,
    pub config: PoolConfig,
    pub name: &'a str,
    pub root: &'a Root,
    pub import_id: u128,
    pub log: Option<Arc<fardisk_slog::IntentLog>>,
    pub log_devices: LogDevices,
    pub env: Env,
    pub blocks: Arc<dyn BlockCache>,
}

impl Inner {
    /// A new in-memory pool at root `p.root` (the claim root of an import, or the root a
    /// read-only import opens).
    pub(crate) fn new(p: InnerParts<'_>) -> Arc<Inner> {
        let InnerParts {
            store,
            store_stats,
            rng,
            config,
            name,
            root: claim,
            import_id,
            log,
            log_devices,
            env,
            blocks,
        } = p;
        Arc::new(Inner {
            store,
            store_stats,
            rng,
            config: parking_lot::RwLock::new(config.clone()),
            name: name.to_string(),
            guid: claim.pool_guid,
            epoch: claim.epoch,
            import_id,
            cache: PageCache::new(config.map_cache_bytes),
            meta: parking_lot::RwLock::new(meta::Meta::new(claim)),
            txg: txg::Txgs::new(
                claim.txg,
                !claim.free_queue.is_empty() || !claim.destroying.is_empty(),
            ),
            blocks,
            health: Default::default(),
            counters: Default::default(),
            readahead: Default::default(),
            intent: intent::Intent::new(log, log_devices),
            fetching: Default::default(),
            hot: Default::default(),
            warmup: Default::default(),
            scrub: Default::default(),
            reclaim: Default::default(),
            lease: Default::default(),
            held: Default::default(),
            #[cfg(test)]
            pause_before_write_lock: Default::default(),
            env,
        })
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("name", &self.name).field("epoch", &self.epoch).finish()
    }
}

/// A handle to an imported pool. Cloning shares it; background work stops when `export` is
/// called or the last handle is dropped.
#[derive(Debug, Clone)]
pub struct Pool {
    pub(crate) inner: Arc<Inner>,
    tasks: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Drop for Pool {
    fn drop(&mut self) {
        // The last handle (the one owning `tasks` besides background clones) aborts the workers.
        if Arc::strong_count(&self.tasks) == 1 {
            for t in self.tasks.lock().drain(..) {
                t.abort();
            }
        }
    }
}

impl Pool {
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn guid(&self) -> u128 {
        self.inner.guid
    }

    pub fn store_stats(&self) -> Arc<StoreStats> {
        self.inner.store_stats.clone()
    }

    /// The newest published txg.
    pub fn published_txg(&self) -> u64 {
        self.inner.txg.published_txg()
    }

    /// The txg that writes issued now land in.
    pub fn open_txg(&self) -> u64 {
        self.inner.txg.open_txg()
    }

    /// Syncs the open txg now and waits until its root is published. Returns the newest published
    /// txg. A pool with nothing dirty returns at once.
    pub async fn sync_txg(&self) -> Result<u64> {
        syncer::sync_through_open(&self.inner).await
    }

    /// Commits one txg now if anything is queued, queued frees included (each txg frees at most
    /// `free_pages_per_txg_max` pages of them, txg/frees.rs). Returns the txg published, or None
    /// when there was nothing to commit.
    pub async fn sync_step(&self) -> Result<Option<u64>> {
        syncer::sync_once(&self.inner).await
    }

    /// Entries in the newest root's free queue: subtrees whose space later txgs free.
    pub fn free_queue_entries(&self) -> usize {
        self.inner.meta.read().root.free_queue.len()
    }

    /// Destroyed snapshots (and former maps) whose space the next txgs are still freeing, with
    /// each one's cursor in its volume's blocks: (volume id, tree id, cursor block).
    pub fn trees_being_destroyed(&self) -> Vec<(u32, u32, u64)> {
        let meta = self.inner.meta.read();
        meta.root.destroying.iter().map(|d| (d.volume_id, d.tree.tree_id, d.cursor_block)).collect()
    }

    /// A sync request (fsync, NBD FLUSH, FUA): returns once every write acknowledged before the
    /// call is durable — on the intent log when the pool has a healthy one, else in the store.
    pub async fn sync_request(&self) -> Result<()> {
        if self.inner.meta.read().sync_disabled() {
            return Ok(());
        }
        intent::sync_request(&self.inner).await?;
        // multihost=on: durable locally is not enough once another host may have taken the pool.
        if let Some(lease) = self.inner.lease.get() {
            lease.check_acknowledge(&self.inner.env).await?;
        }
        Ok(())
    }

    /// True once the import-time work in the background (listing the roots, cataloguing freed
    /// segments) has ended; until then no freed segment is deleted. The simulation waits for it
    /// so that a seed issues the same store requests in the same order every time.
    pub fn import_settled(&self) -> bool {
        self.inner.reclaim.settled()
    }

    /// Status and statistics of the log devices (None without a log).
    pub fn log(&self) -> Option<Arc<fardisk_slog::IntentLog>> {
        self.inner.intent.log()
    }

    pub(crate) fn from_inner(inner: Arc<Inner>) -> Pool {
        Pool { inner, tasks: Arc::new(Mutex::new(Vec::new())) }
    }

    pub(crate) fn spawn(&self, fut: impl std::future::Future<Output = ()> + Send + 'static) {
        self.tasks.lock().push(tokio::spawn(fut));
    }

    /// Drains everything to the store, publishes a root that marks the pool exported, and stops
    /// background work. The handle must not be used afterwards.
    pub async fn export(&self) -> Result<()> {
        if self.read_only_txg().is_some() {
            // A read-only import wrote nothing and claims nothing.
            for t in self.tasks.lock().drain(..) {
                t.abort();
            }
            return Ok(());
        }
        syncer::sync_until_clean(&self.inner).await?;
        txg::publish_export(&self.inner).await?;
        if let Some(lease) = self.inner.lease.get() {
            if let Err(e) = lease.release(self.inner.store.as_ref(), &self.inner.env).await {
                tracing::warn!(error = %e, "could not release the multihost lease; the next import waits it out");
            }
        }
        for t in self.tasks.lock().drain(..) {
            t.abort();
        }
        Ok(())
    }

    /// Runs one compaction pass now and syncs its moves (tests, `fardisk compact`). Returns the
    /// number of segments whose live blocks were queued for moving.
    pub async fn compact_now(&self) -> Result<usize> {
        let n = reclaim::compact_step(&self.inner).await?;
        syncer::sync_until_clean(&self.inner).await?;
        Ok(n)
    }

    /// Runs one orphan collection pass now (tests; a running pool also collects after import and
    /// every hour). Returns the number of segments deleted.
    pub async fn collect_orphans_now(&self) -> Result<u64> {
        reclaim::collect_orphans(&self.inner).await
    }

    /// Records one event (the command line of a command that changed the pool).
    pub async fn log_history(&self, event: &str) {
        history::record(&self.inner, event).await
    }

    /// The newest `limit` events, oldest first.
    pub async fn history(&self, limit: usize) -> Result<Vec<HistoryEvent>> {
        read_history(self.inner.store.as_ref(), limit).await
    }

    pub(crate) fn check_writable(&self) -> Result<()> {
        self.inner.health.lock().check_writable()
    }
}

pub(crate) fn bad(msg: impl Into<String>) -> Error {
    Error::BadInput(msg.into())
}
