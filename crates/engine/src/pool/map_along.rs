//! A stream's map pages with the data stored before them (issue #21). A txg writes its leaf
//! pages at the end of its last segment, after that segment's data, and a sequential reader
//! needs those pages about a txg's length before it needs that data: fetched apart, the segment
//! costs two GETs, its pages' and its data's, one more GET per txg than the data needs (raw
//! GETs of the same bytes: 1.14x on MinIO). So when a stream's batch of leaf pages ends in a
//! segment whose data the level-1 pages' hints place under those same leaves, the pages' GET
//! starts at that segment's first block instead: its blocks go into the ARC as prefetches, each
//! checked against the pointer a leaf of the batch holds for it, and the reader finds them there.
//! Bounded by `read_request_bytes_max` per GET and an eighth of the ARC's RAM per batch (as far
//! as readahead goes ahead), so that what comes early stays cached until the reader gets there;
//! without a cache nothing comes along.

use super::fetch::{cache_prefetched, check_sum, claim_all, decode, get_segment_range, in_range};
use super::Pool;
use crate::blkptr::BlockPtr;
use crate::blockmap::{BlockSource, LeafToLoad, Slot, TreeRef, FANOUT};
use crate::codec::checksum64;
use crate::error::Result;
use crate::objstore::Body;
use crate::segment::SEGMENT_HEADER_BYTES;
use bytes::Bytes;
use std::ops::Range;

/// The part of one segment that comes along with a batch's pages stored in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Along {
    pub segment_id: u64,
    /// From the segment's first block to its first page of the batch.
    pub data: Range<u64>,
    /// The end of the batch's last page in the segment: the GET is `data.start..pages_end`.
    pub pages_end: u64,
}

/// What comes along with the pages `wanted` (a stream's batch, in leaf order): for each segment
/// holding pages of the batch (a batch may end one txg's pages and start the next one's), the
/// data stored before them, when the hints of the batch's leaves place at least half of that
/// data there (so that most of what comes is the stream's own). At most `request_max` and an
/// eighth per GET, and `total_max` of data in all.
pub(super) fn data_along(wanted: &[LeafToLoad], request_max: u64, total_max: u64) -> Vec<Along> {
    let mut segments: Vec<u64> = wanted.iter().map(|w| w.ptr.segment_id).collect();
    segments.dedup();
    let mut total = 0;
    let mut out = Vec::new();
    for segment_id in segments {
        let Some(along) = along_in(wanted, segment_id, request_max) else { continue };
        total += along.data.end - along.data.start;
        if total > total_max {
            break;
        }
        out.push(along);
    }
    out
}

/// [`data_along`] for the pages of `wanted` stored in `segment_id`.
fn along_in(wanted: &[LeafToLoad], segment_id: u64, bytes_max: u64) -> Option<Along> {
    let pages = wanted.iter().filter(|w| w.ptr.segment_id == segment_id).map(|w| w.ptr.range());
    let (pages_start, pages_end) =
        pages.fold((u64::MAX, 0), |(a, b), r| (a.min(r.start), b.max(r.end)));
    let data_start = SEGMENT_HEADER_BYTES as u64;
    // An eighth more for the pages: a segment holds up to a request's data and its txg's pages.
    if pages_start <= data_start || pages_end - data_start > bytes_max + bytes_max / 8 {
        return None;
    }
    let hinted: u64 = wanted
        .iter()
        .filter(|w| w.hint.segment_id == segment_id)
        .flat_map(|w| w.hint.windows.iter())
        .filter(|win| win.span_bytes > 0 && (win.offset_bytes as u64) < pages_start)
        .map(|win| (win.span_bytes as u64).min(pages_start - win.offset_bytes as u64))
        .sum();
    (hinted * 2 >= pages_start - data_start).then_some(Along {
        segment_id,
        data: data_start..pages_start,
        pages_end,
    })
}

impl Pool {
    /// Brings the leaf pages mapping `blocks` (a sequential stream's batch of map pages ahead,
    /// `maybe_readahead`) into the page cache, with up to `ride_pages` more leaves stored right
    /// after the last riding along: the rest of the run they end in, where `maybe_readahead`
    /// gives a batch's budget (an eighth of `map_cache_bytes`) rather than
    /// `map_readahead_pages_max`. A txg stores its leaves back to back, so a stream pays about one
    /// map GET per txg it reads instead of one per batch and txg edge (issue #21: 27 map GETs for
    /// the 18 txgs of a 4 GiB volume before), and that GET brings the data stored before the
    /// pages along (module doc). Errors are left to the read that needs the pages.
    pub(super) async fn load_map(&self, tree: TreeRef, blocks: Range<u64>, ride_pages: u64) {
        let _ = self.load_map_along(tree, blocks, ride_pages).await;
    }

    async fn load_map_along(
        &self,
        tree: TreeRef,
        blocks: Range<u64>,
        ride_pages: u64,
    ) -> Result<()> {
        let inner = &self.inner;
        let leaves: Vec<u64> =
            (blocks.start / FANOUT as u64..=(blocks.end - 1) / FANOUT as u64).collect();
        let (cache, gen) = (&inner.cache, inner.cache.generation());
        let wanted = tree.plan_leaf_pages(cache, &**inner, &leaves, ride_pages, gen).await?;
        if wanted.is_empty() {
            return Ok(());
        }
        let (request_max, total_max) = match inner.blocks.holds_nothing() {
            true => (0, 0),
            false => (inner.config.read().read_request_bytes_max, inner.blocks.ram_bytes_max() / 8),
        };
        let ptrs: Vec<BlockPtr> = wanted.iter().map(|w| w.ptr).collect();
        let mut alongs = data_along(&wanted, request_max, total_max);
        let along_of = |alongs: &[Along], p: &BlockPtr| {
            alongs.iter().position(|a| in_range(p, a.segment_id, &(a.data.start..a.pages_end)))
        };
        // Each along GET claims its pages: batches overlap while a GET is under way, and the next
        // one that plans the same pages joins this GET instead of asking for the segment again.
        let mut claims = Vec::new();
        alongs.retain(|a| {
            let pages: Vec<BlockPtr> = ptrs
                .iter()
                .copied()
                .filter(|p| along_of(std::slice::from_ref(a), p).is_some())
                .collect();
            claim_all(inner, &pages).map(|c| claims.push(c)).is_some()
        });
        // The batch's other pages as before, at the same time.
        let others: Vec<BlockPtr> =
            ptrs.iter().copied().filter(|p| along_of(&alongs, p).is_none()).collect();
        let gets = alongs
            .iter()
            .map(|a| get_segment_range(inner, a.segment_id, a.data.start..a.pages_end));
        let (bodies, other_pages) =
            futures::join!(futures::future::join_all(gets), inner.read_blocks(&others));
        let mut other_pages = other_pages?.into_iter();
        let mut got = Vec::with_capacity(alongs.len());
        for (a, body) in alongs.iter().zip(bodies) {
            let body = body?;
            if body.len() != a.pages_end - a.data.start {
                // A store that gave less than asked: the pages as any other fetch gets them
                // (with the claims released first: that fetch would wait for them).
                drop(claims);
                let pages = inner.read_blocks(&ptrs).await?;
                return tree.insert_leaf_pages(cache, &wanted, pages, gen, |_| {});
            }
            got.push(body);
        }
        let mut pages = Vec::with_capacity(ptrs.len());
        let mut pages_phys = Vec::new();
        for p in &ptrs {
            pages.push(match along_of(&alongs, p) {
                Some(i) => {
                    let (logical, phys) = verified(self, p, &got[i], alongs[i].data.start)?;
                    pages_phys.push((*p, phys));
                    logical
                }
                None => other_pages.next().unwrap_or_default(),
            });
        }
        // Cached before the claims go, as any GET's blocks (`fetch::Claim`).
        inner.blocks.insert_many(pages_phys, false);
        // The blocks to cache: those the batch's leaves hold in the along ranges, and those of
        // the leaves cached before them in the same segment (a stream's first read loads its
        // own leaves, and its txg's last segment follows soon after).
        let mut data: Vec<Vec<BlockPtr>> = vec![Vec::new(); alongs.len()];
        let mut collect = |slots: &[Slot]| {
            for p in slots.iter().filter_map(|s| BlockPtr::from_bytes(s).ok()) {
                let i = alongs.iter().position(|a| in_range(&p, a.segment_id, &a.data));
                if let (false, Some(i)) = (p.is_hole(), i) {
                    data[i].push(p);
                }
            }
        };
        tree.insert_leaf_pages(cache, &wanted, pages, gen, &mut collect)?;
        for a in &alongs {
            let Some(first) = wanted.iter().find(|w| w.ptr.segment_id == a.segment_id) else {
                continue;
            };
            let max = FANOUT as u64;
            tree.visit_cached_leaves_before(cache, first.leaf, a.segment_id, max, &mut collect);
        }
        for ((a, body), data) in alongs.iter().zip(&got).zip(data) {
            self.cache_along(data, a, body);
        }
        drop(claims);
        Ok(())
    }

    /// The blocks `data` (pointers the batch's leaves hold into the along range) from `body`,
    /// the along GET's bytes, into the ARC as prefetches (`fetch::cache_prefetched`: each
    /// checked against its pointer first; a block that does not match is left to its read).
    fn cache_along(&self, mut data: Vec<BlockPtr>, along: &Along, body: &Body) {
        data.sort_by_key(|p| p.offset_bytes);
        data.dedup_by_key(|p| p.offset_bytes);
        let range = along.data.start..along.pages_end;
        let n = cache_prefetched(&self.inner, &data, along.segment_id, &range, body);
        self.inner.counters.add_readahead(n as u64);
    }
}

/// Page `p`'s logical bytes from `body` (bytes from `start` of its segment), checked against
/// its pointer first (a mismatch is counted and fails the batch, as in any fetch), and its
/// physical bytes in a buffer of their own for the ARC.
fn verified(pool: &Pool, p: &BlockPtr, body: &Body, start: u64) -> Result<(Bytes, Bytes)> {
    let phys = Bytes::copy_from_slice(&body.slice(p.range().start - start..p.range().end - start));
    check_sum(&pool.inner, p, checksum64(&phys))?;
    Ok((decode(p, &phys)?, phys))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blockmap::{HintWindow, LeafHint};

    const MIB: u64 = 1 << 20;

    /// Leaf `leaf`'s page (4 KiB) at `page_at` of `segment`, with its 256 blocks hinted at
    /// `data_at` of `data_segment` (one window per 32 blocks, 128 KiB each).
    fn leaf(leaf: u64, segment: u64, page_at: u64, data_segment: u64, data_at: u64) -> LeafToLoad {
        let ptr = BlockPtr {
            segment_id: segment,
            offset_bytes: page_at as u32,
            physical_bytes: 4096,
            birth_txg: 1,
            logical_bytes: 4096,
            ..BlockPtr::HOLE
        };
        let mut hint = LeafHint { segment_id: data_segment, ..LeafHint::NONE };
        for (i, w) in hint.windows.iter_mut().enumerate() {
            let offset_bytes = (data_at + i as u64 * (128 << 10)) as u32;
            *w = HintWindow { offset_bytes, span_bytes: 128 << 10 };
        }
        LeafToLoad { leaf, ptr, hint }
    }

    /// A txg's last segment: 15 MiB of data for leaves 0..15, then their pages.
    fn txg(segment: u64, first_leaf: u64) -> Vec<LeafToLoad> {
        let pages_at = 64 + 15 * MIB;
        (0..15)
            .map(|i| leaf(first_leaf + i, segment, pages_at + i * 4096, segment, 64 + i * MIB))
            .collect()
    }

    #[test]
    fn the_data_before_a_batchs_pages_comes_along_when_its_leaves_are_hinted_there() {
        let along = data_along(&txg(7, 0), 16 * MIB, 64 * MIB);
        let pages_end = 64 + 15 * MIB + 15 * 4096;
        assert_eq!(along, vec![Along { segment_id: 7, data: 64..64 + 15 * MIB, pages_end }]);
    }

    #[test]
    fn nothing_comes_along_for_leaves_whose_blocks_are_elsewhere() {
        let mut batch = txg(7, 0);
        for w in batch.iter_mut() {
            w.hint.segment_id = 3; // Rewritten since: the blocks are in another segment.
        }
        assert_eq!(data_along(&batch, 16 * MIB, 64 * MIB), vec![]);
        // Less than half of the bytes before the pages hinted there: not the stream's data.
        let mut batch = txg(7, 0);
        for w in batch.iter_mut().skip(7) {
            w.hint = LeafHint::NONE;
        }
        assert_eq!(data_along(&batch, 16 * MIB, 64 * MIB), vec![]);
    }

    #[test]
    fn a_get_stays_within_a_request_and_a_batch_within_its_share_of_the_arc() {
        assert_eq!(data_along(&txg(7, 0), 8 * MIB, 64 * MIB), vec![]);
        assert_eq!(data_along(&txg(7, 0), 16 * MIB, 8 * MIB), vec![]);
        // A batch ending one txg's pages and starting the next one's: each segment comes along,
        // while the batch's share lasts.
        let batch: Vec<LeafToLoad> = txg(7, 0).into_iter().chain(txg(9, 15)).collect();
        let both = data_along(&batch, 16 * MIB, 64 * MIB);
        assert_eq!(both.iter().map(|a| a.segment_id).collect::<Vec<_>>(), vec![7, 9]);
        let first = data_along(&batch, 16 * MIB, 20 * MIB);
        assert_eq!(first.iter().map(|a| a.segment_id).collect::<Vec<_>>(), vec![7]);
    }
}
