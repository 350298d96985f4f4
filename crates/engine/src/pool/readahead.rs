//! Sequential-stream detection and the readahead it drives (pure arithmetic; pool/read.rs
//! issues the fetches). Two sequential reads in a row start readahead. Its distance ahead of the
//! reader is four times the run so far, up to the maximum, so a far store's reader does not spend
//! its first round trips reaching full depth. It slides: once the reader has taken a step's worth
//! (a GET, `read_request_bytes_max`, or a quarter of the distance when that is less), the range
//! up to a full distance ahead goes out, so about distance / GET size GETs stay in flight all the
//! time, as a reader with that many parallel GETs keeps. Whole windows, one at a time, left the
//! store idle while the reader drained each one (BENCHMARKS.md, engine-store). The map pages of
//! one distance further go out with each step, so a window finds its pages cached instead of
//! waiting a map round trip before its data GETs can start.

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
