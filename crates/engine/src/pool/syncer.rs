//! The syncer: one txg at a time, the commit (txg/) and then the reclaim of what its publish
//! made deletable (gc.rs). Every path that needs a txg in the store comes through here: the
//! background loop, sync requests without a log, `fardisk sync`, export.

use super::{gc, txg, Inner, PendingMeta};
use crate::error::{Error, Result};
use std::sync::Arc;

/// Rounds `sync_until_clean` runs before reporting that writers keep the pool dirty.
const CLEAN_ROUNDS_MAX: u32 = 64;

/// Syncs until nothing is dirty (export, explicit sync). Returns the newest published txg.
pub(crate) async fn sync_until_clean(inner: &Arc<Inner>) -> Result<u64> {
    for _ in 0..CLEAN_ROUNDS_MAX {
        if sync_once(inner).await?.is_none() {
            return Ok(*inner.published.borrow());
        }
    }
    Err(Error::Unavailable(
        "the pool stayed dirty through 64 txg syncs; stop writers and retry".into(),
    ))
}

/// Syncs until every write and metadata change made before the call is in a published txg
/// (`fardisk sync`, `add`, `replace`). Unlike `sync_until_clean`, writers that keep the pool
/// dirty cannot make it give up: later writes are not waited for.
pub(crate) async fn sync_through_open(inner: &Arc<Inner>) -> Result<u64> {
    let target = {
        let pending = inner.pending.lock();
        let t = inner.txg.lock();
        if !t.open.is_empty() || !pending_is_empty(&pending) {
            t.open_txg
        } else if t.syncing.is_some() {
            t.open_txg - 1
        } else {
            return Ok(*inner.published.borrow());
        }
    };
    wait_published(inner, target).await?;
    Ok(*inner.published.borrow())
}

/// The sync path without a usable log: waits until every write acknowledged before the call is in
/// a published txg.
pub(crate) async fn wait_for_open_writes(inner: &Arc<Inner>) -> Result<()> {
    let target = {
        let t = inner.txg.lock();
        if !t.open.is_empty() {
            t.open_txg
        } else if t.syncing.is_some() {
            t.open_txg - 1
        } else {
            return Ok(());
        }
    };
    wait_published(inner, target).await
}

/// Returns once txg `target` (or a later one) is published.
pub(crate) async fn wait_published(inner: &Arc<Inner>, target: u64) -> Result<()> {
    for _ in 0..CLEAN_ROUNDS_MAX {
        if *inner.published.borrow() >= target {
            return Ok(());
        }
        sync_once(inner).await?;
    }
    Err(Error::Bug(format!("txg {target} not published after 64 syncs")))
}

/// Whether queued metadata work needs a txg of its own. Clearing the slots of deleted segments does
/// not: it rides along with the next txg that has real work, or an idle pool would churn forever
/// (each sync rewrites space pages, which frees and later deletes the previous meta segment).
fn pending_is_empty(p: &PendingMeta) -> bool {
    !p.meta_changed
        && p.destroyed.is_empty()
        && p.relocations.is_empty()
        && p.page_moves.is_empty()
        && p.snapshot_ops.is_empty()
}

/// Syncs the open txg if it holds anything. Returns the txg published, or None when idle (an
/// idle pool issues no requests at all).
pub(crate) async fn sync_once(inner: &Arc<Inner>) -> Result<Option<u64>> {
    let _guard = inner.sync_lock.lock().await;
    inner.health.lock().check_not_fenced()?;
    let (txg, set, pending) = {
        let mut pending = inner.pending.lock();
        let mut t = inner.txg.lock();
        if t.open.is_empty() && pending_is_empty(&pending) {
            return Ok(None);
        }
        let set = Arc::new(std::mem::take(&mut t.open));
        t.syncing = Some(set.clone());
        let txg = t.open_txg;
        t.open_txg += 1;
        (txg, set, std::mem::take(&mut *pending))
    };
    let started_us = inner.env.clock.mono_us();
    let result = txg::build_and_publish(inner, txg, &set, pending).await;
    if let Ok(time_ms) = result {
        reclaim_after(inner, txg, time_ms).await;
    }
    inner.txg.lock().syncing = None;
    inner.dirty_freed.notify_waiters();
    match &result {
        Ok(_) => {
            inner.counters.record_txg(set.bytes, inner.env.clock.mono_us() - started_us);
            Ok(Some(txg))
        }
        Err(e) => {
            // The in-memory map already points at this txg's segments: the pool cannot go on.
            inner.health.lock().fault(e);
            Err(Error::Unavailable(format!("txg {txg} could not be committed: {e}")))
        }
    }
}

/// After txg `published` (root time `time_ms`): deletes what no retained root can reference.
async fn reclaim_after(inner: &Arc<Inner>, published: u64, time_ms: u64) {
    gc::delete_freed(inner, published, time_ms).await;
}
