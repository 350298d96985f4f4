//! Deferred deletes: a segment whose live bytes reached zero is marked freed in the space table by
//! the txg that freed it, and deleted from the store once no retained root can reference it (one
//! freed in txg F is referenced by no root from F on). Bounded per txg; a delete that fails is
//! retried after the next one.

use super::retention;
use crate::blockmap::TreeWalk;
use crate::error::Result;
use crate::pool::health::PoolHealth;
use crate::pool::Inner;
use crate::segment::segment_key;
use crate::space::SegmentSpace;
use std::sync::Arc;

/// Deletes issued per sync at most (bounded work after every txg).
const DELETES_PER_TXG_MAX: usize = 64;

/// Walks the space table: with `rebuild`, re-learns which freed segments still await deletion
/// (after a restart). Returns every live segment's id and space.
pub(super) async fn catalog(inner: &Arc<Inner>, rebuild: bool) -> Result<Vec<(u64, SegmentSpace)>> {
    let space = inner.meta.read().root.space;
    let walk = TreeWalk::walk(&space, &inner.cache, &**inner).await?;
    let mut live = Vec::new();
    for (seg, slot) in walk.leaf_slots {
        let s = SegmentSpace::from_slot(&slot)?;
        if s.freed_txg != 0 {
            if rebuild {
                inner.reclaim.pending_deletes.lock().insert(seg, s.freed_txg);
            }
        } else if !s.is_empty_slot() {
            live.push((seg, s));
        }
    }
    Ok(live)
}

/// Roots an idle pool still has to publish before every segment freed by a txg with work (in this
/// import) is out of reach of the retained roots: a segment freed in txg F is referenced by no
/// root from F on, and the count window keeps the newest `roots_kept + 1` roots, so it can go once
/// txg F + `roots_kept` is published. 0 when nothing waits for that (or reclaim has not settled
/// since import). Roots kept by `root_retention_s` leave with time, not with more roots: those
/// segments wait for the next txg after they age out.
pub(crate) fn catch_up_txgs_due(inner: &Arc<Inner>) -> u64 {
    if !inner.reclaim.settled() {
        return 0;
    }
    let last_work = inner.reclaim.last_work_txg.load(std::sync::atomic::Ordering::Relaxed);
    let newest_freed = {
        let pending_deletes = inner.reclaim.pending_deletes.lock();
        pending_deletes.values().copied().filter(|f| *f <= last_work).max()
    };
    let Some(freed_txg) = newest_freed else { return 0 };
    let kept = inner.config.read().roots_kept;
    if kept > CATCH_UP_TXGS_MAX {
        return 0; // A long history was asked for: its roots come from work, not from idling.
    }
    freed_txg.saturating_add(kept).saturating_sub(inner.txg.published_txg()).min(kept)
}

/// The most roots without changes an idle pool publishes to let freed segments go; with a larger
/// `roots_kept` they wait for txgs with work, as before.
const CATCH_UP_TXGS_MAX: u64 = 64;

/// Deletes the roots that left both retention windows, then the segments freed long enough ago
/// that no retained root can reference them.
pub(crate) async fn delete_freed(inner: &Arc<Inner>, published: u64, time_ms: u64) {
    let Some(oldest_root) = retention::prune_roots(inner, published, time_ms).await else {
        return;
    };
    if matches!(inner.health.lock().health, PoolHealth::Suspended(_)) {
        return; // A root delete just waited out a whole retry budget: not another one now.
    }
    let due: Vec<u64> = {
        let pending_deletes = inner.reclaim.pending_deletes.lock();
        pending_deletes
            .iter()
            .filter(|(_, f)| **f <= oldest_root)
            .map(|(s, _)| *s)
            .take(DELETES_PER_TXG_MAX)
            .collect()
    };
    for seg in due {
        match inner.store.delete(&segment_key(seg)).await {
            Ok(()) => {
                inner.reclaim.pending_deletes.lock().remove(&seg);
                inner.txg.pending.lock().deleted_segments.push(seg);
                inner.counters.add_deleted();
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not delete segment {seg:016x}; will retry");
                // The store did not answer through a whole retry budget: say so (the next
                // commit that reaches it clears this).
                if e.is_transient() {
                    inner.health.lock().suspend(format!("deleting freed segments: {e}"));
                }
                break;
            }
        }
    }
}
