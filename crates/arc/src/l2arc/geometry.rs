//! Where things sit inside a log block (format version 2), derived from `log_block_bytes` alone.
//!
//! A log block is a run of 4 KiB **units**: the first `meta_units` hold the header and the entry
//! table, the remaining `data_units` hold cached blocks, each starting on a unit boundary and
//! taking whole units (as OpenZFS stores L2ARC buffers at the device's ashift). The data units
//! form **buckets** of 8 (the last one may be shorter). A cached block may only sit inside one
//! of two buckets chosen by hashing its key with the slot index ([`candidate_buckets`]), so the
//! in-memory index can name its place with 4 bits (which candidate, which unit of the bucket)
//! instead of a unit number. Design note: docs/design/0005-l2arc-index.md.

use crate::key::BlockKey;

/// The allocation and alignment unit of data inside a log block (and of O_DIRECT reads).
pub(crate) const UNIT_BYTES: u32 = 4096;
/// Units per placement bucket: the index stores a block's unit within its bucket in 3 bits.
pub(crate) const BUCKET_UNITS: u32 = 8;
/// Bits the index needs for a block's place within its log block: 1 for the candidate bucket
/// and 3 for the unit within it.
pub(crate) const PLACE_BITS: u32 = 4;
/// Bytes of the log-block header and of one entry-table entry.
pub(crate) const HEADER_BYTES: u32 = 64;
pub(crate) const ENTRY_BYTES: u32 = 32;

/// The layout of every log block of one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) block_bytes: u32,
    /// Units reserved at the start of the block for the header and a full entry table.
    pub(crate) meta_units: u32,
    /// Units after the metadata that hold cached blocks.
    pub(crate) data_units: u32,
    pub(crate) buckets: u32,
}

impl Geometry {
    /// The layout for log blocks of `block_bytes` (a multiple of [`UNIT_BYTES`], at least two
    /// units). The metadata area is the fewest units that hold the header plus one entry per
    /// remaining unit, so a block can never have more entries than its table can list.
    pub(crate) fn new(block_bytes: u32) -> Self {
        let units = block_bytes / UNIT_BYTES;
        debug_assert!(units >= 2 && block_bytes.is_multiple_of(UNIT_BYTES));
        // Smallest m with HEADER + ENTRY * (units - m) <= m * UNIT.
        let meta_units = (u64::from(HEADER_BYTES) + u64::from(ENTRY_BYTES) * u64::from(units))
            .div_ceil(u64::from(UNIT_BYTES + ENTRY_BYTES)) as u32;
        let meta_units = meta_units.clamp(1, units - 1);
        let data_units = units - meta_units;
        Self { block_bytes, meta_units, data_units, buckets: data_units.div_ceil(BUCKET_UNITS) }
    }

    /// Bytes of the metadata area (header plus the longest entry table).
    pub(crate) fn meta_bytes(&self) -> u32 {
        self.meta_units * UNIT_BYTES
    }

    /// Units in `bucket` (8, or fewer for the last one).
    pub(crate) fn bucket_units(&self, bucket: u32) -> u32 {
        (self.data_units - bucket * BUCKET_UNITS).min(BUCKET_UNITS)
    }

    /// Units a cached block of `len_bytes` takes (at least one).
    pub(crate) fn units_for(len_bytes: u32) -> u32 {
        len_bytes.div_ceil(UNIT_BYTES).max(1)
    }

    /// Largest cached block a log block can take: one whole bucket.
    pub(crate) fn largest_entry_bytes(&self) -> u32 {
        self.data_units.min(BUCKET_UNITS) * UNIT_BYTES
    }

    /// Byte offset, from the start of the block, of data unit `unit`.
    pub(crate) fn unit_offset(&self, unit: u32) -> u32 {
        (self.meta_units + unit) * UNIT_BYTES
    }

    /// Whether `units` units starting at data unit `unit` lie inside one of `key`'s candidate
    /// buckets in `slot`; returns the place (candidate, unit within the bucket).
    pub(crate) fn place_of(&self, key: &BlockKey, slot: u32, unit: u32, units: u32) -> Option<u8> {
        // `unit` and `units` may come from a damaged log block on the device: no overflow.
        let end = unit.checked_add(units)?;
        let candidates = candidate_buckets(key, slot, self.buckets);
        candidates.iter().enumerate().find_map(|(choice, &bucket)| {
            let first = bucket * BUCKET_UNITS;
            let inside = unit >= first && end <= first + self.bucket_units(bucket);
            inside.then(|| encode_place(choice as u32, unit - first))
        })
    }

    /// The data unit named by a place for `key` in `slot`.
    pub(crate) fn unit_of(&self, key: &BlockKey, slot: u32, place: u8) -> u32 {
        let (choice, within) = decode_place(place);
        candidate_buckets(key, slot, self.buckets)[choice as usize] * BUCKET_UNITS + within
    }
}

pub(crate) fn encode_place(choice: u32, within: u32) -> u8 {
    debug_assert!(choice < 2 && within < BUCKET_UNITS);
    ((choice << 3) | within) as u8
}

pub(crate) fn decode_place(place: u8) -> (u32, u32) {
    (u32::from(place >> 3) & 1, u32::from(place) & 7)
}

/// The two buckets of a log block in slot `slot` where `key` may be stored:
/// `h = xxh3_64(segment_id u64 LE ++ offset_bytes u32 LE ++ slot u32 LE)`, then
/// `(low 32 bits of h) * buckets >> 32` and `(high 32 bits of h) * buckets >> 32`. Part of the
/// on-device format: rebuild checks every entry against it. The slot takes part so that a block
/// that found both buckets full in one log block gets two other buckets in the next one.
pub(crate) fn candidate_buckets(key: &BlockKey, slot: u32, buckets: u32) -> [u32; 2] {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&key.segment_id.to_le_bytes());
    bytes[8..12].copy_from_slice(&key.offset_bytes.to_le_bytes());
    bytes[12..].copy_from_slice(&slot.to_le_bytes());
    let h = xxhash_rust::xxh3::xxh3_64(&bytes);
    let scale = |half: u64| (((half & 0xffff_ffff) * u64::from(buckets)) >> 32) as u32;
    [scale(h), scale(h >> 32)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_area_holds_a_full_entry_table() {
        for block_bytes in [8 << 10, 16 << 10, 128 << 10, 1 << 20, 16 << 20, 64 << 20] {
            let g = Geometry::new(block_bytes);
            let table = HEADER_BYTES + ENTRY_BYTES * g.data_units;
            assert!(table <= g.meta_bytes(), "{block_bytes}: table {table}");
            assert!(
                g.meta_units == 1
                    || HEADER_BYTES + ENTRY_BYTES * (g.data_units + 1)
                        > (g.meta_units - 1) * UNIT_BYTES
            );
            assert_eq!((g.meta_units + g.data_units) * UNIT_BYTES, block_bytes);
        }
        let g = Geometry::new(16 << 10);
        assert_eq!((g.meta_units, g.data_units, g.buckets), (1, 3, 1));
        let g = Geometry::new(1 << 20);
        assert_eq!((g.meta_units, g.data_units, g.buckets), (2, 254, 32));
        assert_eq!(g.bucket_units(31), 6);
        let g = Geometry::new(16 << 20);
        assert_eq!((g.meta_units, g.data_units), (32, 4064));
    }

    #[test]
    fn places_round_trip_and_stay_inside_a_candidate_bucket() {
        let g = Geometry::new(1 << 20);
        for i in 0..500u64 {
            let key = BlockKey::new(i * 31, (i * 4096) as u32);
            let slot = (i % 7) as u32;
            let [b0, b1] = candidate_buckets(&key, slot, g.buckets);
            assert!(b0 < g.buckets && b1 < g.buckets);
            let unit = b1 * BUCKET_UNITS + 2;
            let place = g.place_of(&key, slot, unit, 1).expect("inside a candidate");
            assert_eq!(g.unit_of(&key, slot, place), unit);
            let outside = (0..g.data_units).find(|u| ![b0, b1].contains(&(u / BUCKET_UNITS)));
            if let Some(u) = outside {
                assert_eq!(g.place_of(&key, slot, u, 1), None);
            }
        }
        assert_eq!(Geometry::units_for(0), 1);
        assert_eq!(Geometry::units_for(4097), 2);
    }

    #[test]
    fn candidate_buckets_are_pinned() {
        // Part of the on-device format: a change here makes every cached block unreadable.
        assert_eq!(candidate_buckets(&BlockKey::new(1, 4096), 3, 32), PINNED);
    }

    const PINNED: [u32; 2] = [25, 24];
}
