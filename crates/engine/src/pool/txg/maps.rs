//! The block maps' side of a commit, on copies of the volumes and snapshots (the pool's own
//! change only once the root is published, commit.rs `install`): compaction's moves, the queued
//! snapshot changes, trims, every block's new pointer, destroyed volumes and moved pages, and
//! finally every dirtied page written, bottom-up, into the meta segment. Space a map drops is
//! counted in a `SpaceDelta` unless a snapshot or clone still holds it (snapshot_space.rs).
//! Whole subtrees a trim covers, a rollback leaves or a destroyed volume had go to the free queue
//! (frees.rs), which each txg works down a bounded amount.

use super::frees::{self, FreeBudget};
use super::pack::BlockUpdate;
use super::retry::CommitReads;
use super::snapshot_space::{self, FormerMap, Holds, OpsContext, OpsOutcome};
use super::space::SpaceDelta;
use super::{PageMove, PendingMeta, Relocation};
use crate::blkptr::BlockPtr;
use crate::compress::Compression;
use crate::destroying::DestroyingTree;
use crate::dirty::{DirtySet, BLOCK_BYTES};
use crate::error::Result;
use crate::frees::FreeEntry;
use crate::pool::Inner;
use crate::root::{SnapshotEntry, VolumeEntry};
use crate::segment::{BlockOwner, SegmentBuilder};
use crate::space::SPACE_TREE_ID;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The maps as this txg leaves them.
pub(super) struct MapChanges {
    pub volumes: BTreeMap<u32, VolumeEntry>,
    pub snaps: BTreeMap<u32, SnapshotEntry>,
    /// Live bytes the maps dropped, per segment.
    pub delta: SpaceDelta,
    /// What the snapshot changes did (rolled back volumes, destroyed snapshots).
    pub ops: OpsOutcome,
    /// Holds after the snapshot changes and this txg's destroy walks (snapshot_space.rs).
    holds: Holds,
    /// The free queue as this txg leaves it (the root's `free_queue`).
    pub queue: Vec<FreeEntry>,
    /// The trees being destroyed as this txg leaves them (the root's `destroying`).
    pub destroying: Vec<DestroyingTree>,
    /// Cut subtrees, (tree id, level, index): their cached pages are dropped again once the
    /// root is published (commit.rs `install`), after readers of the old tree are done.
    pub cuts: Vec<(u32, u8, u64)>,
}

impl MapChanges {
    /// Copies of the volumes and snapshots as they are now.
    pub fn load(inner: &Inner) -> MapChanges {
        let meta = inner.meta.read();
        MapChanges {
            volumes: meta.volumes.clone(),
            snaps: meta.snapshots.clone(),
            delta: SpaceDelta::default(),
            ops: OpsOutcome::default(),
            holds: Holds::default(),
            queue: meta.root.free_queue.clone(),
            destroying: meta.root.destroying.clone(),
            cuts: Vec::new(),
        }
    }

    /// Applies everything this txg changes in the maps but the page writes, in this order:
    /// compaction's moves (into the meta segment `builder`, adding to `updates`), the snapshot
    /// changes, destroyed volumes, a slice of each destroy walk, trims, the new pointers
    /// `updates`, moved pages, and the free queue's share of this txg.
    pub async fn apply(
        &mut self,
        inner: &Arc<Inner>,
        txg: u64,
        set: &DirtySet,
        pending: &PendingMeta,
        builder: &mut SegmentBuilder,
        updates: &mut Vec<BlockUpdate>,
    ) -> Result<()> {
        let holds_before = snapshot_space::holds(&self.volumes, &self.snaps, &self.destroying);
        relocate(inner, set, &pending.relocations, builder, updates, &holds_before).await?;
        // Destroyed volumes keep their origin's hold, taken before this txg's snapshot changes.
        let destroyed_holds: Vec<u64> =
            pending.destroyed.iter().map(|v| snapshot_space::origin_txg(v, &self.snaps)).collect();
        {
            let mut fresh_tree_id = || {
                let mut meta = inner.meta.write();
                meta.root.next_volume_id += 1;
                meta.root.next_volume_id - 1
            };
            let mut cx = OpsContext {
                txg,
                destroying: &mut self.destroying,
                queue: &mut self.queue,
                fresh_tree_id: &mut fresh_tree_id,
            };
            let (volumes, snaps) = (&mut self.volumes, &mut self.snaps);
            snapshot_space::apply_ops(pending, volumes, snaps, &mut cx, &mut self.ops)?;
        }
        for id in &self.ops.rolled_back {
            inner.cache.forget_tree(*id);
        }
        // Frees queued for a rolled-back volume's former map no longer change its count: the
        // count is the snapshot's now.
        for e in self.queue.iter_mut().filter(|e| self.ops.rolled_back.contains(&e.volume_id)) {
            e.volume_id = 0;
        }
        self.discard_rolled_back(updates);
        // A destroyed volume's map keeps its origin's hold; its id is nobody's any more.
        for (v, hold) in pending.destroyed.iter().zip(destroyed_holds) {
            let former = FormerMap { volume: v, txg, floor_txg: hold, after_txg: hold };
            former.free(&mut self.destroying, &mut self.queue, || v.id);
            inner.cache.forget_tree(v.id);
        }
        // One budget of pages for the destroy walks and the free queue: half each while both
        // have work.
        let pages_max = inner.config.read().free_pages_per_txg_max;
        let walk_pages_max = if self.queue.is_empty() { pages_max } else { pages_max / 2 };
        let (volumes, snaps) = (&self.volumes, &self.snaps);
        let (done, walk_pages) = super::destroy_walk::work_slices(
            inner,
            &mut self.destroying,
            volumes,
            snaps,
            &mut self.delta,
            walk_pages_max,
        )
        .await?;
        for id in done {
            inner.cache.forget_tree(id);
            self.ops.destroyed.push(id);
        }
        self.holds = Holds::new(&self.volumes, &self.snaps, &self.destroying);
        self.apply_trims_and_grows(inner, set).await?;
        self.apply_updates(inner, updates).await?;
        self.move_pages(inner, &pending.page_moves).await?;
        let budget = {
            let c = inner.config.read();
            FreeBudget {
                pages_max: c.free_pages_per_txg_max.saturating_sub(walk_pages),
                entries_max: c.free_queue_entries_max.try_into().unwrap_or(usize::MAX),
            }
        };
        frees::work_down(inner, &mut self.queue, &mut self.delta, &mut self.volumes, budget)
            .await?;
        Ok(())
    }

    /// A rolled-back volume's writes of this txg are discarded (and their new blocks are garbage).
    fn discard_rolled_back(&mut self, updates: &mut Vec<BlockUpdate>) {
        let (rolled_back, delta) = (&self.ops.rolled_back, &mut self.delta);
        updates.retain(|u| {
            let keep = !rolled_back.contains(&u.volume_id);
            if !keep {
                delta.free(&u.ptr);
            }
            keep
        });
    }

    /// Trims first (blocks written after a trim in the same txg are applied after it), and trees
    /// grown to their volume's size.
    async fn apply_trims_and_grows(&mut self, inner: &Arc<Inner>, set: &DirtySet) -> Result<()> {
        for v in self.volumes.values_mut() {
            if v.tree.capacity_slots() < v.size_bytes / BLOCK_BYTES {
                v.tree.grow(&inner.cache, v.size_bytes / BLOCK_BYTES);
            }
        }
        for (&(id, start), &end) in &set.trims {
            if self.ops.rolled_back.contains(&id) {
                continue;
            }
            // One cut per piece with one hold: a destroy walk's cursor may lie inside.
            let mut bounds = vec![start];
            bounds.extend(self.holds.splits(id, start, end));
            bounds.push(end);
            for piece in bounds.windows(2) {
                self.cut(inner, id, piece[0], piece[1]).await?;
            }
        }
        Ok(())
    }

    /// Trims blocks `start..end` of volume `id`, all of one hold.
    async fn cut(&mut self, inner: &Arc<Inner>, id: u32, start: u64, end: u64) -> Result<()> {
        let hold = self.holds.at(id, start);
        let Some(v) = self.volumes.get_mut(&id) else { return Ok(()) };
        let reads = CommitReads(inner);
        // Whole subtrees are cut at their parent and queued; only the edges' leaves here.
        let cut = v.tree.cut_range(&inner.cache, &reads, start, end).await?;
        for old in &cut.leaves {
            self.delta.free_unless_held(old, hold);
            v.allocated_blocks = v.allocated_blocks.saturating_sub(1);
        }
        for (level, index, ptr) in cut.subtrees {
            let (page_tag, volume_id, after_txg) = (v.tree.page_tag, v.id, hold);
            let entry = FreeEntry { page_tag, level, index, ptr, after_txg, volume_id };
            frees::queue_subtree(&mut self.queue, entry);
            self.cuts.push((v.tree.tree_id, level, index));
        }
        Ok(())
    }

    /// Points each updated block at its new location.
    async fn apply_updates(&mut self, inner: &Arc<Inner>, updates: &[BlockUpdate]) -> Result<()> {
        for &BlockUpdate { volume_id, block, ptr: new } in updates {
            let hold = self.holds.at(volume_id, block);
            let Some(v) = self.volumes.get_mut(&volume_id) else { continue }; // Destroyed meanwhile.
            if block >= v.size_bytes / BLOCK_BYTES {
                continue; // Shrunk meanwhile.
            }
            if v.tree.capacity_slots() < v.size_bytes / BLOCK_BYTES {
                v.tree.grow(&inner.cache, v.size_bytes / BLOCK_BYTES);
            }
            let reads = CommitReads(inner);
            let old = v.tree.update(&inner.cache, &reads, block, new.to_bytes()).await?;
            let old = BlockPtr::from_bytes(&old)?;
            self.delta.free_unless_held(&old, hold);
            v.allocated_blocks =
                v.allocated_blocks + (!new.is_hole()) as u64 - (!old.is_hole()) as u64;
        }
        Ok(())
    }

    /// Compaction's page moves: a page still where compaction found it is dirtied, so this txg
    /// writes it anew.
    async fn move_pages(&self, inner: &Arc<Inner>, moves: &[PageMove]) -> Result<()> {
        for &PageMove { tree_id, level, index, old } in moves {
            if self.ops.rolled_back.contains(&tree_id) {
                continue;
            }
            let tree = if tree_id == SPACE_TREE_ID {
                inner.meta.read().root.space
            } else {
                match self.volumes.get(&tree_id) {
                    Some(v) => v.tree,
                    None => continue,
                }
            };
            let reads = CommitReads(inner);
            if tree.page_location(&inner.cache, &reads, level, index).await? == old {
                tree.touch_page(&inner.cache, &reads, level, index).await?;
            }
        }
        Ok(())
    }

    /// Writes every volume's dirtied pages, bottom-up, into the meta segment.
    pub async fn write_pages(
        &mut self,
        inner: &Arc<Inner>,
        txg: u64,
        builder: &mut SegmentBuilder,
        algo: Compression,
    ) -> Result<()> {
        for v in self.volumes.values_mut() {
            let reads = CommitReads(inner);
            for (level, index, old) in
                v.tree.write_dirty(&inner.cache, &reads, builder, txg, algo).await?
            {
                self.delta.free_unless_held(&old, self.holds.of_page(v.id, level, index));
            }
        }
        Ok(())
    }
}

/// Compaction's moves: a block still mapped where compaction found it is copied as is.
async fn relocate(
    inner: &Arc<Inner>,
    set: &DirtySet,
    relocations: &[Relocation],
    builder: &mut SegmentBuilder,
    updates: &mut Vec<BlockUpdate>,
    holds: &HashMap<u32, u64>,
) -> Result<()> {
    for Relocation { tree_id, block, old, physical } in relocations {
        if set.get(*tree_id, *block).is_some() {
            continue; // Overwritten in this txg: the move is moot.
        }
        if old.birth_txg <= holds.get(tree_id).copied().unwrap_or(0) {
            continue; // A snapshot taken since shares it: moving it would keep two copies.
        }
        let Some(tree) = inner.meta.read().volumes.get(tree_id).map(|v| v.tree) else { continue };
        let gen = inner.cache.generation();
        let current = tree.lookup(&inner.cache, &CommitReads(inner), *block, gen).await?;
        if BlockPtr::from_bytes(&current)? != *old {
            continue;
        }
        let owner = BlockOwner::Data { tree_id: *tree_id, block: *block };
        let ptr = builder.add_physical(owner, physical, old.compression()?, old.logical_bytes);
        updates.push(BlockUpdate { volume_id: *tree_id, block: *block, ptr });
    }
    Ok(())
}
