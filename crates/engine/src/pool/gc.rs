//! Background work of an imported pool: the txg syncer, compaction of sparse segments, and the
//! deferred deletion of freed segments and old roots. Nothing is deleted that a kept root (the
//! newest `roots_kept`) can still reference.

use super::{syncer, Inner, Pool};
use crate::blkptr::BlockPtr;
use crate::blockmap::TreeWalk;
use crate::error::{Error, Result};
use crate::segment::{parse_segment, segment_key, BlockOwner};
use crate::space::{SegmentSpace, SPACE_TREE_ID};
use std::sync::Arc;
use std::time::Duration;

/// Deletes issued per sync at most (bounded work after every txg).
const DELETES_PER_TXG_MAX: usize = 64;
/// Compaction looks for sparse segments every this many txgs.
const COMPACT_EVERY_TXGS: u64 = 12;

pub(crate) fn start_background(pool: &Pool, syncer: bool) {
    let inner = pool.inner.clone();
    pool.spawn(async move {
        // The roots first: nothing is deleted until we know which ones the store retains.
        if let Err(e) = super::point_in_time::load_retained(&inner).await {
            tracing::warn!(error = %e, "could not list the roots at import; nothing is deleted until the next import");
        } else if let Err(e) = catalog(&inner, true).await {
            tracing::warn!(error = %e, "could not walk the space table at import");
        } else if let Err(e) = super::orphans::collect(&inner).await {
            tracing::warn!(error = %e, "could not collect orphaned segments; will retry in an hour");
        }
        inner.roots.lock().settled = true;
    });
    if !syncer {
        return;
    }
    let inner = pool.inner.clone();
    pool.spawn(async move {
        loop {
            inner.env.clock.sleep(Duration::from_secs(super::orphans::ORPHAN_PASS_EVERY_S)).await;
            if let Err(e) = super::orphans::collect(&inner).await {
                tracing::warn!(error = %e, "could not collect orphaned segments; will retry in an hour");
            }
        }
    });
    let inner = pool.inner.clone();
    pool.spawn(async move { syncer_loop(inner).await });
}

async fn syncer_loop(inner: Arc<Inner>) {
    let mut since_compact = 0u64;
    loop {
        let timeout = inner.config.read().txg_timeout.unwrap_or(Duration::from_secs(5));
        tokio::select! {
            _ = inner.kick.notified() => {}
            _ = inner.env.clock.sleep(timeout) => {}
        }
        match syncer::sync_once(&inner).await {
            Ok(Some(_)) => since_compact += 1,
            Ok(None) => probe_if_unreachable(&inner).await,
            Err(e) => {
                tracing::error!(error = %e, "txg sync failed; the pool stops committing");
                return;
            }
        }
        if since_compact >= COMPACT_EVERY_TXGS {
            since_compact = 0;
            if let Err(e) = compact_step(&inner).await {
                tracing::warn!(error = %e, "compaction step failed; will retry");
            }
        }
    }
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

/// Walks the space table: with `rebuild`, re-learns which freed segments still await deletion
/// (after a restart). Returns every live segment's id and space.
async fn catalog(inner: &Arc<Inner>, rebuild: bool) -> Result<Vec<(u64, SegmentSpace)>> {
    let space = inner.meta.read().root.space;
    let walk = TreeWalk::walk(&space, &inner.cache, &**inner).await?;
    let mut live = Vec::new();
    for (seg, slot) in walk.leaf_slots {
        let s = SegmentSpace::from_slot(&slot)?;
        if s.freed_txg != 0 {
            if rebuild {
                inner.meta.write().pending_deletes.insert(seg, s.freed_txg);
            }
        } else if !s.is_empty_slot() {
            live.push((seg, s));
        }
    }
    Ok(live)
}

/// Deletes the roots that left both retention windows, then the segments freed long enough ago
/// that no retained root can reference them.
pub(crate) async fn delete_freed(inner: &Arc<Inner>, published: u64, time_ms: u64) {
    let Some(oldest_root) = super::point_in_time::prune_roots(inner, published, time_ms).await
    else {
        return;
    };
    if matches!(inner.health.lock().health, super::PoolHealth::Suspended(_)) {
        return; // A root delete just waited out a whole retry budget: not another one now.
    }
    let due: Vec<u64> = {
        let meta = inner.meta.read();
        meta.pending_deletes
            .iter()
            .filter(|(_, f)| **f <= oldest_root)
            .map(|(s, _)| *s)
            .take(DELETES_PER_TXG_MAX)
            .collect()
    };
    for seg in due {
        match inner.store.delete(&segment_key(seg)).await {
            Ok(()) => {
                inner.meta.write().pending_deletes.remove(&seg);
                inner.pending.lock().deleted_segments.push(seg);
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

impl Pool {
    /// Runs one compaction pass now and syncs its moves (tests, `fardisk compact`). Returns the
    /// number of segments whose live blocks were queued for moving.
    pub async fn compact_now(&self) -> Result<usize> {
        let n = compact_step(&self.inner).await?;
        syncer::sync_until_clean(&self.inner).await?;
        Ok(n)
    }
}

/// Picks sparse segments and queues their live blocks and pages to move in the next txg.
async fn compact_step(inner: &Arc<Inner>) -> Result<usize> {
    let (pct, budget) = {
        let c = inner.config.read();
        (c.compact_live_percent, c.compact_bytes_per_txg)
    };
    let newest = inner.meta.read().root.txg;
    let mut candidates: Vec<(u64, SegmentSpace)> = catalog(inner, false)
        .await?
        .into_iter()
        .filter(|(_, s)| s.live_bytes * 100 < s.written_bytes * pct && s.created_txg < newest)
        .collect();
    candidates.sort_by_key(|(_, s)| s.live_bytes * 1000 / s.written_bytes.max(1));
    let mut moved_bytes = 0u64;
    let mut count = 0;
    for (seg, s) in candidates {
        if moved_bytes + s.live_bytes > budget && count > 0 {
            break;
        }
        moved_bytes += queue_live_blocks(inner, seg).await?;
        count += 1;
        inner.counters.add_compacted();
    }
    if count > 0 {
        inner.kick.notify_one();
    }
    Ok(count)
}

/// Reads a segment and queues every block the current maps still reference.
async fn queue_live_blocks(inner: &Arc<Inner>, seg: u64) -> Result<u64> {
    let bytes = inner.store.get(&segment_key(seg)).await?;
    let index = parse_segment(&bytes, inner.guid, seg)?;
    // A block a snapshot or clone shares stays where it is (snapshot_space.rs).
    let holds = {
        let meta = inner.meta.read();
        super::txg::snapshot_space::holds(&meta.volumes, &meta.snapshots)
    };
    let held = |tree_id: u32, p: &BlockPtr| {
        tree_id != SPACE_TREE_ID && p.birth_txg <= holds.get(&tree_id).copied().unwrap_or(0)
    };
    let mut moved = 0u64;
    for e in index.entries {
        match e.owner {
            BlockOwner::Data { tree_id, block } => {
                let Some(tree) = inner.meta.read().volumes.get(&tree_id).map(|v| v.tree) else {
                    continue;
                };
                let current = BlockPtr::from_bytes(
                    &tree.lookup(&inner.cache, &**inner, block, inner.cache.generation()).await?,
                )?;
                if current == e.ptr && !held(tree_id, &e.ptr) {
                    let r = e.ptr.range();
                    // A copy: a slice would keep the whole segment (16 MiB) in memory until the
                    // next txg for each of its live blocks, and compaction reads the sparsest ones.
                    let phys =
                        bytes::Bytes::copy_from_slice(&bytes[r.start as usize..r.end as usize]);
                    if crate::codec::checksum64(&phys) != e.ptr.checksum {
                        return Err(Error::Checksum {
                            what: format!("segment {seg:016x} during compaction"),
                            expected: e.ptr.checksum,
                            found: crate::codec::checksum64(&phys),
                        });
                    }
                    moved += phys.len() as u64;
                    inner.pending.lock().relocations.push((tree_id, block, e.ptr, phys));
                }
            }
            BlockOwner::Page { tree_id, level, index } => {
                let tree = if tree_id == SPACE_TREE_ID {
                    inner.meta.read().root.space
                } else {
                    match inner.meta.read().volumes.get(&tree_id).map(|v| v.tree) {
                        Some(t) => t,
                        None => continue,
                    }
                };
                if tree.page_location(&inner.cache, &**inner, level, index).await? == e.ptr
                    && !held(tree_id, &e.ptr)
                {
                    moved += e.ptr.physical_bytes as u64;
                    inner.pending.lock().page_moves.push((tree_id, level, index, e.ptr));
                }
            }
        }
    }
    Ok(moved)
}
