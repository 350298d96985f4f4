//! Copy-on-write radix tree operations over the page cache. Page (L, i) covers slots
//! [i·256^(L+1), (i+1)·256^(L+1)); the top page is (levels-1, 0) and the tree's root pointer
//! points at it. Lookups may run concurrently with the one writer (the txg sync).

use super::cache::{CachedPage, PageCache, PageKey};
use super::page::{
    decode_page, decode_page_hinted, encode_page_hinted, LeafHint, Slot, FANOUT, SLOT_BYTES,
};
use crate::blkptr::BlockPtr;
use crate::compress::Compression;
use crate::error::{Error, Result};
use crate::segment::{BlockOwner, SegmentBuilder};
use bytes::Bytes;
use futures::StreamExt;
use std::sync::Arc;

/// Reads a block by pointer: verified against its checksum, decompressed.
#[async_trait::async_trait]
pub trait BlockSource: Send + Sync {
    async fn read_block(&self, ptr: &BlockPtr) -> Result<Bytes>;

    /// Several blocks, in the order of `ptrs`. A source over a store reads blocks that sit back
    /// to back in one segment with one ranged GET (pool/fetch.rs); this default reads them one
    /// by one.
    async fn read_blocks(&self, ptrs: &[BlockPtr]) -> Result<Vec<Bytes>> {
        let mut out = Vec::with_capacity(ptrs.len());
        for p in ptrs {
            out.push(self.read_block(p).await?);
        }
        Ok(out)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeRef {
    /// Names the tree's pages in the page cache and as owner in segment footers: unique per
    /// volume, snapshot and the space table.
    pub tree_id: u32,
    pub levels: u8,
    pub top: BlockPtr,
    /// Written into every page header and checked on read. A clone inherits its origin's tag
    /// (it shares those pages), so all trees of one lineage carry the tag of the first volume.
    pub page_tag: u32,
}

/// Levels needed to address `slots` slots (at least 1).
pub fn levels_for_slots(slots: u64) -> u8 {
    let mut levels = 1u8;
    while levels < 8 && capacity(levels) < slots {
        levels += 1;
    }
    levels
}

fn capacity(levels: u8) -> u64 {
    1u64.checked_shl(8 * levels as u32).unwrap_or(u64::MAX)
}

fn shr(x: u64, bits: u32) -> u64 {
    x.checked_shr(bits).unwrap_or(0)
}

pub(super) fn slot_pos(slot_index: u64, level: u8) -> usize {
    (shr(slot_index, 8 * level as u32) & 0xff) as usize
}

fn page_index(slot_index: u64, level: u8) -> u64 {
    shr(slot_index, 8 * (level as u32 + 1))
}

/// Slots under page (`level`, `index`): [first, end), saturating at `u64::MAX`.
pub fn page_span(level: u8, index: u64) -> (u64, u64) {
    let shift = 8 * (level as u32 + 1);
    let first = index.checked_shl(shift).unwrap_or(u64::MAX);
    (first, (index + 1).checked_shl(shift).unwrap_or(u64::MAX))
}

impl TreeRef {
    pub fn empty(tree_id: u32, slots: u64) -> TreeRef {
        TreeRef { tree_id, levels: levels_for_slots(slots), top: BlockPtr::HOLE, page_tag: tree_id }
    }

    pub fn capacity_slots(&self) -> u64 {
        capacity(self.levels)
    }

    /// The page holding `slot_index` at `level`, loading ancestors as needed. With `for_update`,
    /// missing pages under holes are created empty, and the target page is marked dirty.
    pub(super) async fn page_for(
        &self,
        cache: &PageCache,
        src: &dyn BlockSource,
        slot_index: u64,
        level: u8,
        for_update: bool,
        generation: Option<u64>,
    ) -> Result<Option<Arc<CachedPage>>> {
        let mut ptr = self.top;
        let mut lvl = self.levels - 1;
        loop {
            let key =
                PageKey { tree_id: self.tree_id, level: lvl, index: page_index(slot_index, lvl) };
            let page = match cache.get(&key) {
                Some(p) => p,
                None if ptr.is_hole() && !for_update => return Ok(None),
                None if ptr.is_hole() => cache.insert_if_absent(
                    key,
                    CachedPage::new(vec![[0u8; SLOT_BYTES]; FANOUT], BlockPtr::HOLE),
                    generation,
                ),
                None => {
                    let bytes = src.read_block(&ptr).await?;
                    let (slots, hints) = decode_page_hinted(&bytes, self.page_tag, lvl, key.index)?;
                    let page = CachedPage::with_hints(slots, hints, ptr);
                    cache.insert_if_absent(key, page, generation)
                }
            };
            if lvl == level {
                if for_update {
                    cache.mark_dirty(key, &page);
                }
                return Ok(Some(page));
            }
            ptr = BlockPtr::from_bytes(&page.slot(slot_pos(slot_index, lvl)))?;
            lvl -= 1;
        }
    }

    /// `generation`: the page cache's generation read before this tree reference was taken.
    pub async fn lookup(
        &self,
        cache: &PageCache,
        src: &dyn BlockSource,
        slot_index: u64,
        generation: u64,
    ) -> Result<Slot> {
        if slot_index >= self.capacity_slots() {
            return Ok([0u8; SLOT_BYTES]);
        }
        match self.page_for(cache, src, slot_index, 0, false, Some(generation)).await? {
            Some(p) => Ok(p.slot(slot_pos(slot_index, 0))),
            None => Ok([0u8; SLOT_BYTES]),
        }
    }

    /// Slots `start..start+count`, which must lie in one leaf page (count <= 256).
    pub async fn lookup_leaf_run(
        &self,
        cache: &PageCache,
        src: &dyn BlockSource,
        start: u64,
        count: usize,
        generation: u64,
    ) -> Result<Vec<Slot>> {
        debug_assert!(slot_pos(start, 0) + count <= FANOUT);
        if start >= self.capacity_slots() {
            return Ok(vec![[0u8; SLOT_BYTES]; count]);
        }
        match self.page_for(cache, src, start, 0, false, Some(generation)).await? {
            Some(p) => {
                let s = p.slots.read();
                let pos = slot_pos(start, 0);
                Ok(s[pos..pos + count].to_vec())
            }
            None => Ok(vec![[0u8; SLOT_BYTES]; count]),
        }
    }

    /// For a read of leaf `leaf` that is not cached: that leaf's pointer and hint from its level-1
    /// page, when that page is cached (no I/O here: a read that has to fetch the level-1 page
    /// first gains nothing from guessing). None when the leaf is cached, a hole, or unhinted.
    pub fn cached_leaf_hint(&self, cache: &PageCache, leaf: u64) -> Option<(BlockPtr, LeafHint)> {
        if self.levels < 2 || leaf >= self.capacity_slots() / FANOUT as u64 {
            return None;
        }
        if cache.get(&PageKey { tree_id: self.tree_id, level: 0, index: leaf }).is_some() {
            return None;
        }
        let parent =
            cache.get(&PageKey { tree_id: self.tree_id, level: 1, index: leaf / FANOUT as u64 })?;
        let pos = (leaf % FANOUT as u64) as usize;
        let ptr = BlockPtr::from_bytes(&parent.slot(pos)).ok().filter(|p| !p.is_hole())?;
        let hint = parent.hint(pos);
        (!hint.is_none()).then_some((ptr, hint))
    }

    /// Level-1 page `parent_index` (it names the leaves of slots `parent_index * FANOUT^2..`),
    /// read with the pages above it where they are not cached.
    pub(super) async fn level1_page(
        &self,
        cache: &PageCache,
        src: &dyn BlockSource,
        parent_index: u64,
        generation: u64,
    ) -> Result<Option<Arc<CachedPage>>> {
        let first_slot = parent_index.checked_shl(16).unwrap_or(u64::MAX);
        self.page_for(cache, src, first_slot, 1, false, Some(generation)).await
    }

    /// Brings the level-1 pages `parents` (each names the leaves of 256 MiB of volume) into the
    /// page cache with the pages above them, `concurrency` GETs at a time: the first alone, so
    /// that the pages above, which they share, are read once. A lookup of a leaf that is not
    /// cached then asks for the leaf alone. Holes are skipped; `generation` as for `lookup`.
    pub async fn load_interior_pages(
        &self,
        cache: &PageCache,
        src: &dyn BlockSource,
        parents: std::ops::Range<u64>,
        generation: u64,
        concurrency: usize,
    ) -> Result<()> {
        if self.levels < 2 || parents.is_empty() {
            return Ok(());
        }
        let load = |parent: u64| self.level1_page(cache, src, parent, generation);
        load(parents.start).await?;
        let loaded: Vec<Result<_>> = futures::stream::iter(parents.start + 1..parents.end)
            .map(load)
            .buffer_unordered(concurrency.max(1))
            .collect()
            .await;
        loaded.into_iter().try_for_each(|r| r.map(|_| ()))
    }

    /// Sets one slot (sync thread only); returns the previous value.
    pub async fn update(
        &self,
        cache: &PageCache,
        src: &dyn BlockSource,
        slot_index: u64,
        slot: Slot,
    ) -> Result<Slot> {
        if slot_index >= self.capacity_slots() {
            return Err(Error::Bug(format!(
                "slot {slot_index} beyond tree {} capacity",
                self.tree_id
            )));
        }
        let page = self
            .page_for(cache, src, slot_index, 0, true, None)
            .await?
            .expect("for_update creates pages");
        let mut slots = page.slots.write();
        let pos = slot_pos(slot_index, 0);
        Ok(std::mem::replace(&mut slots[pos], slot))
    }

    /// Marks the page that currently holds (level, index) dirty so the next sync rewrites it
    /// (compaction moving a page out of a sparse segment).
    pub async fn touch_page(
        &self,
        cache: &PageCache,
        src: &dyn BlockSource,
        level: u8,
        index: u64,
    ) -> Result<()> {
        if level >= self.levels {
            return Ok(());
        }
        let first_slot = index.checked_shl(8 * (level as u32 + 1)).unwrap_or(u64::MAX);
        self.page_for(cache, src, first_slot, level, true, None).await?;
        Ok(())
    }

    /// Where page (level, index) currently lives (HOLE if it does not exist): the cached version's
    /// location, else the parent's pointer. Compaction and scrub decide liveness with it.
    pub async fn page_location(
        &self,
        cache: &PageCache,
        src: &dyn BlockSource,
        level: u8,
        index: u64,
    ) -> Result<BlockPtr> {
        if level >= self.levels {
            return Ok(BlockPtr::HOLE);
        }
        if let Some(p) = cache.get(&PageKey { tree_id: self.tree_id, level, index }) {
            return Ok(*p.location.lock());
        }
        if level + 1 == self.levels {
            return Ok(if index == 0 { self.top } else { BlockPtr::HOLE });
        }
        let first_slot = index.checked_shl(8 * (level as u32 + 1)).unwrap_or(u64::MAX);
        match self.page_for(cache, src, first_slot, level + 1, false, None).await? {
            Some(parent) => BlockPtr::from_bytes(&parent.slot(slot_pos(first_slot, level + 1))),
            None => Ok(BlockPtr::HOLE),
        }
    }

    /// The slots of page (level, index) as the tree holds them now (None where it is a hole).
    /// Snapshot space accounting compares two trees page by page with it.
    pub async fn page_slots(
        &self,
        cache: &PageCache,
        src: &dyn BlockSource,
        level: u8,
        index: u64,
    ) -> Result<Option<Vec<Slot>>> {
        if level >= self.levels || (level + 1 == self.levels && index != 0) {
            return Ok(None);
        }
        let first_slot = index.checked_shl(8 * (level as u32 + 1)).unwrap_or(u64::MAX);
        if first_slot >= self.capacity_slots() {
            return Ok(None);
        }
        Ok(self
            .page_for(cache, src, first_slot, level, false, None)
            .await?
            .map(|p| p.slots.read().clone()))
    }

    /// Adds levels on top so the tree addresses at least `slots` slots (volume grow).
    pub fn grow(&mut self, cache: &PageCache, slots: u64) {
        while self.capacity_slots() < slots && self.levels < 8 {
            let mut top = vec![[0u8; SLOT_BYTES]; FANOUT];
            top[0] = self.top.to_bytes();
            let key = PageKey { tree_id: self.tree_id, level: self.levels, index: 0 };
            let old_top = PageKey { tree_id: self.tree_id, level: self.levels - 1, index: 0 };
            let page = cache.insert_if_absent(key, CachedPage::new(top, BlockPtr::HOLE), None);
            cache.mark_dirty(key, &page);
            // A dirty old top must still reach the new top through the normal parent update.
            if let Some(p) = cache.get(&old_top) {
                if p.state() != super::cache::PageState::Clean {
                    cache.mark_dirty(old_top, &p);
                }
            }
            self.levels += 1;
        }
    }

    /// Encodes every dirty page of this tree into `seg`, bottom-up, updating parents and finally
    /// `self.top`. Returns the page versions that are now garbage, as (level, index, location).
    /// An all-hole page becomes a hole in its parent and costs nothing.
    pub async fn write_dirty(
        &mut self,
        cache: &PageCache,
        src: &dyn BlockSource,
        seg: &mut SegmentBuilder,
        txg: u64,
        algo: Compression,
    ) -> Result<Vec<(u8, u64, BlockPtr)>> {
        let mut freed = Vec::new();
        for level in 0..self.levels {
            for key in cache.take_dirty(self.tree_id, level) {
                let Some(page) = cache.get(&key) else {
                    return Err(Error::Bug(format!("dirty page {key:?} left the cache")));
                };
                // What the parent will remember of where a leaf's blocks are (a volume's
                // leaves: a space table's slots are not block pointers).
                let mut hint = LeafHint::NONE;
                let new_ptr = {
                    let slots = page.slots.read();
                    if slots.iter().all(|s| s.iter().all(|&b| b == 0)) {
                        BlockPtr::HOLE
                    } else {
                        if level == 0 && self.tree_id != crate::space::SPACE_TREE_ID {
                            hint = LeafHint::of_leaf(&slots);
                        }
                        let hints = if level == 1 { page.hints() } else { Vec::new() };
                        let bytes = encode_page_hinted(
                            self.page_tag,
                            level,
                            key.index,
                            txg,
                            &slots,
                            &hints,
                        );
                        let owner =
                            BlockOwner::Page { tree_id: self.tree_id, level, index: key.index };
                        seg.add(owner, &bytes, algo)
                    }
                };
                let old = std::mem::replace(&mut *page.location.lock(), new_ptr);
                if !old.is_hole() {
                    freed.push((level, key.index, old));
                }
                if level + 1 == self.levels {
                    self.top = new_ptr;
                } else {
                    let first_slot =
                        key.index.checked_shl(8 * (level as u32 + 1)).unwrap_or(u64::MAX);
                    let parent = self
                        .page_for(cache, src, first_slot, level + 1, true, None)
                        .await?
                        .expect("created");
                    let pos = slot_pos(first_slot, level + 1);
                    parent.slots.write()[pos] = new_ptr.to_bytes();
                    if level == 0 {
                        parent.set_hint(pos, hint);
                    }
                }
            }
        }
        Ok(freed)
    }
}

/// Visits every page pointer and every leaf slot of a tree (volume destroy, scrub).
#[derive(Debug, Default)]
pub struct TreeWalk {
    pub pages: Vec<(u8, u64, BlockPtr)>,
    pub leaf_slots: Vec<(u64, Slot)>,
}

impl TreeWalk {
    pub async fn walk(
        tree: &TreeRef,
        cache: &PageCache,
        src: &dyn BlockSource,
    ) -> Result<TreeWalk> {
        Self::walk_range(tree, cache, src, 0, u64::MAX).await
    }

    /// Like `walk`, but only pages and leaf slots overlapping slots `start..end` (a trim visits
    /// only what is allocated inside its range).
    pub async fn walk_range(
        tree: &TreeRef,
        cache: &PageCache,
        src: &dyn BlockSource,
        start: u64,
        end: u64,
    ) -> Result<TreeWalk> {
        let mut out = TreeWalk::default();
        let mut frontier = vec![(tree.levels - 1, 0u64, tree.top)];
        while let Some((level, index, ptr)) = frontier.pop() {
            let key = PageKey { tree_id: tree.tree_id, level, index };
            let slots = match cache.get(&key) {
                Some(p) => p.slots.read().clone(),
                None if ptr.is_hole() => continue,
                None => decode_page(&src.read_block(&ptr).await?, tree.page_tag, level, index)?,
            };
            if !ptr.is_hole() {
                out.pages.push((level, index, ptr));
            }
            for (pos, s) in slots.iter().enumerate() {
                if s.iter().all(|&b| b == 0) {
                    continue;
                }
                let child_index = index * FANOUT as u64 + pos as u64;
                // Slots the child covers: [child_index << 8·level, (child_index + 1) << 8·level).
                let span_shift = 8 * level as u32;
                let lo = child_index.checked_shl(span_shift).unwrap_or(u64::MAX);
                let hi = (child_index + 1).checked_shl(span_shift).unwrap_or(u64::MAX);
                if hi <= start || lo >= end {
                    continue;
                }
                if level == 0 {
                    out.leaf_slots.push((child_index, *s));
                } else {
                    frontier.push((level - 1, child_index, BlockPtr::from_bytes(s)?));
                }
            }
        }
        Ok(out)
    }
}
