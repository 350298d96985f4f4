//! The syncer's side of the trees being destroyed (crate::destroying): each txg, the first such
//! tree of each volume walks on from its cursor, in block order, comparing itself with the tree
//! after it (the next snapshot or tree being destroyed, else the live map) and freeing what it
//! alone held: pages and blocks born after the tree before it that the next tree does not have at
//! the same place. The walk reads at most `free_pages_per_txg_max` pages per txg and stops at a
//! leaf page's boundary; its frees and its cursor's new place go into the same root.
//!
//! Why comparing later gives what comparing at the destroy would have: a live map's change frees
//! a block by the hold at its address (snapshot_space.rs `Holds`). At and above the cursor the
//! tree still holds, so a block it shares that the live map drops stays allocated, and the walk
//! frees it when it gets there and finds the next tree without it. Below the cursor the walk has
//! kept only what the next tree shared, which from then on is the next tree's alone. A page
//! never goes back to an older version, so a subtree that differs once from the next tree's
//! differs at every later look. Design note docs/design/0006-free-queue.md.

use super::retry::CommitReads;
use super::snapshot_space::{next_tree, prev_txg};
use super::space::SpaceDelta;
use crate::blkptr::BlockPtr;
use crate::blockmap::{
    decode_page, page_span, BlockSource, PageKey, Slot, TreeRef, FANOUT, SLOT_BYTES,
};
use crate::destroying::DestroyingTree;
use crate::error::Result;
use crate::pool::Inner;
use crate::root::{SnapshotEntry, VolumeEntry};
use bytes::Bytes;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Works on the trees being destroyed for one txg: at most `pages_max` pages read in all (each
/// walk at least its path to one leaf, so every txg makes progress). Frees go into `delta`;
/// finished trees leave `destroying`. Returns their ids (their cached pages go) and the pages
/// read.
pub(super) async fn work_slices(
    inner: &Arc<Inner>,
    destroying: &mut Vec<DestroyingTree>,
    volumes: &BTreeMap<u32, VolumeEntry>,
    snaps: &BTreeMap<u32, SnapshotEntry>,
    delta: &mut SpaceDelta,
    pages_max: u64,
) -> Result<(Vec<u32>, u64)> {
    let (mut finished, mut started, mut pages) = (Vec::new(), HashSet::new(), 0u64);
    let mut i = 0;
    while i < destroying.len() && pages < pages_max {
        let d = destroying[i];
        // Only a volume's first tree walks; the ones behind it hold all they reference.
        if !started.insert(d.volume_id) {
            i += 1;
            continue;
        }
        let prev = prev_txg(d.volume_id, d.txg, d.floor_txg, snaps, destroying);
        let next = next_tree(d.volume_id, d.txg, volumes, snaps, destroying);
        // Enough for the path to one leaf, this tree's pages and the next tree's.
        let budget = (pages_max - pages).max(2 * (d.tree.levels as u64 + 1));
        let width = inner.config.read().read_concurrency.max(1) as u64;
        let reads = AtomicU64::new(0);
        let walk = Walk { inner, tree: d.tree, prev, next, budget, width, reads };
        let cursor = walk.slice(d.cursor_block, delta).await?;
        pages += cursor.1;
        match cursor.0 {
            Some(c) => {
                destroying[i].cursor_block = c;
                i += 1;
            }
            None => {
                finished.push(d.tree.tree_id);
                destroying.remove(i);
            }
        }
    }
    Ok((finished, pages))
}

/// One tree's walk in one txg.
struct Walk<'a> {
    inner: &'a Arc<Inner>,
    tree: TreeRef,
    /// What is born at or before it belongs to an older tree too.
    prev: u64,
    /// The tree after it (None: nothing comes after, everything unique is freed).
    next: Option<TreeRef>,
    budget: u64,
    /// Leaf pages read at once (`read_concurrency`).
    width: u64,
    /// Pages read so far in this txg: this tree's, and the next tree's the page cache did not
    /// have (`CountedReads`).
    reads: AtomicU64,
}

/// The commit's reads, counted.
struct CountedReads<'a>(&'a Arc<Inner>, &'a AtomicU64);

#[async_trait::async_trait]
impl BlockSource for CountedReads<'_> {
    async fn read_block(&self, ptr: &BlockPtr) -> Result<Bytes> {
        self.1.fetch_add(1, Ordering::Relaxed);
        CommitReads(self.0).read_block(ptr).await
    }
}

/// A page of the walk above the leaves, its slots and the next tree's at the same place.
struct Frame {
    level: u8,
    index: u64,
    ptr: BlockPtr,
    slots: Vec<Slot>,
    next_slots: Option<Vec<Slot>>,
}

impl Walk<'_> {
    /// Walks on from block `cursor` until the budget is spent. Returns the new cursor (None: the
    /// tree is done) and the pages read.
    async fn slice(self, mut cursor: u64, delta: &mut SpaceDelta) -> Result<(Option<u64>, u64)> {
        let (level, top) = (self.tree.levels - 1, self.tree.top);
        if !self.unique(&top, level, 0).await? {
            return Ok((None, 0));
        }
        if level == 0 {
            let next_top = match &self.next {
                Some(n) => {
                    let reads = CountedReads(self.inner, &self.reads);
                    Some(n.page_location(&self.inner.cache, &reads, 0, 0).await?)
                }
                None => None,
            };
            self.free_leaves(&[(0, top, next_top)], delta).await?;
            return Ok((None, self.pages()));
        }
        let mut stack = vec![self.frame(level, 0, top).await?];
        while let Some(f) = stack.last() {
            let (f_level, f_index) = (f.level, f.index);
            // The children still to do, in order: the first that is work, and for leaves up to
            // `read_concurrency` of them to read in one round trip.
            let mut leaves: Vec<(u64, BlockPtr, Option<BlockPtr>)> = Vec::new();
            let mut descend = None;
            let mut out_of_budget = false;
            let leaves_max =
                self.width.min(self.budget.saturating_sub(self.pages()) / self.pages_per_pair());
            for pos in 0..FANOUT {
                let child_index = f_index * FANOUT as u64 + pos as u64;
                let (_, hi) = page_span(f_level - 1, child_index);
                if hi <= cursor {
                    continue;
                }
                let child = BlockPtr::from_bytes(&f.slots[pos])?;
                let shared = f.next_slots.as_ref().is_some_and(|n| n[pos] == f.slots[pos]);
                if child.is_hole() || child.birth_txg <= self.prev || shared {
                    if leaves.is_empty() {
                        cursor = cursor.max(hi); // Nothing of it is this tree's alone.
                    }
                    continue;
                }
                if f_level > 1 {
                    descend = Some((child_index, child));
                    break;
                }
                if leaves.len() as u64 >= leaves_max {
                    out_of_budget = leaves.is_empty();
                    break;
                }
                let next_leaf = match &f.next_slots {
                    Some(n) => Some(BlockPtr::from_bytes(&n[pos])?),
                    None => None,
                };
                leaves.push((child_index, child, next_leaf));
            }
            if !leaves.is_empty() {
                self.free_leaves(&leaves, delta).await?;
                let last = leaves.last().expect("not empty").0;
                cursor = cursor.max(page_span(0, last).1);
            } else if let Some((child_index, child)) = descend {
                if self.pages() >= self.budget {
                    return Ok((Some(cursor), self.pages()));
                }
                stack.push(self.frame(f_level - 1, child_index, child).await?);
            } else if out_of_budget {
                // Leaves left under this page, and nothing left to read them with.
                return Ok((Some(cursor), self.pages()));
            } else {
                // Every child done: the page itself was this tree's alone.
                let f = stack.pop().expect("not empty");
                delta.free(&f.ptr);
                cursor = cursor.max(page_span(f.level, f.index).1);
            }
        }
        Ok((None, self.pages()))
    }

    fn pages(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Whether page (`level`, `index`) at `ptr` holds anything this tree alone has: born after
    /// the previous tree and not the next tree's page at the same place.
    async fn unique(&self, ptr: &BlockPtr, level: u8, index: u64) -> Result<bool> {
        if ptr.is_hole() || ptr.birth_txg <= self.prev {
            return Ok(false);
        }
        Ok(match &self.next {
            Some(n) => {
                let reads = CountedReads(self.inner, &self.reads);
                n.page_location(&self.inner.cache, &reads, level, index).await? != *ptr
            }
            None => true,
        })
    }

    /// Pages one step of the walk reads at most when the next tree's ancestors are cached:
    /// this tree's, and the next tree's at the same place.
    fn pages_per_pair(&self) -> u64 {
        1 + self.next.is_some() as u64
    }

    /// Reads page (`level`, `index`) of this tree and the next tree's at the same place.
    async fn frame(&self, level: u8, index: u64, ptr: BlockPtr) -> Result<Frame> {
        let (slots, next_slots) = self.read_pair(level, index, ptr).await?;
        Ok(Frame { level, index, ptr, slots, next_slots })
    }

    async fn read_pair(
        &self,
        level: u8,
        index: u64,
        ptr: BlockPtr,
    ) -> Result<(Vec<Slot>, Option<Vec<Slot>>)> {
        let reads = CountedReads(self.inner, &self.reads);
        let mine =
            async { decode_page(&reads.read_block(&ptr).await?, self.tree.page_tag, level, index) };
        tokio::try_join!(mine, self.next_slots(level, index))
    }

    /// Leaf page `index` of this tree at `ptr` and of the next tree at `next`.
    async fn read_leaves(
        &self,
        index: u64,
        ptr: BlockPtr,
        next: Option<BlockPtr>,
    ) -> Result<(Vec<Slot>, Option<Vec<Slot>>)> {
        let reads = CountedReads(self.inner, &self.reads);
        let mine =
            async { decode_page(&reads.read_block(&ptr).await?, self.tree.page_tag, 0, index) };
        let theirs = async {
            let Some(n) = &self.next else { return Ok(None) };
            // A cached version is the tree's as it stands (it may not be written yet).
            let key = PageKey { tree_id: n.tree_id, level: 0, index };
            if let Some(page) = self.inner.cache.get(&key) {
                return Ok(Some(page.slots.read().clone()));
            }
            match next {
                Some(p) if !p.is_hole() => {
                    decode_page(&reads.read_block(&p).await?, n.page_tag, 0, index).map(Some)
                }
                _ => Ok(None),
            }
        };
        tokio::try_join!(mine, theirs)
    }

    /// The next tree's slots of page (`level`, `index`) (None: it has no such page). Above the
    /// next tree's top (it grew less) only index 0 exists, its top in slot 0.
    async fn next_slots(&self, level: u8, index: u64) -> Result<Option<Vec<Slot>>> {
        let Some(n) = &self.next else { return Ok(None) };
        if level < n.levels {
            let reads = CountedReads(self.inner, &self.reads);
            return n.page_slots(&self.inner.cache, &reads, level, index).await;
        }
        if index != 0 {
            return Ok(None);
        }
        let mut slots = vec![[0u8; SLOT_BYTES]; FANOUT];
        if level == n.levels {
            slots[0] = n.top.to_bytes();
        }
        Ok(Some(slots))
    }

    /// Frees leaf pages `leaves` (index, pointer, the next tree's leaf there), all this tree's
    /// alone, and their blocks that are: the pages read `read_concurrency` at a time. The next
    /// tree's leaves are read by pointer, past the page cache: a walk through a large volume
    /// would otherwise evict the pages the commit needs (the space table's).
    async fn free_leaves(
        &self,
        leaves: &[(u64, BlockPtr, Option<BlockPtr>)],
        delta: &mut SpaceDelta,
    ) -> Result<()> {
        let reads = leaves.iter().map(|&(index, ptr, next)| self.read_leaves(index, ptr, next));
        let read = futures::future::try_join_all(reads).await?;
        for ((_, ptr, _), (slots, next_slots)) in leaves.iter().zip(read) {
            delta.free(ptr);
            for (pos, s) in slots.iter().enumerate() {
                let block = BlockPtr::from_bytes(s)?;
                let shared = next_slots.as_ref().is_some_and(|n| n[pos] == *s);
                if !block.is_hole() && block.birth_txg > self.prev && !shared {
                    delta.free(&block);
                }
            }
        }
        Ok(())
    }
}
