//! A pool: volumes whose durable home is an object store, committed in atomic transaction groups.
//! `open.rs` creates and imports (fencing), `write.rs`/`read.rs` are the data paths, `sync.rs`
//! turns the syncing txg into segments and a root, `gc.rs` compacts and deletes.

mod audit;
mod config;
mod counters;
mod env;
mod fetch;
mod health;
mod history;
mod hotset;
mod intent;
mod lease;
mod meta;
mod names;
mod open;
mod read;
mod reclaim;
mod scrub;
mod snapshot;
mod status;
mod syncer;
mod txg;
mod vdevs;
mod volume;
mod write;

pub use crate::fence::list_root_txgs;
pub use audit::SpaceAudit;
pub use config::{validate_prop, PoolConfig, POOL_PROPS};
pub use env::Env;
pub use health::PoolHealth;
pub use history::{read_history, this_host, write_history_event, HistoryEvent, HISTORY_KEPT};
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

pub(crate) struct Inner {
    pub store: DynStore,
    pub store_stats: Arc<StoreStats>,
    pub env: Env,
    pub rng: Rng,
    pub config: RwLock<PoolConfig>,
    pub name: String,
    pub guid: u128,
    pub epoch: u64,
    pub import_id: u128,
    pub meta: RwLock<meta::Meta>,
    pub txg: txg::Txgs,
    pub cache: PageCache,
    pub blocks: Arc<dyn BlockCache>,
    pub health: Mutex<health::HealthState>,
    pub counters: counters::Counters,
    pub readahead: read::Readahead,
    pub intent: intent::Intent,
    pub prefetching: fetch::Prefetching,
    /// Demand reads per region, for the hot set saved at export (hotset.rs).
    pub hot: hotset::HotTracker,
    pub warmup: hotset::WarmupCounters,
    /// The current or last scrub (scrub.rs).
    pub scrub: scrub::ScrubControl,
    /// Retained roots and freed segments waiting for deletion (reclaim/).
    pub reclaim: reclaim::Reclaim,
    /// Test hook: a partial-block write that finds a semaphore here waits for one permit after
    /// reading its edge blocks and before taking the txg lock (write.rs).
    /// The multihost lease (`multihost=on`), set at import.
    pub lease: std::sync::OnceLock<Arc<lease::Lease>>,
    #[cfg(test)]
    pub pause_before_write_lock: Mutex<Option<Arc<tokio::sync::Semaphore>>>,
}

/// What a new in-memory pool is made of (shared by import and read-only import).
pub(crate) struct InnerParts<'a> {
    pub store: DynStore,
    pub store_stats: Arc<crate::objstore::StoreStats>,
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
            txg: txg::Txgs::new(claim.txg),
            blocks,
            health: Default::default(),
            counters: Default::default(),
            readahead: Default::default(),
            intent: intent::Intent::new(log, log_devices),
            prefetching: Default::default(),
            hot: Default::default(),
            warmup: Default::default(),
            scrub: Default::default(),
            reclaim: Default::default(),
            lease: Default::default(),
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

    pub(crate) fn check_writable(&self) -> Result<()> {
        self.inner.health.lock().check_writable()
    }
}

pub(crate) fn bad(msg: impl Into<String>) -> Error {
    Error::BadInput(msg.into())
}
