//! The open log block in memory: places each appended block in the emptier of its two
//! candidate buckets (at the lowest run of free units that holds it), keeps the data area's
//! bytes, and remembers which units were added since the last write-out.

use super::geometry::{encode_place, Geometry, BUCKET_UNITS, UNIT_BYTES};
use super::log_block::LogEntry;
use crate::key::BlockKey;

/// Units that separate two runs of new units and are written along with them rather than
/// costing another `pwrite` (rewriting a unit with the same bytes is harmless).
const GAP_UNITS_MERGED_MAX: u32 = 8;

pub(crate) struct LogBlockBuilder {
    geometry: Geometry,
    slot: u32,
    /// The data area: `data_units` units.
    data: Vec<u8>,
    /// Used units of each bucket, one bit per unit.
    used: Vec<u8>,
    free_units: u32,
    entries: Vec<LogEntry>,
    places: Vec<u8>,
}

impl LogBlockBuilder {
    pub(crate) fn new(geometry: Geometry, slot: u32) -> Self {
        Self::with_buffer(geometry, slot, Vec::new())
    }

    /// Reuses `buffer` (a closed block's data area) for the data, zeroed.
    pub(crate) fn with_buffer(geometry: Geometry, slot: u32, mut buffer: Vec<u8>) -> Self {
        buffer.clear();
        buffer.resize(geometry.data_units as usize * UNIT_BYTES as usize, 0);
        Self {
            geometry,
            slot,
            data: buffer,
            used: vec![0; geometry.buckets as usize],
            free_units: geometry.data_units,
            entries: Vec::new(),
            places: Vec::new(),
        }
    }

    /// Gives the data buffer back for the next block.
    pub(crate) fn into_buffer(self) -> Vec<u8> {
        self.data
    }

    pub(crate) fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    pub(crate) fn free_units(&self) -> u32 {
        self.free_units
    }

    /// The lowest unit of `bucket` that starts `units` free units, if any.
    fn free_run(&self, bucket: u32, units: u32) -> Option<u32> {
        let size = self.geometry.bucket_units(bucket);
        let mask = (1u32 << units) - 1;
        let used = u32::from(self.used[bucket as usize]);
        (0..=size.checked_sub(units)?).find(|start| used & (mask << start) == 0)
    }

    /// Places `data` for `key`; `None` when neither candidate bucket has room (the caller keeps
    /// the block for the next log block). The caller checked the length against
    /// [`Geometry::largest_entry_bytes`]; `checksum` is `xxh3_64(data)` (the ARC's, not
    /// recomputed: every read verifies the bytes against its own pointer's checksum anyway).
    pub(crate) fn try_append(
        &mut self,
        key: BlockKey,
        data: &[u8],
        checksum: u64,
    ) -> Option<LogEntry> {
        let len_bytes = u32::try_from(data.len()).ok()?;
        let units = Geometry::units_for(len_bytes);
        if units > BUCKET_UNITS || units > self.free_units {
            return None;
        }
        let buckets = super::geometry::candidate_buckets(&key, self.slot, self.geometry.buckets);
        let free_in = |b: u32| self.geometry.bucket_units(b) - self.used[b as usize].count_ones();
        // The emptier bucket first, so both fill evenly (two choices keep blocks ~99 % full).
        let order = if free_in(buckets[1]) > free_in(buckets[0]) { [1, 0] } else { [0, 1] };
        let (choice, start) = order
            .into_iter()
            .find_map(|c| self.free_run(buckets[c], units).map(|start| (c as u32, start)))?;
        let bucket = buckets[choice as usize];
        self.used[bucket as usize] |= (((1u32 << units) - 1) << start) as u8;
        self.free_units -= units;
        let unit = bucket * BUCKET_UNITS + start;
        let from = unit as usize * UNIT_BYTES as usize;
        let end = from + (units * UNIT_BYTES) as usize;
        self.data[from..from + data.len()].copy_from_slice(data);
        self.data[from + data.len()..end].fill(0);
        let entry = LogEntry { key, len_bytes, checksum, unit };
        self.entries.push(entry);
        self.places.push(encode_place(choice, start));
        Some(entry)
    }

    pub(crate) fn entries(&self) -> &[LogEntry] {
        &self.entries
    }

    /// The index place of each entry, in entry order.
    pub(crate) fn places(&self) -> &[u8] {
        &self.places
    }

    /// The cached bytes of `entry`.
    #[cfg(test)]
    pub(crate) fn entry_bytes(&self, entry: &LogEntry) -> &[u8] {
        let from = entry.unit as usize * UNIT_BYTES as usize;
        &self.data[from..from + entry.len_bytes as usize]
    }

    /// Data units to write for the entries from `first_entry` on: runs `(unit, units)` covering
    /// them, runs less than [`GAP_UNITS_MERGED_MAX`] apart merged.
    pub(crate) fn runs_since(&self, first_entry: usize) -> Vec<(u32, u32)> {
        let mut spans: Vec<(u32, u32)> = self.entries[first_entry..]
            .iter()
            .map(|e| (e.unit, e.unit + Geometry::units_for(e.len_bytes)))
            .collect();
        spans.sort_unstable();
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for (from, to) in spans {
            match runs.last_mut() {
                Some((_, end)) if from <= *end + GAP_UNITS_MERGED_MAX => *end = (*end).max(to),
                _ => runs.push((from, to)),
            }
        }
        runs.into_iter().map(|(from, to)| (from, to - from)).collect()
    }

    /// The data area's bytes of `units` units from `unit`.
    pub(crate) fn unit_bytes(&self, unit: u32, units: u32) -> &[u8] {
        let from = unit as usize * UNIT_BYTES as usize;
        &self.data[from..from + (units * UNIT_BYTES) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_land_in_a_candidate_bucket_and_never_overlap() {
        let g = Geometry::new(1 << 20);
        let mut b = LogBlockBuilder::new(g, 9);
        let mut placed = 0;
        for i in 0..400u64 {
            let len = 100 + (i as usize * 997) % 9000;
            if b.try_append(BlockKey::new(i, 0), &vec![i as u8; len], 0).is_some() {
                placed += 1;
            }
        }
        assert!(placed > 100);
        let mut taken = vec![false; g.data_units as usize];
        for (e, place) in b.entries().iter().zip(b.places()) {
            let units = Geometry::units_for(e.len_bytes);
            assert_eq!(g.place_of(&e.key, 9, e.unit, units), Some(*place));
            for u in e.unit..e.unit + units {
                assert!(!std::mem::replace(&mut taken[u as usize], true), "unit {u} twice");
            }
            assert!(b.entry_bytes(e).iter().all(|x| *x == e.key.segment_id as u8));
        }
        assert_eq!(g.data_units - b.free_units(), taken.iter().filter(|t| **t).count() as u32);
    }

    #[test]
    fn one_unit_blocks_fill_almost_every_unit() {
        let g = Geometry::new(1 << 20);
        let mut b = LogBlockBuilder::new(g, 0);
        let mut misses = 0;
        for i in 0..10_000u64 {
            if b.try_append(BlockKey::new(i, 0), &[1u8; 4096], 0).is_none() {
                misses += 1;
                if misses > 64 {
                    break;
                }
            }
        }
        assert!(b.free_units() * 100 < g.data_units * 4, "{} units left", b.free_units());
    }

    #[test]
    fn runs_cover_new_entries_and_merge_small_gaps() {
        let g = Geometry::new(1 << 20);
        let mut b = LogBlockBuilder::new(g, 0);
        for i in 0..40u64 {
            b.try_append(BlockKey::new(i, 0), &[1u8; 4096], 0);
        }
        let runs = b.runs_since(10);
        for e in &b.entries()[10..] {
            assert!(runs.iter().any(|(u, n)| e.unit >= *u && e.unit < u + n), "unit {}", e.unit);
        }
        for w in runs.windows(2) {
            assert!(w[1].0 > w[0].0 + w[0].1 + GAP_UNITS_MERGED_MAX);
        }
    }
}
