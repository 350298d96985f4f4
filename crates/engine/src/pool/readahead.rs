//! Sequential-stream detection and the readahead it drives (pure arithmetic; pool/read.rs
//! issues the fetches). Two sequential reads in a row start readahead. Its distance ahead of the
//! reader is four times the run so far, up to the maximum, so a far store's reader does not spend
//! its first round trips reaching full depth. It slides: once the reader has taken a step's worth
//! (a GET, `read_request_bytes_max`, or a quarter of the distance when that is less), the range
//! up to a full distance ahead goes out, so about distance / GET size GETs stay in flight all the
//! time, as a reader with that many parallel GETs keeps. Whole windows, one at a time, left the
//! store idle while the reader drained each one (BENCHMARKS.md, engine-store).
//!
//! The map pages a step needs are cached before it goes out: when less than half a batch past
//! the prefetched blocks is loaded, the pages up to `MAP_BATCH_DISTANCES` distances further go
//! out at once (capped by the caller, an eighth of the map cache), so a long read pays a map GET
//! per metadata segment per half batch instead of one per step (44 of a cold GiB's 120 GETs were
//! map pages loaded a step at a time).
//!
//! A step takes the rest of the runs it started in its segments (`step_selection`): blocks
//! resolved past its end that continue, in a segment, a range the step already fetches. A
//! segment read in order is then one GET, not two halves, also where writers that raced at a
//! txg's edge left its blocks out of volume order.

use fardisk_arc::LocationHash;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use tokio::sync::oneshot;

/// How many distances of map pages past the prefetched blocks one map batch loads.
const MAP_BATCH_DISTANCES: u64 = 8;

/// Sequential streams per volume, which drive readahead.
#[derive(Debug, Default)]
pub(crate) struct Readahead(pub(super) Mutex<BTreeMap<u32, Stream>>);

/// One volume's stream and its last step's signal.
#[derive(Debug, Default)]
pub(crate) struct Stream {
    pub detector: SeqDetector,
    /// Fires (or drops) once the last step that went out has claimed its blocks. The next step
    /// resolves and claims after it: two steps claiming at once in the other order split the
    /// segment between them (the later one first takes the tail the earlier one would have run
    /// on into), one GET each.
    pub claimed: Option<oneshot::Receiver<()>>,
}

/// One volume's sequential stream.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SeqDetector {
    next_block: u64,
    run_blocks: u64,
    prefetched_to: u64,
    /// How far the map pages ahead of the prefetched blocks have been asked for.
    map_loaded_to: u64,
    /// The last read continued the stream (did not start it).
    continued: bool,
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
    /// `distance_max`, `step_max` and `map_batch_max` (the most map a batch covers) are in blocks.
    pub(crate) fn on_read(
        &mut self,
        first: u64,
        last: u64,
        distance_max: u64,
        step_max: u64,
        map_batch_max: u64,
    ) -> Option<Ahead> {
        // A read that does not continue the stream starts one: the next read in order makes
        // two, and readahead starts there. (Counting only the reads after the first left every
        // cold scan's first three reads to demand GETs, one more than needed.)
        if first == self.next_block && self.run_blocks > 0 {
            self.run_blocks += last - first + 1;
            self.continued = true;
        } else {
            *self = SeqDetector { run_blocks: last - first + 1, ..SeqDetector::default() };
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
        // The pages up to a distance past `to` must be cached before the next steps resolve;
        // a batch grows with the stream's distance, as the distance grows with its run. The next
        // batch goes out once half of one is left ahead, so a far store's batch (the parents,
        // then the leaves: two round trips) arrives long before a step needs it: a step waiting
        // for its pages holds up the steps after it.
        let map_from = self.map_loaded_to.max(to);
        let batch = (MAP_BATCH_DISTANCES * distance).min(map_batch_max).max(distance);
        if self.map_loaded_to < to + (batch / 2).max(distance) {
            self.map_loaded_to = to + batch;
        }
        Some(Ahead { blocks: from..to, map: map_from..self.map_loaded_to.max(map_from) })
    }

    /// Blocks read in order so far by the stream the last read continued (0 after a read that
    /// did not continue one: a single read, however long, is no stream).
    pub(crate) fn run_blocks(&self) -> u64 {
        if self.continued {
            self.run_blocks
        } else {
            0
        }
    }

    /// A step that went out as `..end` was extended to `..new_end` (the blocks right after it
    /// that `step_selection` took): the next step starts there, unless one went out meanwhile
    /// (it then skips the blocks this one claimed).
    pub(crate) fn extended(&mut self, end: u64, new_end: u64) {
        if self.prefetched_to == end && new_end > end {
            self.prefetched_to = new_end;
        }
    }
}

/// Which of `locations` (a step's blocks as (segment, byte range), `None` for blocks that need
/// no GET, then blocks resolved past its end) a step fetches, as indices in order, and how many
/// of them lead without a gap: its first `step_len`, then the blocks past it that continue, in
/// their segment, a byte range it already takes. A step that ends inside a segment would otherwise
/// split it between two GETs, one per step, each paying a round trip for part of the bytes. The
/// blocks taken past a gap are fetched early; the next step finds them cached or claimed.
pub(crate) fn step_selection(
    locations: &[Option<(u64, Range<u64>)>],
    step_len: usize,
) -> (Vec<usize>, usize) {
    let n = step_len.min(locations.len());
    let mut chosen: Vec<usize> = (0..n).collect();
    let mut taken = TakenRuns::default();
    for (s, r) in locations[..n].iter().flatten() {
        taken.add(*s, r);
    }
    let mut leading = n;
    for (i, loc) in locations.iter().enumerate().skip(n) {
        let Some((s, r)) = loc else { continue };
        if !taken.touches(*s, r) {
            continue;
        }
        taken.add(*s, r);
        if leading == i {
            leading += 1;
        }
        chosen.push(i);
    }
    (chosen, leading)
}

/// The byte ranges a step takes, per segment, merged as they grow; found by either end, so a
/// step of blocks scattered over many segments costs O(1) per block.
#[derive(Default)]
struct TakenRuns {
    end_by_start: HashMap<(u64, u64), u64, LocationHash>,
    start_by_end: HashMap<(u64, u64), u64, LocationHash>,
}

impl TakenRuns {
    fn touches(&self, segment: u64, r: &Range<u64>) -> bool {
        self.start_by_end.contains_key(&(segment, r.start))
            || self.end_by_start.contains_key(&(segment, r.end))
    }

    fn add(&mut self, segment: u64, r: &Range<u64>) {
        let (mut start, mut end) = (r.start, r.end);
        if let Some(s0) = self.start_by_end.remove(&(segment, start)) {
            self.end_by_start.remove(&(segment, s0));
            start = s0;
        }
        if let Some(e0) = self.end_by_start.remove(&(segment, end)) {
            self.start_by_end.remove(&(segment, e0));
            end = e0;
        }
        self.end_by_start.insert((segment, start), end);
        self.start_by_end.insert((segment, end), start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `n` MiB (256 blocks each) in order and returns what each one sent ahead.
    fn sequential(n: u64, distance_max: u64, step_max: u64) -> Vec<Option<Ahead>> {
        sequential_with_map(n, distance_max, step_max, 0)
    }

    fn sequential_with_map(
        n: u64,
        distance_max: u64,
        step_max: u64,
        map_batch_max: u64,
    ) -> Vec<Option<Ahead>> {
        let mut d = SeqDetector::default();
        (0..n)
            .map(|i| d.on_read(i * 256, i * 256 + 255, distance_max, step_max, map_batch_max))
            .collect()
    }

    #[test]
    fn a_step_runs_on_to_the_end_of_its_last_blocks_segment() {
        let at = |seg: u64, i: u64| Some((seg, i * 4096..(i + 1) * 4096));
        let sel = |locs: &[Option<(u64, Range<u64>)>], n| step_selection(locs, n);
        // Blocks 0-3 in segment 7 (offsets 10-13), then 4-5 in segment 7 (14-15), then segment 8.
        let locs = vec![at(7, 10), at(7, 11), at(7, 12), at(7, 13), at(7, 14), at(7, 15), at(8, 0)];
        assert_eq!(sel(&locs, 4), ((0..6).collect(), 6), "on through the rest of segment 7");
        assert_eq!(sel(&locs, 6), ((0..6).collect(), 6), "a step ending at a segment's end stays");
        assert_eq!(sel(&locs, 7), ((0..7).collect(), 7));
        assert_eq!(sel(&locs, 9), ((0..7).collect(), 7), "never past what was resolved");
        // A hole ends the leading run; a block elsewhere in the segment is not taken.
        let gap = vec![at(7, 10), at(7, 11), None, at(7, 12)];
        assert_eq!(sel(&gap, 2), (vec![0, 1, 3], 2), "the run goes on past the hole");
        let jump = vec![at(7, 10), at(7, 11), at(7, 20)];
        assert_eq!(sel(&jump, 2), (vec![0, 1], 2));
    }

    #[test]
    fn a_step_takes_the_rest_of_a_segment_that_writers_left_out_of_volume_order() {
        // The e2e trace of a cold read: segment 0x21's first 13 MiB, then the start of the next
        // txg's segment 0x24, then 0x21's last 3 MiB. The step ending in 0x24 took 0x21 in two
        // GETs; now the tail rides along with the head.
        let at = |seg: u64, i: u64| Some((seg, i * 4096..(i + 1) * 4096));
        let locs =
            vec![at(0x21, 0), at(0x21, 1), at(0x24, 0), at(0x21, 2), at(0x21, 3), at(0x24, 1)];
        assert_eq!(step_selection(&locs, 2), (vec![0, 1, 3, 4], 2));
        // Both of the step's segments grow, and a block just before a taken range counts too.
        assert_eq!(step_selection(&locs, 3), (vec![0, 1, 2, 3, 4, 5], 6));
        let before = vec![at(9, 5), at(9, 6), at(9, 4), at(9, 3), at(9, 9)];
        assert_eq!(step_selection(&before, 2), (vec![0, 1, 2, 3], 4));
        // A block of another segment the step never touched waits for its own step.
        let other = vec![at(1, 0), at(2, 1), at(1, 1)];
        assert_eq!(step_selection(&other, 1), (vec![0, 2], 1));
    }

    #[test]
    fn an_extended_step_moves_the_next_one_unless_it_went_out_already() {
        let mut d = SeqDetector::default();
        let got = (0..40).filter_map(|i| d.on_read(i * 256, i * 256 + 255, 32768, 4096, 0)).last();
        let end = got.expect("ahead").blocks.end;
        d.extended(end, end + 100);
        assert_eq!(d.prefetched_to, end + 100);
        d.extended(end, end + 300);
        assert_eq!(d.prefetched_to, end + 100, "a later step went out from the old end");
    }

    #[test]
    fn a_single_read_or_a_random_one_sends_nothing_ahead() {
        let mut d = SeqDetector::default();
        assert_eq!(d.on_read(0, 255, 32768, 4096, 0), None, "one read is not yet a stream");
        assert_eq!(d.run_blocks(), 0, "nor is it streamed, however long");
        assert_eq!(d.on_read(10_000, 10_255, 32768, 4096, 0), None, "a jump starts over");
        assert_eq!(d.on_read(20_000, 20_000, 32768, 4096, 0), None);
        assert_eq!(d.on_read(7, 7, 32768, 4096, 0), None);
    }

    #[test]
    fn the_second_read_in_order_starts_readahead_also_at_block_zero() {
        // A cold scan from the volume's start: its second 1 MiB read sends a distance of four
        // times the two reads' run ahead (the third did, before: a read at block 0 started no run).
        let mut d = SeqDetector::default();
        assert_eq!(d.on_read(0, 255, 32768, 4096, 0), None);
        let second = d.on_read(256, 511, 32768, 4096, 0).expect("the second read sends ahead");
        assert_eq!(second.blocks, 512..512 + 4 * 512);
        // The same from anywhere else, after a jump.
        let mut d = SeqDetector::default();
        assert_eq!(d.on_read(9_000, 9_255, 32768, 4096, 0), None);
        assert!(d.on_read(9_256, 9_511, 32768, 4096, 0).is_some());
        assert_eq!(d.run_blocks(), 512);
    }

    #[test]
    fn the_distance_grows_fourfold_with_the_run_up_to_the_maximum() {
        // 128 MiB maximum (32768 blocks), 16 MiB GETs (4096 blocks).
        let got = sequential(60, 32768, 4096);
        let second = got[1].as_ref().expect("second read");
        assert_eq!(second.blocks, 512..512 + 4 * 512, "four times the 512-block run");
        let third = got[2].as_ref().expect("third read");
        assert_eq!(third.blocks, 512 + 4 * 512..768 + 4 * 768, "on to four times 768 blocks");
        for (i, a) in got.iter().enumerate().skip(1) {
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

    #[test]
    fn map_pages_go_out_in_batches_and_always_a_distance_ahead() {
        // 128 MiB distance, 16 MiB steps, batches of at most 1 GiB of volume (262,144 blocks).
        let got = sequential_with_map(4096, 32768, 4096, 262_144);
        let mut loaded_to = 0;
        let mut batches = 0;
        for (i, a) in got.iter().enumerate() {
            let Some(a) = a else { continue };
            let distance = a.blocks.end - (i as u64 + 1) * 256;
            if !a.map.is_empty() {
                assert_eq!(a.map.start, loaded_to.max(a.blocks.end), "no page asked twice");
                assert!(a.map.end - a.blocks.end <= 262_144, "{a:?}: never past the cap");
                loaded_to = a.map.end;
                batches += 1;
            }
            assert!(loaded_to >= a.blocks.end + distance, "{a:?}: the pages a distance ahead");
            if distance == 32768 {
                // At full distance half a batch (four distances) is always loaded ahead, so a
                // far store's batch has that long to arrive.
                assert!(loaded_to >= a.blocks.end + 4 * 32768, "{a:?}: half a batch ahead");
            }
        }
        // Half a GiB of volume per batch once the distance is full (each tops the loaded map up
        // to 1 GiB ahead), against one per 16 MiB step: 4 GiB read in 8 batches and the few
        // small ones of the ramp (12 in all).
        let steps = got.iter().flatten().count();
        assert!(batches <= 12, "{batches} map batches for {steps} steps");
        assert!(steps > 200);
        // A short run's batch is small: a few distances, not the cap.
        let short = sequential_with_map(2, 32768, 4096, 262_144);
        let first = short[1].as_ref().expect("second read");
        assert_eq!(first.map.end - first.blocks.end, 8 * 2048, "eight distances of 2048 blocks");
    }
}
