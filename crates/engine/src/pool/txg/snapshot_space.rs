//! Space with snapshots and clones, by birth txg (as ZFS does it, without deadlists).
//!
//! A volume's *hold* is the newest txg any other tree can still see of it: its newest snapshot's
//! txg, or for a clone its origin snapshot's txg. When the live map stops referencing a block
//! (overwrite, trim, page rewrite), the block is garbage only if it was born after the hold;
//! otherwise a snapshot (or the origin) still references it and it stays live. Destroying a
//! snapshot frees what it alone held: the pages and blocks born after the previous snapshot (or
//! the origin) that the next snapshot (or the live map) does not reference at the same place, a
//! bounded slice per txg (destroy_walk.rs): until its walk passes an address the destroyed
//! snapshot still holds there (`Holds`). The walk skips every subtree the two trees share or that
//! is older than the previous snapshot, so it costs what changed, not the volume's size.
//! Compaction never moves a held block (reclaim/compact.rs): it would have to rewrite every
//! snapshot that shares it.

use super::PendingMeta;
use crate::blockmap::{page_span, TreeRef};
use crate::destroying::DestroyingTree;
use crate::error::{Error, Result};
use crate::frees::FreeEntry;
use crate::root::{SnapshotEntry, VolumeEntry};
use std::collections::{BTreeMap, HashMap};

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

/// Hold txg per volume (0: nothing else sees it), counting every tree being destroyed as a
/// snapshot over the whole volume: compaction and its relocations never move what any tree may
/// still hold.
pub(crate) fn holds(
    volumes: &BTreeMap<u32, VolumeEntry>,
    snaps: &BTreeMap<u32, SnapshotEntry>,
    destroying: &[DestroyingTree],
) -> HashMap<u32, u64> {
    let mut h: HashMap<u32, u64> = HashMap::new();
    for v in volumes.values() {
        h.insert(v.id, origin_txg(v, snaps));
    }
    let snaps = snaps.values().map(|s| (s.volume_id, s.txg));
    for (volume_id, txg) in snaps.chain(destroying.iter().map(|d| (d.volume_id, d.txg))) {
        let e = h.entry(volume_id).or_default();
        *e = (*e).max(txg);
    }
    h
}

/// The holds that decide what a live map's change frees, per block address: a tree being
/// destroyed holds what it references at and above its cursor and nothing below it (its walk
/// has freed what it alone held there and left the rest to the trees that share it).
#[derive(Debug, Default)]
pub(crate) struct Holds {
    /// Per volume, from its origin and snapshots.
    whole: HashMap<u32, u64>,
    /// Per volume, its trees being destroyed: (cursor block, txg).
    partial: HashMap<u32, Vec<(u64, u64)>>,
}

impl Holds {
    pub fn new(
        volumes: &BTreeMap<u32, VolumeEntry>,
        snaps: &BTreeMap<u32, SnapshotEntry>,
        destroying: &[DestroyingTree],
    ) -> Holds {
        let mut partial: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
        for d in destroying {
            partial.entry(d.volume_id).or_default().push((d.cursor_block, d.txg));
        }
        Holds { whole: holds(volumes, snaps, &[]), partial }
    }

    /// The hold of block `block` of volume `volume_id`'s live map.
    pub fn at(&self, volume_id: u32, block: u64) -> u64 {
        let whole = self.whole.get(&volume_id).copied().unwrap_or(0);
        let partial = self.partial.get(&volume_id).into_iter().flatten();
        partial.filter(|(cursor, _)| block >= *cursor).fold(whole, |h, (_, txg)| h.max(*txg))
    }

    /// The hold of map page (`level`, `index`): that of its first block. A page a tree being
    /// destroyed still shares never straddles that tree's cursor: its walk skips a shared page
    /// whole, so the cursor jumps past it.
    pub fn of_page(&self, volume_id: u32, level: u8, index: u64) -> u64 {
        self.at(volume_id, page_span(level, index).0)
    }

    /// The blocks inside `start..end` of volume `volume_id` where the hold changes: a trim is
    /// cut there, so each piece's subtrees are queued with one hold.
    pub fn splits(&self, volume_id: u32, start: u64, end: u64) -> Vec<u64> {
        let mut at: Vec<u64> = (self.partial.get(&volume_id).into_iter().flatten())
            .map(|(cursor, _)| *cursor)
            .filter(|c| *c > start && *c < end)
            .collect();
        at.sort_unstable();
        at.dedup();
        at
    }
}

pub(crate) fn origin_txg(v: &VolumeEntry, snaps: &BTreeMap<u32, SnapshotEntry>) -> u64 {
    v.origin.and_then(|o| snaps.get(&o)).map(|s| s.txg).unwrap_or(0)
}

/// The txg before which the version of volume `volume_id` at `txg` shares everything with an
/// older tree: the volume's previous snapshot or tree being destroyed, or `floor_txg` (its
/// origin's).
pub(crate) fn prev_txg(
    volume_id: u32,
    txg: u64,
    floor_txg: u64,
    snaps: &BTreeMap<u32, SnapshotEntry>,
    destroying: &[DestroyingTree],
) -> u64 {
    let snaps = snaps.values().map(|s| (s.volume_id, s.txg));
    let trees = destroying.iter().map(|d| (d.volume_id, d.txg));
    (snaps.chain(trees))
        .filter(|(v, t)| *v == volume_id && *t < txg)
        .map(|(_, t)| t)
        .fold(floor_txg, u64::max)
}

/// The tree after the version of volume `volume_id` at `txg`: its next snapshot or tree being
/// destroyed, else the volume's live map (None once the volume is destroyed).
pub(crate) fn next_tree(
    volume_id: u32,
    txg: u64,
    volumes: &BTreeMap<u32, VolumeEntry>,
    snaps: &BTreeMap<u32, SnapshotEntry>,
    destroying: &[DestroyingTree],
) -> Option<TreeRef> {
    let snaps = snaps.values().map(|s| (s.volume_id, s.txg, s.tree));
    let trees = destroying.iter().map(|d| (d.volume_id, d.txg, d.tree));
    (snaps.chain(trees))
        .filter(|(v, t, _)| *v == volume_id && *t > txg)
        .min_by_key(|(_, t, _)| *t)
        .map(|(_, _, tree)| tree)
        .or_else(|| volumes.get(&volume_id).map(|v| v.tree))
}

/// What `apply_ops` changed that the rest of the sync must know.
#[derive(Debug, Default)]
pub(crate) struct OpsOutcome {
    /// Volumes rolled back in this txg: their updates of this txg are dropped, their cached pages
    /// forgotten.
    pub rolled_back: Vec<u32>,
    /// Trees whose destroy ended in this txg (destroy_walk.rs): their cached pages are
    /// forgotten.
    pub destroyed: Vec<u32>,
}

/// What a snapshot change needs besides the maps: the txg being committed, and where a tree
/// that leaves a volume with trees being destroyed goes.
pub(crate) struct OpsContext<'a> {
    pub txg: u64,
    pub destroying: &'a mut Vec<DestroyingTree>,
    pub queue: &'a mut Vec<FreeEntry>,
    /// A fresh page-cache namespace for a rolled-back volume's former map.
    pub fresh_tree_id: &'a mut dyn FnMut() -> u32,
}

/// Applies the queued destroys, rollbacks and promotes (creates come after the maps are written:
/// `capture_snapshots`).
pub(crate) fn apply_ops(
    pending: &PendingMeta,
    volumes: &mut BTreeMap<u32, VolumeEntry>,
    snaps: &mut BTreeMap<u32, SnapshotEntry>,
    cx: &mut OpsContext,
    out: &mut OpsOutcome,
) -> Result<()> {
    for op in &pending.snapshot_ops {
        match *op {
            SnapshotOp::Create { .. } => {}
            SnapshotOp::Destroy { id } => destroy(id, volumes, snaps, cx.destroying)?,
            SnapshotOp::Rollback { volume_id, snapshot_id } => {
                rollback(volume_id, snapshot_id, volumes, snaps, cx, out)?
            }
            SnapshotOp::Promote { clone_id } => promote(clone_id, volumes, snaps),
        }
    }
    Ok(())
}

/// Destroys snapshot `id`: it leaves the snapshots at once and joins the trees being destroyed,
/// whose walk frees what it alone held a bounded slice per txg (destroy_walk.rs).
fn destroy(
    id: u32,
    volumes: &BTreeMap<u32, VolumeEntry>,
    snaps: &mut BTreeMap<u32, SnapshotEntry>,
    destroying: &mut Vec<DestroyingTree>,
) -> Result<()> {
    let Some(s) = snaps.get(&id).cloned() else { return Ok(()) };
    if volumes.values().any(|v| v.origin == Some(id))
        || destroying.iter().any(|d| d.origin == Some(id))
    {
        return Err(Error::Bug(format!("snapshot {id} destroyed while a clone needs it")));
    }
    let volume = volumes.get(&s.volume_id);
    destroying.push(DestroyingTree {
        volume_id: s.volume_id,
        txg: s.txg,
        tree: s.tree,
        floor_txg: volume.map(|v| origin_txg(v, snaps)).unwrap_or(0),
        origin: volume.and_then(|v| v.origin),
        cursor_block: 0,
    });
    snaps.remove(&id);
    Ok(())
}

/// Points volume `volume_id`'s map back at snapshot `snapshot_id`'s (its newest): what the
/// volume wrote since (born after the snapshot) is queued for freeing with its former map
/// (frees.rs), not collected here. While the volume has trees being destroyed, whose walks
/// compare with the trees after them, the former map joins them instead.
fn rollback(
    volume_id: u32,
    snapshot_id: u32,
    volumes: &mut BTreeMap<u32, VolumeEntry>,
    snaps: &BTreeMap<u32, SnapshotEntry>,
    cx: &mut OpsContext,
    out: &mut OpsOutcome,
) -> Result<()> {
    let (Some(s), Some(v)) = (snaps.get(&snapshot_id).cloned(), volumes.get(&volume_id).cloned())
    else {
        return Ok(());
    };
    if snaps.values().any(|o| o.volume_id == volume_id && o.txg > s.txg) {
        return Err(Error::Bug(format!("rollback of volume {volume_id} past a newer snapshot")));
    }
    let (txg, floor_txg) = (cx.txg, origin_txg(&v, snaps));
    let former = FormerMap { volume: &v, txg, floor_txg, after_txg: s.txg };
    former.free(cx.destroying, cx.queue, || (cx.fresh_tree_id)());
    let v = volumes.get_mut(&volume_id).expect("checked above");
    v.tree = TreeRef {
        tree_id: v.id,
        levels: s.tree.levels,
        top: s.tree.top,
        page_tag: s.tree.page_tag,
    };
    v.size_bytes = s.size_bytes;
    v.allocated_blocks = s.allocated_blocks;
    out.rolled_back.push(volume_id);
    Ok(())
}

/// A volume's map that leaves it (rolled back, or the volume destroyed) in txg `txg`.
pub(crate) struct FormerMap<'a> {
    pub volume: &'a VolumeEntry,
    pub txg: u64,
    /// The volume's origin hold.
    pub floor_txg: u64,
    /// What is born at or before it stays: the rollback's snapshot, or the origin.
    pub after_txg: u64,
}

impl FormerMap<'_> {
    /// Freed through the free queue by what `after_txg` does not hold; while trees of the
    /// volume are being destroyed, whose walks compare with the trees after them, it joins
    /// them instead, as the newest, under the page-cache id `tree_id` gives.
    pub fn free(
        self,
        destroying: &mut Vec<DestroyingTree>,
        queue: &mut Vec<FreeEntry>,
        tree_id: impl FnOnce() -> u32,
    ) {
        let v = self.volume;
        if !destroying.iter().any(|d| d.volume_id == v.id) {
            super::frees::queue_subtree(queue, FreeEntry::whole_tree(&v.tree, self.after_txg, 0));
            return;
        }
        destroying.push(DestroyingTree {
            volume_id: v.id,
            txg: self.txg,
            tree: TreeRef { tree_id: tree_id(), ..v.tree },
            floor_txg: self.floor_txg,
            origin: v.origin,
            cursor_block: 0,
        });
    }
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
