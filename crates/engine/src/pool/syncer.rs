//! The syncer: one txg at a time, the commit (txg/) and then the reclaim of what its publish
//! made deletable (reclaim/). Every path that needs a txg in the store comes through here: the
//! background loop (which also runs compaction every few txgs), sync requests without a log,
//! `fardisk sync`, export.

use super::{reclaim, txg, Inner};
use crate::error::{Error, Result};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// Compaction looks for sparse segments every this many txgs.
const COMPACT_EVERY_TXGS: u64 = 12;

/// Rounds `sync_until_clean` runs before reporting that writers keep the pool dirty.
const CLEAN_ROUNDS_MAX: u32 = 64;

/// Syncs until nothing is dirty (export, explicit sync). Returns the newest published txg.
/// Queued frees (txg/frees.rs) do not count: they stay in the root for later txgs.
pub(crate) async fn sync_until_clean(inner: &Arc<Inner>) -> Result<u64> {
    for _ in 0..CLEAN_ROUNDS_MAX {
        if inner.txg.only_frees_left() || sync_once(inner).await?.is_none() {
            return Ok(inner.txg.published_txg());
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
    if let Some(target) = inner.txg.txg_holding_all(true) {
        wait_published(inner, target).await?;
    }
    Ok(inner.txg.published_txg())
}

/// The sync path without a usable log: waits until every write acknowledged before the call is in
/// a published txg.
pub(crate) async fn wait_for_open_writes(inner: &Arc<Inner>) -> Result<()> {
    match inner.txg.txg_holding_all(false) {
        Some(target) => wait_published(inner, target).await,
        None => Ok(()),
    }
}

/// Returns once txg `target` (or a later one) is published. Callers that queue on the sync lock
/// while a txg commits look again once they hold it: the first of them commits the next txg,
/// which holds every write made before their requests, and the rest find it published and return
/// without a txg of their own (so concurrent sync requests share one txg).
pub(crate) async fn wait_published(inner: &Arc<Inner>, target: u64) -> Result<()> {
    for _ in 0..CLEAN_ROUNDS_MAX {
        if inner.txg.published_txg() >= target {
            return Ok(());
        }
        let guard = inner.txg.sync_lock.lock().await;
        if inner.txg.published_txg() >= target {
            return Ok(());
        }
        sync_locked(inner, guard, ReclaimWhen::Deferred).await?;
    }
    Err(Error::Bug(format!("txg {target} not published after 64 syncs")))
}

/// Syncs the open txg if it holds anything: commits it, then reclaims what its publish made
/// deletable. Returns the txg published, or None when idle (an idle pool issues no requests at
/// all).
pub(crate) async fn sync_once(inner: &Arc<Inner>) -> Result<Option<u64>> {
    let guard = inner.txg.sync_lock.lock().await;
    sync_locked(inner, guard, ReclaimWhen::Now).await
}

/// When a sync reclaims what its publish made deletable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReclaimWhen {
    /// Before it returns (the syncer, export, `fardisk sync`'s clean passes).
    Now,
    /// By the syncer, outside the sync lock (a sync request waiting for its txg:
    /// reclaim/deferred.rs).
    Deferred,
}

/// [`sync_once`] with the sync lock already held (released when it returns).
async fn sync_locked(
    inner: &Arc<Inner>,
    _guard: tokio::sync::MutexGuard<'_, ()>,
    when: ReclaimWhen,
) -> Result<Option<u64>> {
    inner.health.lock().check_not_fenced()?;
    let Some(frozen) = inner.txg.freeze() else {
        // Nothing to commit: what earlier sync requests left is reclaimed now (export ends so).
        reclaim::run_due(inner).await;
        return Ok(None);
    };
    let started_us = inner.env.clock.mono_us();
    let result = txg::build_and_publish(inner, frozen.txg, &frozen.set, frozen.pending).await;
    if let Ok(published) = &result {
        let (txg, time_ms, work) = (frozen.txg, published.time_ms, frozen.work);
        let deferred = when == ReclaimWhen::Deferred
            && reclaim::defer(inner, txg, time_ms, &published.freed, work);
        if !deferred {
            reclaim::reclaim_now(inner, txg, time_ms, &published.freed, work).await;
        }
    }
    inner.txg.end_sync();
    match &result {
        Ok(_) => {
            inner.counters.record_txg(frozen.set.bytes, inner.env.clock.mono_us() - started_us);
            Ok(Some(frozen.txg))
        }
        Err(e) => {
            // The in-memory map already points at this txg's segments: the pool cannot go on.
            match e {
                Error::Fenced(why) => super::held::fence(inner, why).await,
                _ => inner.health.lock().fault(e),
            }
            Err(Error::Unavailable(format!("txg {} could not be committed: {e}", frozen.txg)))
        }
    }
}

/// A background task of an imported pool (the pool spawns and aborts them).
pub(super) type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The background work of an imported pool, to spawn in this order: the import-time reclaim
/// work, and with `syncer` the hourly orphan pass and the txg syncer loop.
pub(super) fn background(inner: &Arc<Inner>, syncer: bool) -> Vec<Task> {
    let mut tasks: Vec<Task> = Vec::new();
    let settle = inner.clone();
    tasks.push(Box::pin(async move { reclaim::settle_after_import(&settle).await }));
    if !syncer {
        return tasks;
    }
    let orphans = inner.clone();
    tasks.push(Box::pin(async move {
        loop {
            orphans.env.clock.sleep(Duration::from_secs(reclaim::ORPHAN_PASS_EVERY_S)).await;
            if let Err(e) = reclaim::collect_orphans(&orphans).await {
                tracing::warn!(error = %e, "could not collect orphaned segments; will retry in an hour");
            }
        }
    }));
    let looping = inner.clone();
    // From now on (not once the task first runs) reclaim may be left to it.
    reclaim::syncer_started(inner);
    tasks.push(Box::pin(async move { syncer_loop(looping).await }));
    tasks
}

/// Why the syncer woke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    /// `txg_timeout` passed since its last txg.
    Timer,
    /// Kicked: the dirty threshold, a throttled writer, records the log gave up, queued work.
    Kicked,
    /// A reclaim was left for it (reclaim/deferred.rs): reclaim only, no txg.
    ReclaimDue,
}

/// The syncer: a txg every `txg_timeout`, or sooner when kicked (dirty threshold, sync request,
/// queued work); each is committed then reclaimed (`sync_once`), and every `COMPACT_EVERY_TXGS`
/// txgs compaction queues work for the next ones. A wake-up for a deferred reclaim runs the
/// reclaim and nothing else, and does not move the timer.
async fn syncer_loop(inner: Arc<Inner>) {
    let mut since_compact = 0u64;
    let mut last_txg_us = inner.env.clock.mono_us();
    loop {
        let timeout = inner.config.read().txg_timeout.unwrap_or(Duration::from_secs(5));
        let since_us = inner.env.clock.mono_us().saturating_sub(last_txg_us);
        let left = timeout.saturating_sub(Duration::from_micros(since_us));
        let wake = tokio::select! {
            _ = inner.txg.kicked() => Wake::Kicked,
            _ = reclaim::reclaim_due(&inner) => Wake::ReclaimDue,
            _ = inner.env.clock.sleep(left) => Wake::Timer,
        };
        // What sync requests and earlier txgs left, outside the sync lock: the next txg does not
        // wait for it.
        reclaim::run_due(&inner).await;
        if wake == Wake::ReclaimDue {
            continue;
        }
        let by_timer = wake == Wake::Timer;
        last_txg_us = inner.env.clock.mono_us();
        let Ok(guard) = inner.txg.sync_lock.try_lock() else {
            // A sync request is committing, and its txg takes everything written before it:
            // waiting for the lock would only hold up the reclaim it leaves (the next wake-up).
            continue;
        };
        let synced = sync_locked(&inner, guard, ReclaimWhen::Deferred).await;
        match synced {
            Ok(Some(_)) => {
                since_compact += 1;
                // Its reclaim, now that the sync lock is free: sync requests do not wait for it.
                reclaim::run_due(&inner).await;
            }
            // Kicked and nothing to commit: the pool is busy, not idle. The idle work below (a
            // catch-up's roots, the hint) is for a timer wake-up that finds nothing at all.
            Ok(None) if !by_timer => {}
            Ok(None) => {
                probe_if_unreachable(&inner).await;
                // Idle: the newest root's hint, which no next commit will carry (once; not while
                // the store is away, where the PUT would only hold the syncer up).
                if inner.store_stats.unreachable_since_us.load(std::sync::atomic::Ordering::Relaxed)
                    == 0
                {
                    txg::write_due_head_hint(&inner).await;
                }
                if let Err(e) = catch_up_when_idle(&inner).await {
                    tracing::error!(error = %e, "txg sync failed; the pool stops committing");
                    return;
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "txg sync failed; the pool stops committing");
                return;
            }
        }
        if since_compact >= COMPACT_EVERY_TXGS {
            since_compact = 0;
            if let Err(e) = reclaim::compact_step(&inner).await {
                tracing::warn!(error = %e, "compaction step failed; will retry");
            }
        }
    }
}

/// An idle pool that freed segments in its last txgs with work publishes the few roots without
/// changes (at most `roots_kept`, once) after which no retained root references them, so they
/// are deleted now rather than after the next writes (reclaim/delete.rs `catch_up_txgs_due`).
/// The catch-up txgs free only metadata segments of their own, which wait for later work: an
/// idle pool does not churn.
async fn catch_up_when_idle(inner: &Arc<Inner>) -> Result<()> {
    let unreachable =
        inner.store_stats.unreachable_since_us.load(std::sync::atomic::Ordering::Relaxed);
    if unreachable != 0 {
        return Ok(());
    }
    for _ in 0..reclaim::catch_up_txgs_due(inner) {
        inner.txg.queue_catch_up();
        if sync_once(inner).await?.is_none() {
            break;
        }
    }
    Ok(())
}

/// An idle pool asks the store nothing, so a store that went away while it was busy would be
/// reported away forever: one small request (the newest root's size) finds out whether it is
/// back, and its answer clears SUSPENDED.
async fn probe_if_unreachable(inner: &Arc<Inner>) {
    if inner.store_stats.unreachable_since_us.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        return;
    }
    let key = crate::root::root_key(inner.meta.read().root.txg);
    match inner.store.head(&key).await {
        Ok(_) => inner.health.lock().resume(),
        Err(e) => tracing::debug!(error = %e, "the store is still away"),
    }
}
