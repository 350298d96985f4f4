//! Reclaim: giving space back to the store once nothing can need it. It runs after each
//! published txg (the syncer calls `after_publish`) and, for compaction, every few txgs:
//! - retention.rs: which roots the store keeps (`roots_kept`, `root_retention_s`), pruning the rest;
//! - delete.rs: segments freed by a txg, deleted once no retained root can reference them;
//! - compact.rs: sparse segments' live blocks queued for the next txg to rewrite;
//! - orphans.rs: segments of txgs that never published, collected after import and hourly;
//! - deferred.rs: the order they run in, and a sync request's reclaim left to the syncer.
//!
//! Reclaim uses the txg layer (it queues work for the next txg, reads through its snapshot
//! holds), never the syncer or anything above it.

mod compact;
mod deferred;
mod delete;
mod orphans;
mod retention;

pub(super) use compact::compact_step;
pub(super) use deferred::{defer, reclaim_due, reclaim_now, run_due, syncer_started};
pub(super) use delete::catch_up_txgs_due;
pub(super) use orphans::{collect as collect_orphans, ORPHAN_PASS_EVERY_S};
pub(super) use retention::load_retained;

use crate::pool::txg::FreedSegment;
use crate::pool::Inner;
use parking_lot::Mutex;
use retention::RetainedRoots;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What reclaim owns. Its parking_lot locks are leaves: nothing else is locked while one is
/// held. The async `order` lock (deferred.rs) is held across store requests; a sync takes it
/// under the sync lock, never the reverse (reclaim never takes the sync lock).
#[derive(Debug, Default)]
pub(crate) struct Reclaim {
    /// The roots in the store and their ages.
    roots: Mutex<RetainedRoots>,
    /// Freed segments waiting to be deleted: id -> txg that freed them.
    pending_deletes: Mutex<BTreeMap<u64, u64>>,
    /// The newest txg of this import that carried writes or queued work (not a catch-up):
    /// segments freed up to it are worth roots of their own on an idle pool.
    last_work_txg: AtomicU64,
    /// Reclaims of published txgs not run yet, and the order they all run in (deferred.rs).
    deferred: deferred::Deferred,
}

impl Reclaim {
    /// True once the import-time work (listing the roots, cataloguing freed segments) has ended;
    /// until then no freed segment is deleted.
    pub fn settled(&self) -> bool {
        self.roots.lock().settled
    }

    /// Freed segments not deleted yet, including those of a txg whose reclaim is deferred.
    pub fn pending_deletes(&self) -> u64 {
        let deferred = self.deferred.freed_waiting();
        (self.pending_deletes.lock().len() + deferred) as u64
    }
}

/// After txg `published` (its root's time `time_ms`, the segments it freed `freed`, whether it
/// carried `work` or was only a catch-up): records them for deletion, then deletes the roots and
/// segments no retained root needs any more. Run in txg order, one at a time (deferred.rs).
async fn after_publish(
    inner: &Arc<Inner>,
    published: u64,
    time_ms: u64,
    freed: &[FreedSegment],
    work: bool,
) {
    if work {
        inner.reclaim.last_work_txg.fetch_max(published, Ordering::Relaxed);
    }
    inner.reclaim.pending_deletes.lock().extend(freed.iter().map(|f| (f.segment_id, f.freed_txg)));
    delete::delete_freed(inner, published, time_ms).await;
}

/// The import-time work, in the background: the roots first (nothing is deleted until reclaim
/// knows which ones the store retains), then the freed segments still to delete, then orphans.
pub(super) async fn settle_after_import(inner: &Arc<Inner>) {
    if let Err(e) = load_retained(inner).await {
        tracing::warn!(error = %e, "could not list the roots at import; nothing is deleted until the next import");
    } else if let Err(e) = delete::catalog(inner, true).await {
        tracing::warn!(error = %e, "could not walk the space table at import");
    } else if let Err(e) = orphans::collect(inner).await {
        tracing::warn!(error = %e, "could not collect orphaned segments; will retry in an hour");
    }
    inner.reclaim.roots.lock().settled = true;
}
