//! Space with snapshots and clones, by birth txg (as ZFS does it, without deadlists).
//!
//! A volume's *hold* is the newest txg any other tree can still see of it: its newest snapshot's
//! txg, or for a clone its origin snapshot's txg. When the live map stops referencing a block
//! (overwrite, trim, page rewrite), the block is garbage only if it was born after the hold;
//! otherwise a snapshot (or the origin) still references it and it stays live. Destroying a
//! snapshot frees what it alone held: the pages and blocks born after the previous snapshot (or
//! the origin) that the next snapshot (or the live map) does not reference at the same place. The
//! walk skips every subtree the two trees share or that is older than the previous snapshot, so it
//! costs what changed, not the volume's size. Compaction never moves a held block
//! (reclaim/compact.rs): it would have to rewrite every snapshot that shares it.

use super::retry::CommitReads;
use super::PendingMeta;
use crate::blkptr::BlockPtr;
use crate::blockmap::{decode_page, BlockSource, TreeRef, FANOUT};
use crate::error::{Error, Result};
use crate::frees::FreeEntry;
use crate::pool::Inner;
use crate::root::{SnapshotEntry, VolumeEntry};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A change to the snapshot structure, applied by the next txg sync (space moves with it).
#[derive(Debug, Clone)]
pub(crate) enum SnapshotOp {
    /// Freeze volume `volume_id`'s map as this txg leaves it.
    Create {
        id: u32,
        volume_id: u32,
        name: String,
    },
    Destroy {
        id: u32,
    },
    /// The volume's map becomes the snapshot's (the newest of the volume); what the volume
    /// wrote since is freed.
    Rollback {
        volume_id: u32,
        snapshot_id: u32,
    },
    /// The clone takes over its origin's snapshots up to the origin; the former parent becomes a
    /// clone of that snapshot.
    Promote {
        clone_id: u32,
    },
}

/// Hold txg per volume (0: nothing else sees it).
pub(crate) fn holds(
    volumes: &BTreeMap<u32, VolumeEntry>,
    snaps: &BTreeMap<u32, SnapshotEntry>,
) -> HashMap<u32, u64> {
    let mut h: HashMap<u32, u64> = HashMap::new();
    for v in volumes.values() {
        h.insert(v.id, origin_txg(v, snaps));
    }
    for s in snaps.values() {
        let e = h.entry(s.volume_id).or_default();
        *e = (*e).max(s.txg);
    }
    h
}

pub(crate) fn origin_txg(v: &VolumeEntry, snaps: &BTreeMap<u32, SnapshotEntry>) -> u64 {
    v.origin.and_then(|o| snaps.get(&o)).map(|s| s.txg).unwrap_or(0)
}

/// The txg before which snapshot `s` shares everything with an older tree: the previous snapshot
/// of its volume, or the volume's origin.
pub(crate) fn prev_txg(
    s: &SnapshotEntry,
    volumes: &BTreeMap<u32, VolumeEntry>,
    snaps: &BTreeMap<u32, SnapshotEntry>,
) -> u64 {
    let older = snaps
        .values()
        .filter(|o| o.volume_id == s.volume_id && o.txg < s.txg)
        .map(|o| o.txg)
        .max()
        .unwrap_or(0);
    let origin = volumes.get(&s.volume_id).map(|v| origin_txg(v, snaps)).unwrap_or(0);
    older.max(origin)
}

/// The tree after snapshot `s`: the next snapshot of its volume, else the volume's live map.
pub(crate) fn next_tree(
    s: &SnapshotEntry,
    volumes: &BTreeMap<u32, VolumeEntry>,
    snaps: &BTreeMap<u32, SnapshotEntry>,
) -> Option<TreeRef> {
    snaps
        .values()
        .filter(|o| o.volume_id == s.volume_id && o.txg > s.txg)
        .min_by_key(|o| o.txg)
        .map(|o| o.tree)
        .or_else(|| volumes.get(&s.volume_id).map(|v| v.tree))
}

/// Every page and block of `tree` born after `after_txg` that `next` does not reference at the
/// same place (with `next` None: everything born after `after_txg`). Pages are visited
/// `read_concurrency` at a time: a snapshot destroy walks a whole volume's unique pages inside
/// one txg, one store round trip per page when they were read one by one (`big_volume.rs`).
pub(crate) async fn unique_blocks(
    inner: &Arc<Inner>,
    tree: &TreeRef,
    after_txg: u64,
    next: Option<&TreeRef>,
) -> Result<Vec<BlockPtr>> {
    let width = inner.config.read().read_concurrency.max(1);
    let mut out = Vec::new();
    // Depth first (a stack), so it holds at most levels x FANOUT x width entries.
    let mut frontier = vec![(tree.levels - 1, 0u64, tree.top)];
    while !frontier.is_empty() {
        let batch = frontier.split_off(frontier.len().saturating_sub(width));
        let visits = batch.into_iter().map(|page| visit(inner, tree, after_txg, next, page));
        // Results in batch order: the same walk, and the same output, every time.
        for (freed, children) in futures::future::try_join_all(visits).await? {
            out.extend(freed);
            frontier.extend(children);
        }
    }
    Ok(out)
}

/// A page of the walk at (`level`, `index`): what of it is unique (the page and, at the leaves,
/// its blocks) and the child pages to visit.
type Visit = (Vec<BlockPtr>, Vec<(u8, u64, BlockPtr)>);

async fn visit(
    inner: &Arc<Inner>,
    tree: &TreeRef,
    after_txg: u64,
    next: Option<&TreeRef>,
    (level, index, ptr): (u8, u64, BlockPtr),
) -> Result<Visit> {
    let (mut freed, mut children) = (Vec::new(), Vec::new());
    if ptr.is_hole() || ptr.birth_txg <= after_txg {
        return Ok((freed, children));
    }
    let next_slots = match next {
        Some(n) => {
            if n.page_location(&inner.cache, &CommitReads(inner), level, index).await? == ptr {
                return Ok((freed, children)); // The whole subtree is shared.
            }
            n.page_slots(&inner.cache, &CommitReads(inner), level, index).await?
        }
        None => None,
    };
    freed.push(ptr);
    let slots =
        decode_page(&CommitReads(inner).read_block(&ptr).await?, tree.page_tag, level, index)?;
    for (pos, s) in slots.iter().enumerate() {
        let child = BlockPtr::from_bytes(s)?;
        if child.is_hole() || child.birth_txg <= after_txg {
            continue;
        }
        if next_slots.as_ref().is_some_and(|n| n[pos] == *s) {
            continue;
        }
        let child_index = index * FANOUT as u64 + pos as u64;
        if level == 0 {
            freed.push(child);
        } else {
            children.push((level - 1, child_index, child));
        }
    }
    Ok((freed, children))
}

/// What snapshot `s` alone holds among `volumes` and `snaps`: what destroying it frees.
async fn held_only_by(
    inner: &Arc<Inner>,
    s: &SnapshotEntry,
    volumes: &BTreeMap<u32, VolumeEntry>,
    snaps: &BTreeMap<u32, SnapshotEntry>,
) -> Result<Vec<BlockPtr>> {
    let next = next_tree(s, volumes, snaps);
    unique_blocks(inner, &s.tree, prev_txg(s, volumes, snaps), next.as_ref()).await
}

/// Physical bytes a snapshot alone holds: what destroying it would free now.
pub(crate) async fn snapshot_unique_bytes(inner: &Arc<Inner>, id: u32) -> Result<u64> {
    let _guard = inner.txg.sync_lock.lock().await;
    let (volumes, snaps) = {
        let meta = inner.meta.read();
        (meta.volumes.clone(), meta.snapshots.clone())
    };
    let s = snaps.get(&id).ok_or_else(|| Error::BadInput(format!("no snapshot with id {id}")))?;
    let blocks = held_only_by(inner, s, &volumes, &snaps).await?;
    Ok(blocks.iter().map(|p| p.physical_bytes as u64).sum())
}

/// What `apply_ops` changed that the rest of the sync must know.
#[derive(Debug, Default)]
pub(crate) struct OpsOutcome {
    /// Volumes rolled back in this txg: their updates of this txg are dropped, their cached pages
    /// forgotten.
    pub rolled_back: Vec<u32>,
    /// Snapshots destroyed in this txg: their cached pages are forgotten.
    pub destroyed: Vec<u32>,
    /// Pointers that became garbage.
    pub freed: Vec<BlockPtr>,
}

/// Applies the queued destroys, rollbacks and promotes (creates come after the maps are written:
/// `capture_snapshots`).
pub(crate) async fn apply_ops(
    inner: &Arc<Inner>,
    pending: &PendingMeta,
    volumes: &mut BTreeMap<u32, VolumeEntry>,
    snaps: &mut BTreeMap<u32, SnapshotEntry>,
    queue: &mut Vec<FreeEntry>,
) -> Result<OpsOutcome> {
    let mut out = OpsOutcome::default();
    for op in &pending.snapshot_ops {
        match *op {
            SnapshotOp::Create { .. } => {}
            SnapshotOp::Destroy { id } => destroy(inner, id, volumes, snaps, &mut out).await?,
            SnapshotOp::Rollback { volume_id, snapshot_id } => {
                rollback(inner, volume_id, snapshot_id, volumes, snaps, queue, &mut out)?
            }
            SnapshotOp::Promote { clone_id } => promote(clone_id, volumes, snaps),
        }
    }
    Ok(out)
}

/// Destroys snapshot `id`: what it alone held is freed.
async fn destroy(
    inner: &Arc<Inner>,
    id: u32,
    volumes: &BTreeMap<u32, VolumeEntry>,
    snaps: &mut BTreeMap<u32, SnapshotEntry>,
    out: &mut OpsOutcome,
) -> Result<()> {
    let Some(s) = snaps.get(&id).cloned() else { return Ok(()) };
    if volumes.values().any(|v| v.origin == Some(id)) {
        return Err(Error::Bug(format!("snapshot {id} destroyed while a clone needs it")));
    }
    out.freed.extend(held_only_by(inner, &s, volumes, snaps).await?);
    snaps.remove(&id);
    out.destroyed.push(id);
    Ok(())
}

/// Points volume `volume_id`'s map back at snapshot `snapshot_id`'s (its newest): what the
/// volume wrote since (born after the snapshot) is queued for freeing with its former map
/// (frees.rs), not collected here.
fn rollback(
    inner: &Arc<Inner>,
    volume_id: u32,
    snapshot_id: u32,
    volumes: &mut BTreeMap<u32, VolumeEntry>,
    snaps: &BTreeMap<u32, SnapshotEntry>,
    queue: &mut Vec<FreeEntry>,
    out: &mut OpsOutcome,
) -> Result<()> {
    let (Some(s), Some(v)) = (snaps.get(&snapshot_id).cloned(), volumes.get(&volume_id).cloned())
    else {
        return Ok(());
    };
    if snaps.values().any(|o| o.volume_id == volume_id && o.txg > s.txg) {
        return Err(Error::Bug(format!("rollback of volume {volume_id} past a newer snapshot")));
    }
    super::frees::queue_subtree(queue, FreeEntry::whole_tree(&v.tree, s.txg, 0));
    let v = volumes.get_mut(&volume_id).expect("checked above");
    v.tree = TreeRef {
        tree_id: v.id,
        levels: s.tree.levels,
        top: s.tree.top,
        page_tag: s.tree.page_tag,
    };
    v.size_bytes = s.size_bytes;
    v.allocated_blocks = s.allocated_blocks;
    inner.cache.forget_tree(v.id);
    out.rolled_back.push(volume_id);
    Ok(())
}

/// Clone `clone_id` takes over its origin's snapshots up to the origin; the former parent
/// becomes a clone of that snapshot.
fn promote(
    clone_id: u32,
    volumes: &mut BTreeMap<u32, VolumeEntry>,
    snaps: &mut BTreeMap<u32, SnapshotEntry>,
) {
    let Some(origin) = volumes.get(&clone_id).and_then(|c| c.origin) else { return };
    let Some(o) = snaps.get(&origin).cloned() else { return };
    let parent_id = o.volume_id;
    let parent_origin = volumes.get(&parent_id).and_then(|p| p.origin);
    for s in snaps.values_mut().filter(|s| s.volume_id == parent_id && s.txg <= o.txg) {
        s.volume_id = clone_id;
    }
    if let Some(p) = volumes.get_mut(&parent_id) {
        p.origin = Some(origin);
    }
    if let Some(c) = volumes.get_mut(&clone_id) {
        c.origin = parent_origin;
    }
}

/// Records this txg's new snapshots from the maps as the txg leaves them.
pub(crate) fn capture_snapshots(
    pending: &PendingMeta,
    txg: u64,
    time_ms: u64,
    volumes: &BTreeMap<u32, VolumeEntry>,
    snaps: &mut BTreeMap<u32, SnapshotEntry>,
) {
    for op in &pending.snapshot_ops {
        let SnapshotOp::Create { id, volume_id, name } = op else { continue };
        let Some(v) = volumes.get(volume_id) else { continue }; // Destroyed meanwhile.
        snaps.insert(
            *id,
            SnapshotEntry {
                id: *id,
                volume_id: *volume_id,
                name: name.clone(),
                txg,
                time_ms,
                size_bytes: v.size_bytes,
                tree: TreeRef { tree_id: *id, ..v.tree },
                allocated_blocks: v.allocated_blocks,
            },
        );
    }
}
