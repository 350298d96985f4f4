//! Leaf map pages in batches (a long read's leaves, a sequential reader's map ahead): which
//! leaves to fetch and where they are stored, planned from the level-1 pages above them, and the
//! fetched pages decoded into the page cache. A caller may fetch them itself between the two
//! steps, so that the same GET brings more of their segment along (pool/map_along.rs).

use super::cache::{CachedPage, PageCache, PageKey};
use super::page::{decode_page, LeafHint, Slot, FANOUT};
use super::tree::{BlockSource, TreeRef};
use crate::blkptr::BlockPtr;
use crate::error::Result;
use bytes::Bytes;
use std::sync::Arc;

/// Leaves in a row a ride-along passes over before it ends (`TreeRef::ride_along`): a txg's edge
/// leaves one or two leaves of a run elsewhere (seen: 1-3).
const RIDE_SKIP_MAX: u64 = 8;

/// A leaf page to fetch: its index, where it is stored, and the level-1 page's hint of where
/// its blocks were written (`LeafHint::NONE` when that page has none).
#[derive(Debug, Clone, Copy)]
pub struct LeafToLoad {
    pub leaf: u64,
    pub ptr: BlockPtr,
    pub hint: LeafHint,
}

impl TreeRef {
    /// Brings the leaf pages `leaves` (ascending leaf indices) into the page cache with one
    /// batched read per level-1 page above them, so leaves stored back to back in a segment (a
    /// txg writes its dirty pages in index order) come in one ranged GET, not one GET each.
    /// After the last wanted leaf, up to `ahead_pages_max` following leaves ride along while
    /// each sits directly after the one before it in the same segment: under the same level-1
    /// page, and on under the next ones while those are cached (they are since import,
    /// pool/map_warm.rs; one not cached ends the ride, as asking for it would cost a round
    /// trip). They cost bytes in that GET and no request, and a sequential reader finds its next
    /// map pages cached: with a budget as large as a txg's pages, one GET per txg's pages.
    /// Leaves already cached or holes are skipped. `generation` as for `lookup`; pages of a tree
    /// that changed meanwhile are not cached (the lookup then reads them itself).
    pub async fn load_leaf_pages(
        &self,
        cache: &PageCache,
        src: &dyn BlockSource,
        leaves: &[u64],
        ahead_pages_max: u64,
        generation: u64,
    ) -> Result<()> {
        let wanted = self.plan_leaf_pages(cache, src, leaves, ahead_pages_max, generation).await?;
        if wanted.is_empty() {
            return Ok(());
        }
        let ptrs: Vec<BlockPtr> = wanted.iter().map(|w| w.ptr).collect();
        let pages = src.read_blocks(&ptrs).await?;
        self.insert_leaf_pages(cache, &wanted, pages, generation, |_| {})
    }

    /// The leaf pages [`TreeRef::load_leaf_pages`] fetches, in leaf order, with their level-1
    /// pages read where they are not cached (the only I/O here).
    pub async fn plan_leaf_pages(
        &self,
        cache: &PageCache,
        src: &dyn BlockSource,
        leaves: &[u64],
        ahead_pages_max: u64,
        generation: u64,
    ) -> Result<Vec<LeafToLoad>> {
        // A one-level tree's only leaf is its top page, which `page_for` loads.
        if self.levels < 2 || leaves.is_empty() {
            return Ok(Vec::new());
        }
        let fanout = FANOUT as u64;
        let leaves_max = self.capacity_slots() / fanout;
        let cached = |leaf: u64| {
            cache.get(&PageKey { tree_id: self.tree_id, level: 0, index: leaf }).is_some()
        };
        // Most reads find their leaves cached: they stop here, without touching the pages above.
        let missing: Vec<u64> =
            leaves.iter().copied().filter(|&l| l < leaves_max && !cached(l)).collect();
        // The missing leaves by parent; the parents not cached come at once, not one round trip
        // after the other (a batch of map pages ahead of a sequential reader spans several).
        let mut groups: Vec<(u64, &[u64])> = Vec::new();
        let mut i = 0;
        while i < missing.len() {
            let parent_index = missing[i] / fanout;
            let under = missing[i..].iter().take_while(|l| *l / fanout == parent_index).count();
            groups.push((parent_index, &missing[i..i + under]));
            i += under;
        }
        let parents = futures::future::join_all(
            groups
                .iter()
                .map(|&(parent_index, _)| self.level1_page(cache, src, parent_index, generation)),
        )
        .await;
        let mut wanted: Vec<LeafToLoad> = Vec::new();
        let groups_n = groups.len();
        for (g, ((_, group), parent)) in groups.into_iter().zip(parents).enumerate() {
            let Some(parent) = parent? else {
                continue; // A hole above: every leaf under it reads as zeros.
            };
            let mut last = None;
            for &leaf in group {
                let pos = (leaf % fanout) as usize;
                let ptr = BlockPtr::from_bytes(&parent.slot(pos))?;
                if !ptr.is_hole() {
                    wanted.push(LeafToLoad { leaf, ptr, hint: parent.hint(pos) });
                    last = Some((leaf, ptr));
                }
            }
            if let (Some((last_leaf, prev)), true) = (last, g + 1 == groups_n) {
                let ahead_end = (last_leaf + 1).saturating_add(ahead_pages_max).min(leaves_max);
                self.ride_along(cache, parent, last_leaf + 1..ahead_end, prev, &mut wanted)?;
            }
        }
        Ok(wanted)
    }

    /// Decodes `pages`, the bytes of `wanted` in its order, into the page cache (pages of a tree
    /// that changed since `generation` are not cached). `visit` sees each page's slots first.
    pub fn insert_leaf_pages(
        &self,
        cache: &PageCache,
        wanted: &[LeafToLoad],
        pages: Vec<Bytes>,
        generation: u64,
        mut visit: impl FnMut(&[Slot]),
    ) -> Result<()> {
        for (w, bytes) in wanted.iter().zip(pages) {
            let slots = decode_page(&bytes, self.page_tag, 0, w.leaf)?;
            visit(&slots);
            let key = PageKey { tree_id: self.tree_id, level: 0, index: w.leaf };
            cache.insert_if_absent(key, CachedPage::new(slots, w.ptr), Some(generation));
        }
        Ok(())
    }

    /// Visits the slots of the cached leaves stored in segment `segment_id` right before leaf
    /// `leaf`, walking back from it (at most `max`): a batch's pages in a segment may follow
    /// leaves of the same txg that a read loaded before (pool/map_along.rs).
    pub fn visit_cached_leaves_before(
        &self,
        cache: &PageCache,
        leaf: u64,
        segment_id: u64,
        max: u64,
        mut visit: impl FnMut(&[Slot]),
    ) {
        for index in (leaf.saturating_sub(max)..leaf).rev() {
            let key = PageKey { tree_id: self.tree_id, level: 0, index };
            let Some(page) = cache.get(&key) else { return };
            if page.location.lock().segment_id != segment_id {
                return;
            }
            visit(&page.slots.read());
        }
    }

    /// The leaves of `range` that ride along after a wanted leaf stored at `prev`, into `wanted`:
    /// each stored directly after the one before it in the same segment, none cached. Up to
    /// `RIDE_SKIP_MAX` leaves in a row that are not (stored elsewhere, holes, cached) are passed
    /// over before the ride ends: at a txg's edge racing writers leave a leaf or two of one txg's
    /// run among the next txg's, and those would otherwise cost a GET of a page each. `parent` is
    /// the level-1 page above `range.start - 1`; past it the ride goes on under the next level-1
    /// pages only while those are cached.
    fn ride_along(
        &self,
        cache: &PageCache,
        mut parent: Arc<CachedPage>,
        range: std::ops::Range<u64>,
        mut prev: BlockPtr,
        wanted: &mut Vec<LeafToLoad>,
    ) -> Result<()> {
        let fanout = FANOUT as u64;
        let mut passed_over = 0;
        for leaf in range {
            if leaf % fanout == 0 {
                let key = PageKey { tree_id: self.tree_id, level: 1, index: leaf / fanout };
                let Some(next) = cache.get(&key) else { break };
                parent = next;
            }
            let leaf_key = PageKey { tree_id: self.tree_id, level: 0, index: leaf };
            let pos = (leaf % fanout) as usize;
            let ptr = BlockPtr::from_bytes(&parent.slot(pos))?;
            let adjacent =
                ptr.segment_id == prev.segment_id && ptr.range().start == prev.range().end;
            if ptr.is_hole() || !adjacent || cache.get(&leaf_key).is_some() {
                passed_over += 1;
                if passed_over > RIDE_SKIP_MAX {
                    break;
                }
                continue;
            }
            passed_over = 0;
            wanted.push(LeafToLoad { leaf, ptr, hint: parent.hint(pos) });
            prev = ptr;
        }
        Ok(())
    }
}
