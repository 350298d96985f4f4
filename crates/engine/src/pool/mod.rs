//! A pool: volumes whose durable home is an object store, committed in atomic transaction groups.
//! `open.rs` creates and imports (fencing), `write.rs`/`read.rs` are the data paths, `sync.rs`
//! turns the syncing txg into segments and a root, `gc.rs` compacts and deletes.

mod audit;
mod commit_reads;
mod config;
mod gc;
mod history;
mod hotset;
mod intent;
mod lease;
mod open;
mod orphans;
mod point_in_time;
mod read;
mod rewind;
mod scrub;
mod snapshot;
mod snapshot_space;
mod status;
mod sync;
mod vdevs;
mod volume;
mod write;

pub use audit::SpaceAudit;
pub use config::{validate_prop, PoolConfig, POOL_PROPS};
pub use history::{
    decode_event, encode_event, read_history, this_host, write_history_event, HistoryEvent,
    HISTORY_KEPT,
};
pub use hotset::{decode as decode_hot_set, encode as encode_hot_set, HOT_SET_KEY};
pub use lease::{lease_key, LeaseRecord, LEASE_MARGIN_MS};
pub use open::{check_pool_name, log_configs, CreateOptions, ImportOptions, LogDevices};
pub use point_in_time::{list_root_txgs, PointInTime};
pub use scrub::{ScrubError, ScrubProgress, ScrubState, SCRUB_RATE_MAX_DEFAULT};
pub use snapshot::{split_snapshot_name, SnapshotInfo};
pub use status::{PoolHealth, PoolStatus, VolumeInfo};
pub use vdevs::RemovedVdev;

use crate::blkptr::BlockPtr;
use crate::blockmap::{BlockSource, PageCache};
use crate::cache::BlockCache;
use crate::clock::Clock;
use crate::dirty::DirtySet;
use crate::error::{Error, Result};
use crate::objstore::{DynStore, StoreStats};
use crate::rng::Rng;
use crate::root::{Root, VolumeEntry};
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::{watch, Notify};

/// Shared environment: injected time, randomness and threads.
#[derive(Debug, Clone)]
pub struct Env {
    pub clock: Arc<dyn Clock>,
    pub seed: u64,
    /// Runs CPU and device work (packing segments, cache-device reads, copying a log leg) on the
    /// calling task instead of tokio's blocking threads. Only for a simulation on one thread:
    /// another thread finishing sooner or later would reorder the tasks that run meanwhile, and
    /// a seed would not replay.
    pub blocking_inline: bool,
}

impl Env {
    pub fn system() -> Env {
        // The production environment is where the system clock and a fresh seed come in.
        #[allow(clippy::disallowed_methods)]
        let seed = Rng::from_entropy().next_u64();
        Env { clock: Arc::new(crate::clock::SystemClock::default()), seed, blocking_inline: false }
    }

    /// Runs `work` off the async workers (or inline, see `blocking_inline`).
    pub(crate) async fn blocking<R: Send + 'static>(
        &self,
        what: &str,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> crate::error::Result<R> {
        if self.blocking_inline {
            return Ok(work());
        }
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| crate::error::Error::Bug(format!("{what} task failed: {e}")))
    }
}

/// Work queued for the next sync that is not user data.
#[derive(Debug, Default)]
pub(crate) struct PendingMeta {
    /// Volumes destroyed since the last sync: their trees are freed by the sync.
    pub destroyed: Vec<VolumeEntry>,
    /// Compaction: blocks to move out of sparse segments, (tree, block, old pointer, physical bytes).
    pub relocations: Vec<(u32, u64, BlockPtr, bytes::Bytes)>,
    /// Compaction: pages to rewrite, (tree, level, index, old pointer).
    pub page_moves: Vec<(u32, u8, u64, BlockPtr)>,
    /// Deleted segments whose space slots the next sync clears.
    pub deleted_segments: Vec<u64>,
    /// Snapshot creates, destroys, rollbacks and promotes, in request order.
    pub snapshot_ops: Vec<snapshot_space::SnapshotOp>,
    /// Set when only metadata changed (properties, volume create/resize) so a root is due.
    pub meta_changed: bool,
}

#[derive(Debug)]
pub(crate) struct TxgState {
    pub open: DirtySet,
    pub open_txg: u64,
    pub syncing: Option<Arc<DirtySet>>,
}

/// Everything the in-memory pool knows that the next root will record.
#[derive(Debug)]
pub(crate) struct Meta {
    pub root: Root,
    /// Volumes by id, as of now (ahead of the last published root).
    pub volumes: BTreeMap<u32, VolumeEntry>,
    /// Snapshots by id, as of the last sync (only the sync changes them).
    pub snapshots: BTreeMap<u32, crate::root::SnapshotEntry>,
    /// Segments waiting to be deleted: id -> txg that freed them.
    pub pending_deletes: BTreeMap<u64, u64>,
}

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
    pub meta: RwLock<Meta>,
    pub pending: Mutex<PendingMeta>,
    pub txg: Mutex<TxgState>,
    pub cache: PageCache,
    pub blocks: Arc<dyn BlockCache>,
    /// One sync at a time; held for the whole sync.
    pub sync_lock: tokio::sync::Mutex<()>,
    /// Newest published txg.
    pub published: watch::Sender<u64>,
    /// Wakes the syncer early (dirty threshold, sync request).
    pub kick: Notify,
    /// Wakes writers stalled on the dirty limit.
    pub dirty_freed: Notify,
    pub health: Mutex<status::HealthState>,
    pub counters: status::Counters,
    pub readahead: Mutex<BTreeMap<u32, read::SeqDetector>>,
    pub intent: intent::Intent,
    /// Blocks being prefetched, by location: a demand read of one waits for it instead of
    /// fetching it a second time.
    pub prefetching:
        Mutex<std::collections::HashMap<(u64, u32), tokio::sync::watch::Receiver<bool>>>,
    /// Demand reads per region, for the hot set saved at export (hotset.rs).
    pub hot: hotset::HotTracker,
    pub warmup: hotset::WarmupCounters,
    /// The current or last scrub (scrub.rs).
    pub scrub: scrub::ScrubControl,
    /// Roots in the store and their ages (point_in_time.rs).
    pub roots: Mutex<point_in_time::RetainedRoots>,
    /// Test hook: a partial-block write that finds a semaphore here waits for one permit after
    /// reading its edge blocks and before taking the txg lock (write.rs).
    /// The multihost lease (`multihost=on`), set at import.
    pub lease: std::sync::OnceLock<Arc<lease::Lease>>,
    #[cfg(test)]
    pub pause_before_write_lock: Mutex<Option<Arc<tokio::sync::Semaphore>>>,
}

impl Inner {
    fn prop(&self, volume_id: Option<u32>, key: &str) -> Option<String> {
        let meta = self.meta.read();
        if let Some(v) =
            volume_id.and_then(|id| meta.volumes.get(&id)).and_then(|v| v.props.get(key))
        {
            return Some(v.clone());
        }
        meta.root.props.get(key).cloned()
    }
    /// `sync=always`: every write is a sync request.
    pub fn sync_always(&self) -> bool {
        self.prop(None, "sync").as_deref() == Some("always")
    }
    /// `sync=disabled`: sync requests return at once (unsafe, as in ZFS; for benchmarks only).
    pub fn sync_disabled(&self) -> bool {
        self.prop(None, "sync").as_deref() == Some("disabled")
    }
    /// `logbias=throughput` on the volume (or the pool): big writes skip the log.
    pub fn logbias_throughput(&self, volume_id: u32) -> bool {
        self.prop(Some(volume_id), "logbias").as_deref() == Some("throughput")
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
        *self.inner.published.borrow()
    }

    /// The txg that writes issued now land in.
    pub fn open_txg(&self) -> u64 {
        self.inner.txg.lock().open_txg
    }

    /// Syncs the open txg now and waits until its root is published. Returns the newest published
    /// txg. A pool with nothing dirty returns at once.
    pub async fn sync_txg(&self) -> Result<u64> {
        sync::sync_through_open(&self.inner).await
    }

    /// A sync request (fsync, NBD FLUSH, FUA): returns once every write acknowledged before the
    /// call is durable — on the intent log when the pool has a healthy one, else in the store.
    pub async fn sync_request(&self) -> Result<()> {
        if self.inner.sync_disabled() {
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
        self.inner.roots.lock().settled
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
        sync::sync_until_clean(&self.inner).await?;
        sync::publish_export(&self.inner).await?;
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

    pub(crate) fn check_writable(&self) -> Result<()> {
        self.inner.health.lock().check_writable()
    }
}

/// Reads blocks for the block map through the block cache.
#[async_trait::async_trait]
impl BlockSource for Inner {
    async fn read_block(&self, ptr: &BlockPtr) -> Result<bytes::Bytes> {
        read::read_verified(self, ptr).await
    }
}

pub(crate) fn bad(msg: impl Into<String>) -> Error {
    Error::BadInput(msg.into())
}
