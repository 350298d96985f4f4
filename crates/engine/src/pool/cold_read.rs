//! A read whose leaf map page is not cached: one store round trip, not two in sequence (issue
//! #21). The level-1 page above the leaf, in the page cache since import (map_warm.rs), keeps a
//! hint of where that leaf's blocks were written (`blockmap::LeafHint`: a segment and, per 32
//! blocks of volume, a byte range of it). The read asks for the leaf and, at the same time, for
//! that range; when the leaf arrives and puts the read's blocks inside it, they are taken from
//! those bytes, each checked against its pointer's checksum (fetch.rs `take_guessed`). A block
//! written elsewhere since, a range the store did not give, or bytes that do not match, and the
//! read fetches the block as any other: a wrong guess costs a GET, never a wrong byte.

use super::fetch::{get_guessed_range, in_range, take_guessed, Source};
use super::Pool;
use crate::blkptr::BlockPtr;
use crate::blockmap::{TreeRef, FANOUT, HINT_WINDOW_SLOTS};
use crate::error::Result;
use futures::FutureExt;
use std::ops::Range;

/// The bytes to ask for beside a leaf: a range of one segment.
pub(super) struct Guess {
    segment_id: u64,
    range: Range<u64>,
}

impl Pool {
    /// What a read of blocks `first..=last` of `tree` asks for beside its leaf, when its leaf is
    /// not cached, its level-1 page is, and that page's hint covers the read's windows within
    /// `cold_read_bytes_max`. None for a read across leaves (a long read or a stream, which
    /// readahead serves), when the leaf is on the cache device or in RAM already (its blocks
    /// likely too: the store would be asked for nothing), and when every block of the read is
    /// dirty (`resolve` answers it from memory without looking at the leaf at all).
    pub(super) fn cold_guess(
        &self,
        volume_id: u32,
        tree: &TreeRef,
        first: u64,
        last: u64,
    ) -> Option<Guess> {
        let fanout = FANOUT as u64;
        let bytes_max = self.inner.config.read().cold_read_bytes_max;
        if bytes_max == 0 || first / fanout != last / fanout {
            return None;
        }
        let (leaf_ptr, hint) = tree.cached_leaf_hint(&self.inner.cache, first / fanout)?;
        if self.inner.blocks.in_ram(&leaf_ptr) || self.inner.blocks.on_device(&leaf_ptr) {
            return None;
        }
        if self.all_dirty(volume_id, first, last) {
            return None;
        }
        let window = |b: u64| (b % fanout) as usize / HINT_WINDOW_SLOTS;
        let mut range: Option<Range<u64>> = None;
        for w in hint.windows[window(first)..=window(last)].iter().filter(|w| w.span_bytes > 0) {
            let (a, b) = (w.offset_bytes as u64, w.offset_bytes as u64 + w.span_bytes as u64);
            range = Some(range.map_or(a..b, |r| r.start.min(a)..r.end.max(b)));
        }
        let range = range.filter(|r| r.end - r.start <= bytes_max)?;
        Some(Guess { segment_id: hint.segment_id, range })
    }

    /// Whether every block of `first..=last` is in the open or the syncing txg. Checked only
    /// for a read that would guess (its leaf not cached: rare once a volume is warm), so the
    /// txg lock it takes is not on the path of every read.
    fn all_dirty(&self, volume_id: u32, first: u64, last: u64) -> bool {
        let t = self.inner.txg.state.lock();
        (first..=last).all(|b| {
            t.open.contains(volume_id, b)
                || t.syncing.as_ref().is_some_and(|s| s.contains(volume_id, b))
        })
    }

    /// [`Pool::resolve`] with `guess`'s GET under way beside it; the blocks that came in it are
    /// returned as `Source::Mem`. The guess's GET is dropped unanswered when the leaf puts none
    /// of the read's blocks in its range.
    pub(super) async fn resolve_guessed(
        &self,
        volume_id: u32,
        tree: TreeRef,
        first: u64,
        last: u64,
        guess: Guess,
    ) -> Result<Vec<Source>> {
        let Guess { segment_id, range } = guess;
        let get = get_guessed_range(&self.inner, segment_id, range.clone()).fuse();
        let resolve = self.resolve(volume_id, tree, first, last).fuse();
        futures::pin_mut!(get, resolve);
        let mut body = None;
        // Biased, not `select!`: polled in this order, the guess's GET goes out before the
        // leaf's, the same way every time (the simulation replays a seed's requests exactly).
        let mut sources = loop {
            futures::select_biased! {
                got = get => body = Some(got),
                resolved = resolve => break resolved?,
            }
        };
        let inside = |p: &BlockPtr| in_range(p, segment_id, &range);
        if !sources.iter().any(|s| matches!(s, Source::Ptr(p) if inside(p))) {
            return Ok(sources);
        }
        let body = match body {
            Some(b) => b,
            None => get.await,
        };
        let Some(body) = body else {
            return Ok(sources);
        };
        let neighbours = self.leaf_pointers_in(&tree, first, &range, segment_id);
        take_guessed(&self.inner, &mut sources, &neighbours, segment_id, &range, &body);
        Ok(sources)
    }

    /// The pointers of leaf `first / FANOUT` (cached now: the read just loaded it) that lie in
    /// `range` of segment `segment_id`: the other blocks the guess brought, for the cache.
    fn leaf_pointers_in(
        &self,
        tree: &TreeRef,
        first: u64,
        range: &Range<u64>,
        segment_id: u64,
    ) -> Vec<BlockPtr> {
        let key = crate::blockmap::PageKey {
            tree_id: tree.tree_id,
            level: 0,
            index: first / FANOUT as u64,
        };
        let Some(leaf) = self.inner.cache.get(&key) else {
            return Vec::new();
        };
        let slots = leaf.slots.read();
        slots
            .iter()
            .filter_map(|s| BlockPtr::from_bytes(s).ok())
            .filter(|p| in_range(p, segment_id, range))
            .collect()
    }
}
