//! Sequential-stream detection and the readahead it drives (pure arithmetic; pool/read.rs
//! issues the fetches). Two sequential reads in a row start readahead. Its distance ahead of the
//! reader is four times the run so far, up to the maximum, so a far store's reader does not spend
//! its first round trips reaching full depth. It slides: once the reader has taken a step's worth
//! (a GET, `read_request_bytes_max`, or a quarter of the distance when that is less), the range
//! up to a full distance ahead goes out, so about distance / GET size GETs stay in flight all the
//! time, as a reader with that many parallel GETs keeps. Whole windows, one at a time, left the
//! store idle while the reader drained each one (BENCHMARKS.md, engine-store). The map pages of
//! one distance further go out with each step, so a window finds its pages cached instead of
//! waiting a map round trip before its data GETs can start. A step runs on to the end of the
//! segment its last block is in (`through_segment_end`, at most a GET or a quarter of the
//! distance's cap further), so a segment read in order is one GET, not two halves.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::ops::Range;

/// Sequential streams per volume, which drive readahead.
#[derive(Debug, Default)]
pub(crate) struct Readahead(pub(super) Mutex<BTreeMap<u32, SeqDetector>>);

/// One volume's sequential stream.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SeqDetector {
    next_block: u64,
    run_blocks: u64,
    prefetched_to: u64,
    /// How far the map pages ahead of the prefetched blocks have been asked for.
    map_loaded_to: u64,
}

/// What a read of blocks `first..=last` sends ahead: blocks to prefetch and map pages to load
/// (either may be empty), in blocks of the volume, not yet clipped to its end.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Ahead {
    pub blocks: Range<u64>,
    pub map: Range<u64>,
}

impl SeqDetector {
    /// Notes a read of `first..=last` and returns what goes out ahead of it, if anything.
    /// `distance_max` and `step_max` are in blocks.
    pub(crate) fn on_read(
        &mut self,
        first: u64,
        last: u64,
        distance_max: u64,
        step_max: u64,
    ) -> Option<Ahead> {
        if first == self.next_block && first != 0 {
            self.run_blocks += last - first + 1;
        } else {
            *self = SeqDetector::default();
        }
        self.next_block = last + 1;
        let distance = (4 * self.run_blocks).min(distance_max).max(1);
        let step = step_max.min(distance.div_ceil(4)).max(1);
        let from = self.prefetched_to.max(last + 1);
        let to = last + 1 + distance;
        if self.run_blocks < 2 * (last - first + 1) || from + step > to {
            return None;
        }
        self.prefetched_to = to;
        let map_from = self.map_loaded_to.max(to);
        self.map_loaded_to = self.map_loaded_to.max(to + distance);
        Some(Ahead { blocks: from..to, map: map_from..self.map_loaded_to })
    }

    /// A step that went out as `..end` was extended to `..new_end` (to the end of the segment
    /// its last block is in): the next step starts there, unless one went out meanwhile (its
    /// first GET then skips the blocks this one claimed).
    pub(crate) fn extended(&mut self, end: u64, new_end: u64) {
        if self.prefetched_to == end && new_end > end {
            self.prefetched_to = new_end;
        }
    }
}

/// How many of `locations` (a step's blocks as (segment, byte range), `None` for blocks that need
/// no GET, then blocks resolved past its end) a step fetches: its first `step_len`, then those
/// that continue its last block's run in the same segment. A step that ends inside a segment
/// would otherwise split it between two GETs, one per step, each paying a round trip for part of
/// the bytes.
pub(crate) fn through_segment_end(
    locations: &[Option<(u64, Range<u64>)>],
    step_len: usize,
) -> usize {
    let mut n = step_len.min(locations.len());
    let Some(Some((segment, mut range))) = n.checked_sub(1).map(|i| locations[i].clone()) else {
        return n;
    };
    while let Some(Some((s, r))) = locations.get(n) {
        if *s != segment || r.start != range.end {
            break;
        }
        range = r.clone();
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `n` MiB (256 blocks each) in order and returns what each one sent ahead.
    fn sequential(n: u64, distance_max: u64, step_max: u64) -> Vec<Option<Ahead>> {
        let mut d = SeqDetector::default();
        (0..n).map(|i| d.on_read(i * 256, i * 256 + 255, distance_max, step_max)).collect()
    }

    #[test]
    fn a_step_runs_on_to_the_end_of_its_last_blocks_segment() {
        let at = |seg: u64, i: u64| Some((seg, i * 4096..(i + 1) * 4096));
        // Blocks 0-3 in segment 7 (offsets 10-13), then 4-5 in segment 7 (14-15), then segment 8.
        let locs = vec![at(7, 10), at(7, 11), at(7, 12), at(7, 13), at(7, 14), at(7, 15), at(8, 0)];
        assert_eq!(through_segment_end(&locs, 4), 6, "on through the rest of segment 7");
        assert_eq!(through_segment_end(&locs, 6), 6, "a step ending at a segment's end stays");
        assert_eq!(through_segment_end(&locs, 7), 7);
        assert_eq!(through_segment_end(&locs, 9), 7, "never past what was resolved");
        // A hole, or a block elsewhere in the segment, ends the run.
        let gap = vec![at(7, 10), at(7, 11), None, at(7, 12)];
        assert_eq!(through_segment_end(&gap, 2), 2);
        let jump = vec![at(7, 10), at(7, 11), at(7, 20)];
        assert_eq!(through_segment_end(&jump, 2), 2);
        let hole_last = vec![at(7, 10), None, at(7, 11)];
        assert_eq!(through_segment_end(&hole_last, 2), 2, "a step ending in a hole stays");
    }

    #[test]
    fn an_extended_step_moves_the_next_one_unless_it_went_out_already() {
        let mut d = SeqDetector::default();
        let got = (0..40).filter_map(|i| d.on_read(i * 256, i * 256 + 255, 32768, 4096)).last();
        let end = got.expect("ahead").blocks.end;
        d.extended(end, end + 100);
        assert_eq!(d.prefetched_to, end + 100);
        d.extended(end, end + 300);
        assert_eq!(d.prefetched_to, end + 100, "a later step went out from the old end");
    }

    #[test]
    fn a_single_read_or_a_random_one_sends_nothing_ahead() {
        let mut d = SeqDetector::default();
        assert_eq!(d.on_read(0, 255, 32768, 4096), None);
        assert_eq!(d.on_read(256, 511, 32768, 4096), None, "a run of one read is not yet one");
        assert!(d.on_read(512, 767, 32768, 4096).is_some());
        assert_eq!(d.on_read(10_000, 10_255, 32768, 4096), None, "a jump starts over");
    }

    #[test]
    fn the_distance_grows_fourfold_with_the_run_up_to_the_maximum() {
        // 128 MiB maximum (32768 blocks), 16 MiB GETs (4096 blocks).
        let got = sequential(60, 32768, 4096);
        let third = got[2].as_ref().expect("third read");
        assert_eq!(third.blocks, 768..768 + 4 * 512, "four times the 512-block run");
        for (i, a) in got.iter().enumerate().skip(2) {
            if let Some(a) = a {
                let reader_end = (i as u64 + 1) * 256;
                assert!(a.blocks.end - reader_end <= 32768, "read {i}: never beyond the maximum");
            }
        }
        let (i, last) = got
            .iter()
            .enumerate()
            .rev()
            .find_map(|(i, a)| a.as_ref().map(|a| (i as u64, a)))
            .expect("something went ahead");
        assert_eq!(last.blocks.end - (i + 1) * 256, 32768, "a long run keeps the whole distance");
    }

    #[test]
    fn at_full_distance_it_slides_one_step_at_a_time_and_never_asks_twice() {
        let got = sequential(400, 32768, 4096);
        let mut covered = 0;
        let mut map_covered = 0;
        let mut steady = Vec::new();
        for a in got.iter().flatten() {
            assert!(a.blocks.start >= covered, "{:?} asks again for blocks before {covered}", a);
            assert!(a.map.start >= map_covered, "{:?} loads map pages twice", a);
            covered = a.blocks.end;
            map_covered = a.map.end.max(map_covered);
            // Steady state: the distance stopped growing (4 x run >= 32768 from the 32nd read,
            // whose send ends at block 39936).
            if a.blocks.start >= 39936 {
                steady.push(a.blocks.end - a.blocks.start);
            }
        }
        // Once the reader has taken a 4096-block step, that step goes out: not a whole
        // 32768-block window at a time.
        assert!(!steady.is_empty());
        assert!(steady.iter().all(|&n| (4096..4096 + 256).contains(&n)), "steps {steady:?}");
    }

    #[test]
    fn map_pages_go_out_one_distance_beyond_the_prefetched_blocks() {
        let got = sequential(200, 32768, 4096);
        for a in got.iter().flatten() {
            if !a.map.is_empty() {
                assert!(a.map.start >= a.blocks.end, "{a:?}");
                assert!(a.map.end <= a.blocks.end + 32768, "{a:?}");
            }
        }
        let last = got.iter().rev().flatten().next().expect("ahead");
        assert_eq!(last.map.end, last.blocks.end + 32768, "the map runs a distance ahead");
    }
}
