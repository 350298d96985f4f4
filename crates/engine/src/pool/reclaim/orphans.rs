//! Collection of orphaned segments: objects under `segments/` that a txg uploaded but never
//! published (a crash mid-txg, a writer fenced while it was uploading, txgs discarded by
//! `import --rewind`). Nothing references them, and without this they stay in the bucket forever.
//!
//! Why it is safe: a segment id carries its writer's import epoch (`segment_id`). Once this
//! writer's claim root is published, every writer with an older epoch is fenced at its next root
//! PUT, so no root it could still publish will ever count: a segment of an older epoch can only
//! be referenced through this writer's roots, and this writer's roots reference only what its
//! space table holds (live or freed-but-not-yet-deleted, which covers every retained root: a
//! freed segment leaves the table only when deleted) plus the pages its newest root wrote
//! (`space_carry`, folded into the table by the next txg). Segments of this writer's own epoch
//! (txgs in flight) and of newer epochs (a writer that took over from this one) are never touched.

use crate::blockmap::TreeWalk;
use crate::error::Result;
use crate::pool::Inner;
use crate::segment::segment_key;
use std::collections::HashSet;
use std::sync::Arc;

/// Deletes issued by one collection pass at most (the rest wait for the next pass).
const ORPHAN_DELETES_PER_PASS_MAX: usize = 10_000;
/// How often a running pool collects again (a fenced writer may upload after the import).
pub(crate) const ORPHAN_PASS_EVERY_S: u64 = 3_600;

/// The top 24 bits of a segment id: its writer's epoch.
fn epoch_of(segment_id: u64) -> u64 {
    segment_id >> 40
}

/// Every segment the newest published root can reach through the space table, its pages, the
/// carried slots and the trees' top pointers.
async fn known_segments(inner: &Arc<Inner>) -> Result<HashSet<u64>> {
    let root = inner.meta.read().root.clone();
    let walk = TreeWalk::walk(&root.space, &inner.cache, &**inner).await?;
    let mut known: HashSet<u64> = walk.leaf_slots.iter().map(|(seg, _)| *seg).collect();
    known.extend(walk.pages.iter().map(|(_, _, ptr)| ptr.segment_id));
    known.extend(root.space_carry.iter().map(|(seg, _)| *seg));
    known.insert(root.space.top.segment_id);
    known.extend(root.volumes.iter().map(|v| v.tree.top.segment_id));
    known.extend(root.snapshots.iter().map(|s| s.tree.top.segment_id));
    Ok(known)
}

/// One pass: lists `segments/` and deletes every older-epoch segment nothing references.
/// Returns the number deleted.
pub(crate) async fn collect(inner: &Arc<Inner>) -> Result<u64> {
    let own_epoch = inner.epoch & 0xff_ffff;
    let known = known_segments(inner).await?;
    let listed = inner.store.list("segments/").await?;
    let mut deleted = 0u64;
    let orphans = listed
        .iter()
        .filter_map(|(key, _)| {
            key.strip_prefix("segments/").and_then(|h| u64::from_str_radix(h, 16).ok())
        })
        .filter(|id| epoch_of(*id) < own_epoch && !known.contains(id))
        .take(ORPHAN_DELETES_PER_PASS_MAX);
    for id in orphans {
        inner.store.delete(&segment_key(id)).await?;
        inner.counters.add_orphan_deleted();
        deleted += 1;
    }
    if deleted > 0 {
        tracing::info!(
            deleted,
            "deleted orphaned segments (uploaded by txgs that were never published)"
        );
    }
    Ok(deleted)
}
