//! The state an `IntentLog` shares with its writer thread: the vdevs, the group-commit queue,
//! sequence numbers and statistics. `IntentLog` (intent_log.rs) is the callers' side,
//! writer.rs the thread's; both use this, neither the other's internals.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, RwLock};
use tokio::sync::Semaphore;

use crate::clock::Clock;
use crate::config::OpenOptions;
use crate::device::DeviceProvider;
use crate::open::PoolId;
use crate::queue::Queue;
use crate::record::LogRecord;
use crate::release::ReleasePins;
use crate::stats::StatsCounters;
use crate::vdev::{Session, Vdev, WriteCtx, WriteFailure};

/// State shared by the API and the writer thread.
pub(crate) struct Shared {
    pub pool: PoolId,
    pub vdevs: RwLock<Vec<Arc<Vdev>>>,
    pub queue: Mutex<Queue>,
    pub queue_wake: Condvar,
    /// Signalled when the writer runs out of work (see `IntentLog::wait_idle`).
    pub idle_wake: Condvar,
    pub admission: Semaphore,
    pub next_seq: AtomicU64,
    pub session: Session,
    poison_seq: Mutex<Option<u64>>,
    rr_cursor: AtomicUsize,
    pub stats: StatsCounters,
    pub clock: Arc<dyn Clock>,
    pub max_batch_bytes: u64,
    pub provider: Arc<dyn DeviceProvider>,
    /// Replay streams reading the log now, and the release they hold back (release.rs).
    pub release_pins: Mutex<ReleasePins>,
    /// Every vdev's `leg_timeout_ms` (OpenOptions), shared so a change reaches all of them.
    pub leg_timeout_ms: Arc<AtomicU64>,
}

impl Shared {
    pub fn new(
        pool: PoolId,
        vdevs: Vec<Arc<Vdev>>,
        session: Session,
        next_seq: u64,
        opts: &OpenOptions,
        leg_timeout_ms: Arc<AtomicU64>,
    ) -> Shared {
        Shared {
            pool,
            vdevs: RwLock::new(vdevs),
            queue: Mutex::new(Queue::default()),
            queue_wake: Condvar::new(),
            idle_wake: Condvar::new(),
            admission: Semaphore::new(opts.max_waiters.max(1)),
            next_seq: AtomicU64::new(next_seq),
            session,
            poison_seq: Mutex::new(None),
            rr_cursor: AtomicUsize::new(0),
            stats: StatsCounters::default(),
            clock: Arc::clone(&opts.clock),
            max_batch_bytes: opts.max_batch_bytes.max(1),
            provider: Arc::clone(&opts.provider),
            release_pins: Mutex::new(ReleasePins::default()),
            leg_timeout_ms,
        }
    }

    pub fn space_used_bytes(&self) -> u64 {
        self.vdevs.read().iter().map(|v| v.space_used_bytes()).sum()
    }

    pub fn space_total_bytes(&self) -> u64 {
        self.vdevs.read().iter().map(|v| v.space_total_bytes()).sum()
    }

    /// Sequence number below which everything is released.
    pub fn release_seq(&self) -> u64 {
        let vdevs = self.vdevs.read().clone();
        let first_live = vdevs.iter().filter_map(|v| v.ring.lock().first_live_seq()).min();
        first_live.unwrap_or_else(|| self.next_seq.load(Ordering::Acquire))
    }

    /// The largest block any writable vdev could take; `None` when no vdev is writable.
    pub fn max_block_bytes(&self) -> Option<u64> {
        let vdevs = self.vdevs.read().clone();
        vdevs
            .iter()
            .filter_map(|v| {
                let inner = v.inner.lock();
                v.accepts_writes(&inner).then(|| v.ring.lock().max_block_bytes())
            })
            .max()
    }

    /// Writes a block to the next vdev in round-robin order that takes it.
    /// Runs `f` with the context vdev writes need.
    pub fn with_ctx<R>(&self, f: impl FnOnce(&WriteCtx<'_>) -> R) -> R {
        let release_seq = || self.release_seq();
        f(&WriteCtx { session: self.session, stats: &self.stats, release_seq: &release_seq })
    }

    /// Without `flush` the block is written ahead: on the legs, not yet durable.
    pub fn write_to_some_vdev(
        &self,
        first_seq: u64,
        records: &[&LogRecord],
        flush: bool,
    ) -> Result<u64, WriteFailure> {
        let vdevs = self.vdevs.read().clone();
        if vdevs.is_empty() {
            return Err(WriteFailure::AllLegsFailed);
        }
        let start = self.rr_cursor.fetch_add(1, Ordering::Relaxed);
        let mut failure = WriteFailure::NoSpace;
        for step in 0..vdevs.len() {
            let vdev = &vdevs[(start + step) % vdevs.len()];
            let mut inner = vdev.inner.lock();
            if !vdev.accepts_writes(&inner) {
                continue;
            }
            match self.with_ctx(|ctx| vdev.write_block(&mut inner, first_seq, records, flush, ctx))
            {
                Ok(_) => return Ok(vdev.guid),
                Err(WriteFailure::AllLegsFailed) => failure = WriteFailure::AllLegsFailed,
                Err(WriteFailure::NoSpace) => {}
            }
        }
        Err(failure)
    }

    /// Flushes every vdev holding blocks written ahead, so that every record written so far
    /// is durable; true when any vdev needed it. Err with the lowest sequence number that may
    /// now be missing when some vdev could not flush on any leg (its legs are FAULTED).
    pub fn flush_written_ahead(&self) -> Result<bool, u64> {
        let vdevs = self.vdevs.read().clone();
        let mut lost_from: Option<u64> = None;
        let mut flushed = false;
        for vdev in vdevs {
            let mut inner = vdev.inner.lock();
            match vdev.flush_written_ahead(&mut inner, &self.stats) {
                Ok(did) => flushed |= did,
                Err(seq) => lost_from = Some(lost_from.map_or(seq, |s| s.min(seq))),
            }
        }
        lost_from.map_or(Ok(flushed), Err)
    }

    pub fn poison(&self, first_seq: u64) {
        self.poison_seq.lock().get_or_insert(first_seq);
    }

    /// While a failed batch sits between live records and later ones, nothing more may be
    /// acknowledged (replay would stop at the gap): returns the txg to release first.
    pub fn poisoned_txg(&self) -> Option<u64> {
        let mut poison = self.poison_seq.lock();
        let seq = (*poison)?;
        let vdevs = self.vdevs.read().clone();
        let txg = vdevs.iter().filter_map(|v| v.ring.lock().txg_max_before(seq)).max();
        if txg.is_none() {
            *poison = None;
        }
        txg
    }

    pub fn any_head_dirty(&self) -> bool {
        self.vdevs.read().iter().any(|v| v.ring.lock().head_dirty())
    }

    /// Persists the head of every vdev whose in-memory head moved.
    pub fn persist_dirty_heads(&self) {
        let vdevs = self.vdevs.read().clone();
        for vdev in vdevs {
            let mut inner = vdev.inner.lock();
            if vdev.ring.lock().head_dirty() && vdev.accepts_writes(&inner) {
                self.with_ctx(|ctx| vdev.persist_head(&mut inner, ctx));
            }
        }
    }

    /// Writes an empty block of the new epoch on every writable vdev: it cuts off anything
    /// stale beyond the tail and records where the epoch's sequence numbers start.
    pub fn write_epoch_markers(&self) {
        let vdevs = self.vdevs.read().clone();
        let first_seq = self.next_seq.load(Ordering::Acquire);
        for vdev in vdevs {
            let mut inner = vdev.inner.lock();
            if vdev.accepts_writes(&inner) {
                if let Err(failure) =
                    self.with_ctx(|ctx| vdev.write_block(&mut inner, first_seq, &[], true, ctx))
                {
                    tracing::warn!(vdev = vdev.guid, ?failure, "could not write the epoch marker");
                }
            }
        }
    }

    pub fn finish_removal(&self, vdev_guid: u64) {
        let mut vdevs = self.vdevs.write();
        if let Some(index) = vdevs.iter().position(|v| v.guid == vdev_guid) {
            vdevs.remove(index).finish_removal();
            tracing::info!(vdev = vdev_guid, "log vdev removed");
        }
    }
}
