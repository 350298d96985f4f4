//! The log block (format version 2): the unit of the cache-device ring. Its first `meta_units`
//! 4 KiB units hold the header and the entry table; the rest hold cached blocks, each starting
//! on a unit boundary inside one of its two candidate buckets (`geometry.rs`). The table names
//! every entry's key, length, checksum and unit, so rebuild needs nothing else.
//!
//! ```text
//! header (64 bytes)
//! 0   u64  magic "FDL2LOGB"
//! 8   u32  version (2)
//! 12  u32  slot_index          (where in the ring this block must sit)
//! 16  u128 pool_guid
//! 32  u64  device_guid
//! 40  u64  sequence            (per device, +1 per block opened; newest wins)
//! 48  u32  entry_count         (at most data_units)
//! 52  u32  meta_bytes          (meta_units * 4096; must match log_block_bytes)
//! 56  u64  checksum: xxh3_64(header bytes 0..56 ++ entry table)
//! entry table: entry_count x 32 bytes
//! 0   u64  segment_id
//! 8   u32  offset_bytes
//! 12  u32  physical_len
//! 16  u64  data_checksum: xxh3_64(data)
//! 24  u32  unit                (data unit; the data starts (meta_units + unit) * 4096 into the block)
//! 28  u32  reserved (0)
//! ```
//! The data is not covered by the header checksum: every read checks the caller's checksum, so
//! damage to data costs exactly the entries it touches.

use super::geometry::{Geometry, BUCKET_UNITS, ENTRY_BYTES, HEADER_BYTES, UNIT_BYTES};
use crate::codec::{checksum64_parts, get_u32, get_u64, CodecError, Reader, Writer};
use crate::key::BlockKey;

const LOG_BLOCK_MAGIC: u64 = u64::from_le_bytes(*b"FDL2LOGB");
const LOG_BLOCK_VERSION: u32 = 2;
/// Version 1 (data packed down from the end of the block) is left on devices formatted before:
/// such a block is treated as foreign, never parsed.
const LOG_BLOCK_VERSION_PACKED: u32 = 1;
pub(crate) const LOG_HEADER_BYTES: usize = HEADER_BYTES as usize;
pub(crate) const LOG_ENTRY_BYTES: usize = ENTRY_BYTES as usize;

/// One cached block inside a log block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LogEntry {
    pub(crate) key: BlockKey,
    pub(crate) len_bytes: u32,
    pub(crate) checksum: u64,
    pub(crate) unit: u32,
}

/// What a log block must say about itself to be accepted at a given place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BlockPlace {
    pub(crate) pool_guid: u128,
    pub(crate) device_guid: u64,
    pub(crate) slot_index: u32,
    pub(crate) block_bytes: u32,
}

impl BlockPlace {
    pub(crate) fn geometry(&self) -> Geometry {
        Geometry::new(self.block_bytes)
    }
}

/// The verified metadata of a log block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LogBlockMeta {
    pub(crate) sequence: u64,
    pub(crate) entries: Vec<LogEntry>,
}

/// Why a slot yields no entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum BlockReject {
    /// Never written by this format (no magic): not an error.
    Empty,
    /// Intact but written for another pool, device incarnation, slot or format version: not an
    /// error.
    Foreign,
    /// Damaged (torn or corrupted): its entries are lost.
    Corrupt(String),
}

/// Checks the fixed part of a header and returns how many bytes of metadata (header plus entry
/// table) to read for [`decode_meta`].
pub(crate) fn meta_len_from_header(
    header: &[u8],
    place: &BlockPlace,
) -> Result<usize, BlockReject> {
    if header.len() < LOG_HEADER_BYTES {
        return Err(BlockReject::Corrupt("short header".into()));
    }
    let mut r = Reader::new(header, "cache log block");
    if r.u64()? != LOG_BLOCK_MAGIC {
        return Err(BlockReject::Empty);
    }
    match r.u32()? {
        LOG_BLOCK_VERSION => {}
        LOG_BLOCK_VERSION_PACKED => return Err(BlockReject::Foreign),
        version => return Err(BlockReject::Corrupt(format!("version {version}"))),
    }
    let entry_count = get_u32(header, 48)?;
    if entry_count > place.geometry().data_units {
        return Err(BlockReject::Corrupt(format!("{entry_count} entries cannot fit")));
    }
    Ok(LOG_HEADER_BYTES + entry_count as usize * LOG_ENTRY_BYTES)
}

impl From<CodecError> for BlockReject {
    /// Metadata shorter than its fields (unreachable after the length checks): damaged.
    fn from(e: CodecError) -> Self {
        BlockReject::Corrupt(e.to_string())
    }
}

/// Verifies and parses the metadata of a log block read from `place`.
pub(crate) fn decode_meta(meta: &[u8], place: &BlockPlace) -> Result<LogBlockMeta, BlockReject> {
    let meta_len = meta_len_from_header(meta, place)?;
    if meta.len() < meta_len {
        return Err(BlockReject::Corrupt("short entry table".into()));
    }
    let stored = get_u64(meta, 56)?;
    let computed = checksum64_parts(&[&meta[..56], &meta[LOG_HEADER_BYTES..meta_len]]);
    if stored != computed {
        return Err(BlockReject::Corrupt(format!("checksum {stored:#x} != {computed:#x}")));
    }
    let mut r = Reader::new(&meta[12..56], "cache log block");
    let slot_index = r.u32()?;
    let pool_guid = r.u128()?;
    let device_guid = r.u64()?;
    let sequence = r.u64()?;
    let entry_count = r.u32()?;
    let meta_bytes = r.u32()?;
    if pool_guid != place.pool_guid
        || device_guid != place.device_guid
        || slot_index != place.slot_index
    {
        return Err(BlockReject::Foreign);
    }
    let geometry = place.geometry();
    if sequence == 0 || meta_bytes != geometry.meta_bytes() {
        return Err(BlockReject::Corrupt(format!(
            "bad geometry: seq {sequence}, meta_bytes {meta_bytes}"
        )));
    }
    let entries = decode_entries(&meta[LOG_HEADER_BYTES..meta_len], entry_count, place)?;
    Ok(LogBlockMeta { sequence, entries })
}

fn decode_entries(
    table: &[u8],
    entry_count: u32,
    place: &BlockPlace,
) -> Result<Vec<LogEntry>, BlockReject> {
    let geometry = place.geometry();
    let mut taken = vec![0u64; geometry.data_units.div_ceil(64) as usize];
    let mut r = Reader::new(table, "cache log block entry");
    let mut entries = Vec::with_capacity(entry_count as usize);
    for _ in 0..entry_count {
        let key = BlockKey::new(r.u64()?, r.u32()?);
        let len_bytes = r.u32()?;
        let checksum = r.u64()?;
        let unit = r.u32()?;
        let _reserved = r.u32()?;
        let units = Geometry::units_for(len_bytes);
        let corrupt = |why: &str| BlockReject::Corrupt(format!("entry at unit {unit}: {why}"));
        if len_bytes > BUCKET_UNITS * UNIT_BYTES
            || geometry.place_of(&key, place.slot_index, unit, units).is_none()
        {
            return Err(corrupt("outside the key's buckets"));
        }
        for u in unit..unit + units {
            let (word, bit) = ((u / 64) as usize, u % 64);
            if taken[word] & (1 << bit) != 0 {
                return Err(corrupt("overlaps another entry"));
            }
            taken[word] |= 1 << bit;
        }
        entries.push(LogEntry { key, len_bytes, checksum, unit });
    }
    Ok(entries)
}

/// Encodes header plus entry table for `place`.
pub(crate) fn encode_meta(place: &BlockPlace, sequence: u64, entries: &[LogEntry]) -> Vec<u8> {
    let mut table = Writer::with_capacity(entries.len() * LOG_ENTRY_BYTES);
    for e in entries {
        table.u64(e.key.segment_id).u32(e.key.offset_bytes).u32(e.len_bytes);
        table.u64(e.checksum).u32(e.unit).u32(0);
    }
    let entry_count = u32::try_from(entries.len()).expect("entries bounded by block size");
    let mut meta = Writer::with_capacity(LOG_HEADER_BYTES + table.len());
    meta.u64(LOG_BLOCK_MAGIC).u32(LOG_BLOCK_VERSION).u32(place.slot_index);
    meta.u128(place.pool_guid).u64(place.device_guid).u64(sequence);
    meta.u32(entry_count).u32(place.geometry().meta_bytes());
    debug_assert_eq!(meta.len(), 56);
    let checksum = checksum64_parts(&[&meta.buf, &table.buf]);
    meta.u64(checksum).bytes(&table.buf);
    let meta = meta.into_inner();
    // Pair assertion: the metadata must verify right before it is written.
    debug_assert_eq!(decode_meta(&meta, place).map(|m| m.entries.len()), Ok(entries.len()));
    meta
}

#[cfg(test)]
mod tests {
    use super::super::builder::LogBlockBuilder;
    use super::*;

    fn place() -> BlockPlace {
        BlockPlace { pool_guid: 7, device_guid: 9, slot_index: 3, block_bytes: 64 << 10 }
    }

    fn built() -> LogBlockBuilder {
        let mut b = LogBlockBuilder::new(place().geometry(), 3);
        b.try_append(BlockKey::new(1, 0), &[1u8; 1000], xxhash_rust::xxh3::xxh3_64(&[1u8; 1000]))
            .expect("room");
        b.try_append(
            BlockKey::new(1, 4096),
            &[2u8; 5000],
            xxhash_rust::xxh3::xxh3_64(&[2u8; 5000]),
        )
        .expect("room");
        b
    }

    #[test]
    fn meta_round_trip() {
        let b = built();
        let meta = encode_meta(&place(), 5, b.entries());
        assert_eq!(meta_len_from_header(&meta, &place()), Ok(meta.len()));
        let parsed = decode_meta(&meta, &place()).expect("valid");
        assert_eq!(parsed.sequence, 5);
        assert_eq!(parsed.entries, b.entries());
        let e = parsed.entries[1];
        assert_eq!(b.entry_bytes(&e), &[2u8; 5000][..]);
    }

    #[test]
    fn flips_are_corrupt_and_foreign_places_are_foreign() {
        let b = built();
        let meta = encode_meta(&place(), 5, b.entries());
        for i in 8..meta.len() {
            let mut bad = meta.clone();
            bad[i] ^= 0x10;
            assert!(decode_meta(&bad, &place()).is_err(), "flip at {i} accepted");
        }
        let mut zeroed = meta.clone();
        zeroed[..8].fill(0);
        assert_eq!(decode_meta(&zeroed, &place()), Err(BlockReject::Empty));
        let other_slot = BlockPlace { slot_index: 4, ..place() };
        assert_eq!(decode_meta(&meta, &other_slot), Err(BlockReject::Foreign));
        let other_device = BlockPlace { device_guid: 10, ..place() };
        assert_eq!(decode_meta(&meta, &other_device), Err(BlockReject::Foreign));
        let mut old = meta.clone();
        old[8..12].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(meta_len_from_header(&old, &place()), Err(BlockReject::Foreign));
    }

    #[test]
    fn entries_outside_their_buckets_or_overlapping_are_corrupt() {
        let b = built();
        let mut entries = b.entries().to_vec();
        let g = place().geometry();
        let [b0, b1] = super::super::geometry::candidate_buckets(&entries[0].key, 3, g.buckets);
        let elsewhere = (0..g.buckets).find(|x| *x != b0 && *x != b1).expect("another bucket");
        entries[0].unit = elsewhere * BUCKET_UNITS;
        let meta = encode_meta_unchecked(&entries);
        assert!(matches!(decode_meta(&meta, &place()), Err(BlockReject::Corrupt(_))));
        let mut entries = b.entries().to_vec();
        entries.push(LogEntry { key: BlockKey::new(1, 0), ..entries[0] });
        let meta = encode_meta_unchecked(&entries);
        assert!(matches!(decode_meta(&meta, &place()), Err(BlockReject::Corrupt(_))));
    }

    /// `encode_meta` without its pair assertion, to build invalid tables.
    fn encode_meta_unchecked(entries: &[LogEntry]) -> Vec<u8> {
        let good = encode_meta(&place(), 5, &[]);
        let mut meta = good[..LOG_HEADER_BYTES].to_vec();
        meta[48..52].copy_from_slice(&(entries.len() as u32).to_le_bytes());
        for e in entries {
            meta.extend_from_slice(&e.key.segment_id.to_le_bytes());
            meta.extend_from_slice(&e.key.offset_bytes.to_le_bytes());
            meta.extend_from_slice(&e.len_bytes.to_le_bytes());
            meta.extend_from_slice(&e.checksum.to_le_bytes());
            meta.extend_from_slice(&e.unit.to_le_bytes());
            meta.extend_from_slice(&0u32.to_le_bytes());
        }
        let sum = checksum64_parts(&[&meta[..56], &meta[LOG_HEADER_BYTES..]]);
        meta[56..64].copy_from_slice(&sum.to_le_bytes());
        meta
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn an_entry_at_the_last_units_of_u32_is_corrupt_not_a_panic() {
        // Found by the l2arc_log_block fuzz target (e2e 55): `unit + units` overflowed in
        // `Geometry::place_of` for a unit near u32::MAX read from a damaged table.
        let b = built();
        for unit in [u32::MAX, u32::MAX - 1, u32::MAX - 7] {
            let mut entries = b.entries().to_vec();
            entries[0].unit = unit;
            entries[0].len_bytes = 8 * UNIT_BYTES;
            let meta = encode_meta_unchecked(&entries);
            assert!(matches!(decode_meta(&meta, &place()), Err(BlockReject::Corrupt(_))));
        }
    }

    #[test]
    fn golden_metadata_is_pinned() {
        // Format version 2, docs/format/l2arc.md: a change here must come with a new version.
        let place =
            BlockPlace { pool_guid: 7, device_guid: 9, slot_index: 3, block_bytes: 1 << 20 };
        let mut b = LogBlockBuilder::new(place.geometry(), 3);
        b.try_append(
            BlockKey::new(0x1122_3344, 8192),
            b"golden",
            xxhash_rust::xxh3::xxh3_64(b"golden"),
        )
        .expect("room");
        let meta = encode_meta(&place, 42, b.entries());
        assert_eq!(hex(&meta), GOLDEN_META_V2);
    }

    const GOLDEN_META_V2: &str = "46444c324c4f474202000000030000000700000000000000000000000000000009000000000000002a0000000000000001000000002000005ecc84e570d273314433221100000000002000000600000022b6fff3a93b267db800000000000000";

    #[test]
    fn huge_entry_count_is_rejected_before_reading() {
        let b = built();
        let mut meta = encode_meta(&place(), 5, b.entries());
        meta[48..52].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(meta_len_from_header(&meta, &place()), Err(BlockReject::Corrupt(_))));
    }
}
