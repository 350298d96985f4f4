//! Cutting a slot range out of a tree at the highest pages it covers whole: a child pointer whose
//! subtree lies inside the range becomes a hole in its parent and the subtree is handed back
//! untouched (to the free queue, frees.rs), so a trim costs the pages at its two edges, not one
//! leaf page per MiB of the range. Design note docs/design/0006-free-queue.md.

use super::cache::{PageCache, PageKey};
use super::page::{FANOUT, SLOT_BYTES};
use super::tree::{BlockSource, TreeRef};
use crate::blkptr::BlockPtr;
use crate::error::Result;

/// What a cut took out of a tree.
#[derive(Debug, Default)]
pub struct Cut {
    /// Subtrees cut off at their parent: the child page's (level, index) and its pointer. At most
    /// 2·255 per level for one range (its two edges), whatever the range's size.
    pub subtrees: Vec<(u8, u64, BlockPtr)>,
    /// Leaf slots cleared at the range's edges (holes left out).
    pub leaves: Vec<BlockPtr>,
}

impl TreeRef {
    /// Cuts slots `start..end` out of the tree (sync thread only): every page pointer whose
    /// subtree lies inside the range and every leaf slot inside it at the edges becomes a hole in
    /// its (dirtied) parent. The cut subtrees' cached pages are dropped, and readers that walked
    /// the tree before the cut may not cache what they load (`PageCache::forget_subtrees`).
    /// The tree's own top is never cut: a range covering the whole tree clears the top page's
    /// slots, and `write_dirty` turns the all-hole top page into a hole.
    pub async fn cut_range(
        &self,
        cache: &PageCache,
        src: &dyn BlockSource,
        start: u64,
        end: u64,
    ) -> Result<Cut> {
        let end = end.min(self.capacity_slots());
        let mut out = Cut::default();
        if start >= end {
            return Ok(out);
        }
        // Pages the range covers in part (or the top page), each visited once.
        let mut partial = vec![(self.levels - 1, 0u64)];
        while let Some((level, index)) = partial.pop() {
            let first_slot = index.checked_shl(8 * (level as u32 + 1)).unwrap_or(u64::MAX);
            let Some(page) = self.page_for(cache, src, first_slot, level, false, None).await?
            else {
                continue; // A hole: nothing mapped below.
            };
            let mut whole = Vec::new();
            for (pos, s) in page.slots.read().iter().enumerate() {
                if s.iter().all(|&b| b == 0) {
                    continue;
                }
                let child = index * FANOUT as u64 + pos as u64;
                let lo = child.checked_shl(8 * level as u32).unwrap_or(u64::MAX);
                let hi = (child + 1).checked_shl(8 * level as u32).unwrap_or(u64::MAX);
                if hi <= start || lo >= end {
                    continue;
                }
                if start <= lo && hi <= end {
                    whole.push(pos);
                } else {
                    partial.push((level - 1, child)); // Only inner pages span more than a slot.
                }
            }
            if whole.is_empty() {
                continue;
            }
            let page = self
                .page_for(cache, src, first_slot, level, true, None)
                .await?
                .expect("the page exists: it was just read");
            let mut slots = page.slots.write();
            for pos in whole {
                let old =
                    BlockPtr::from_bytes(&std::mem::replace(&mut slots[pos], [0u8; SLOT_BYTES]))?;
                let child = index * FANOUT as u64 + pos as u64;
                if level == 0 {
                    out.leaves.push(old);
                } else {
                    if level == 1 {
                        page.set_hint(pos, super::page::LeafHint::NONE); // The leaf is gone.
                    }
                    out.subtrees.push((level - 1, child, old));
                }
            }
        }
        let roots: Vec<(u8, u64)> = out.subtrees.iter().map(|&(l, i, _)| (l, i)).collect();
        cache.forget_subtrees(self.tree_id, &roots);
        Ok(out)
    }
}

/// Whether page `key` lies in a subtree rooted at one of `roots` (tree `tree_id`).
pub(super) fn under_any(
    key: &PageKey,
    tree_id: u32,
    roots: &std::collections::HashSet<(u8, u64)>,
) -> bool {
    key.tree_id == tree_id
        && (key.level..8).any(|l| {
            roots.contains(&(l, key.index.checked_shr(8 * (l - key.level) as u32).unwrap_or(0)))
        })
}
