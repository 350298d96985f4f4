//! Reclaim off the path of a sync request. Without a log a sync request waits for the txg that
//! holds its writes; the DELETEs that follow its publish (the root that left the retention
//! window, segments freed long enough ago) were a third round trip to the store on that path
//! (`bench/run.sh sync-writes`: p50 128 ms with the store 40 ms away, three round trips). A sync
//! request's txg now leaves its reclaim here, and the syncer runs it, outside the sync lock, so
//! neither that request nor the next txg waits for it.
//!
//! Every reclaim, deferred or not, runs under one lock and in txg order: a txg's root is
//! registered in the retained roots (retention.rs) before a later one's, and a segment is deleted
//! only once every root that could reference it has left. Reclaim may run beside a txg's commit:
//! it deletes only roots older than the newest it registered and segments no root from their
//! freeing txg on references, which no later txg can reference again (a freed segment has no
//! live block for compaction to move). Bounded: past `DUE_MAX` waiting, a sync reclaims at once.

use super::after_publish;
use crate::pool::txg::FreedSegment;
use crate::pool::Inner;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Reclaims waiting for the syncer at most; past it a sync request reclaims before it returns.
const DUE_MAX: usize = 8;

#[derive(Debug, Default)]
pub(crate) struct Deferred {
    /// Oldest first. A leaf lock.
    queue: Mutex<VecDeque<Due>>,
    /// Held while any reclaim runs (they run one at a time, in txg order).
    order: tokio::sync::Mutex<()>,
    /// The background syncer was started: it takes deferred reclaim. Without it (tests that
    /// drive txgs by hand, the simulation) nothing is deferred.
    syncer_running: AtomicBool,
    /// Wakes the syncer for a reclaim only. Not the txg kick: a kick starts a txg, and the
    /// syncer defers its own txgs' reclaim too, so kicking would start the next txg at once,
    /// back to back for as long as anything is dirty (the regression of 448a605: 125 PUTs/s
    /// under TPC-B with a log and the store on loopback, instead of a txg per `txg_timeout`).
    due_wake: tokio::sync::Notify,
}

/// A published txg's reclaim, not run yet.
#[derive(Debug)]
struct Due {
    published: u64,
    time_ms: u64,
    freed: Vec<FreedSegment>,
    work: bool,
}

impl Deferred {
    /// Freed segments of the txgs whose reclaim waits (for `pending_deletes` in status).
    pub fn freed_waiting(&self) -> usize {
        self.queue.lock().iter().map(|d| d.freed.len()).sum()
    }
}

/// Leaves txg `published`'s reclaim to the syncer and wakes it for that (not for a txg). False, doing nothing, when no
/// background syncer runs or `DUE_MAX` reclaims wait already: the caller reclaims now.
pub(crate) fn defer(
    inner: &Arc<Inner>,
    published: u64,
    time_ms: u64,
    freed: &[FreedSegment],
    work: bool,
) -> bool {
    let d = &inner.reclaim.deferred;
    if !d.syncer_running.load(Ordering::Relaxed) {
        return false;
    }
    {
        let mut queue = d.queue.lock();
        if queue.len() >= DUE_MAX {
            return false;
        }
        queue.push_back(Due { published, time_ms, freed: freed.to_vec(), work });
    }
    d.due_wake.notify_one();
    true
}

/// Resolves when a reclaim was left for the syncer (see `Deferred::due_wake`).
pub(crate) fn reclaim_due(inner: &Inner) -> tokio::sync::futures::Notified<'_> {
    inner.reclaim.deferred.due_wake.notified()
}

/// Runs every waiting reclaim, oldest first (the syncer, before each of its txgs, and a sync
/// that found nothing to commit, so export leaves none behind). True when there was one.
pub(crate) async fn run_due(inner: &Arc<Inner>) -> bool {
    let _order = inner.reclaim.deferred.order.lock().await;
    run_queue(inner).await
}

/// Txg `published`'s reclaim now, after the waiting ones.
pub(crate) async fn reclaim_now(
    inner: &Arc<Inner>,
    published: u64,
    time_ms: u64,
    freed: &[FreedSegment],
    work: bool,
) {
    let _order = inner.reclaim.deferred.order.lock().await;
    run_queue(inner).await;
    after_publish(inner, published, time_ms, freed, work).await;
}

/// Called as the background syncer is spawned: from then on reclaim may be left to it.
pub(crate) fn syncer_started(inner: &Arc<Inner>) {
    inner.reclaim.deferred.syncer_running.store(true, Ordering::Relaxed);
}

/// The caller holds `order`. True when there was anything to run.
async fn run_queue(inner: &Arc<Inner>) -> bool {
    let mut ran = false;
    loop {
        let due = inner.reclaim.deferred.queue.lock().pop_front();
        let Some(d) = due else { return ran };
        after_publish(inner, d.published, d.time_ms, &d.freed, d.work).await;
        ran = true;
    }
}
