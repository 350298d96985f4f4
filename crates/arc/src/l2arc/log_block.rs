//! The log block: the unit of the cache-device ring. A slotted page: the header and the entry
//! table grow from the front, block data grows from the back, so a partly filled block can be
//! written out and later extended in place without moving data that readers already use.
//!
//! ```text
//! header (64 bytes)
//! 0   u64  magic "FDL2LOGB"
//! 8   u32  version (1)
//! 12  u32  slot_index          (where in the ring this block must sit)
//! 16  u128 pool_guid
//! 32  u64  device_guid
//! 40  u64  sequence            (per device, +1 per block opened; newest wins)
//! 48  u32  entry_count
//! 52  u32  data_low_offset     (data occupies [data_low_offset, log_block_bytes))
//! 56  u64  checksum: xxh3_64(header bytes 0..56 ++ entry table)
//! entry table: entry_count x 32 bytes
//! 0   u64  segment_id
//! 8   u32  offset_bytes
//! 12  u32  physical_len
//! 16  u64  data_checksum: xxh3_64(data)
//! 24  u32  data_offset         (from the start of the log block)
//! 28  u32  reserved (0)
//! ```
//! The data itself is not covered by the header checksum: each entry's data checksum is verified
//! on every read, so damage to data costs exactly the entries it touches.

use crate::codec::{checksum64_parts, get_u32, get_u64, CodecError, Reader, Writer};
use crate::key::BlockKey;

const LOG_BLOCK_MAGIC: u64 = u64::from_le_bytes(*b"FDL2LOGB");
const LOG_BLOCK_VERSION: u32 = 1;
pub(crate) const LOG_HEADER_BYTES: usize = 64;
pub(crate) const LOG_ENTRY_BYTES: usize = 32;

/// One cached block inside a log block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LogEntry {
    pub(crate) key: BlockKey,
    pub(crate) len_bytes: u32,
    pub(crate) checksum: u64,
    pub(crate) data_offset: u32,
}

/// What a log block must say about itself to be accepted at a given place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BlockPlace {
    pub(crate) pool_guid: u128,
    pub(crate) device_guid: u64,
    pub(crate) slot_index: u32,
    pub(crate) block_bytes: u32,
}

/// The verified metadata of a log block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LogBlockMeta {
    pub(crate) sequence: u64,
    pub(crate) data_low: u32,
    pub(crate) entries: Vec<LogEntry>,
}

/// Why a slot yields no entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum BlockReject {
    /// Never written by this format (no magic): not an error.
    Empty,
    /// Intact but written for another pool, device incarnation or slot: not an error.
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
    let version = r.u32()?;
    if version != LOG_BLOCK_VERSION {
        return Err(BlockReject::Corrupt(format!("version {version}")));
    }
    let entry_count = get_u32(header, 48)?;
    let meta_len = LOG_HEADER_BYTES as u64 + u64::from(entry_count) * LOG_ENTRY_BYTES as u64;
    if meta_len > u64::from(place.block_bytes) {
        return Err(BlockReject::Corrupt(format!("{entry_count} entries cannot fit")));
    }
    Ok(meta_len as usize)
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
    let data_low = r.u32()?;
    if pool_guid != place.pool_guid
        || device_guid != place.device_guid
        || slot_index != place.slot_index
    {
        return Err(BlockReject::Foreign);
    }
    if sequence == 0 || (data_low as usize) < meta_len || data_low > place.block_bytes {
        return Err(BlockReject::Corrupt(format!(
            "bad geometry: seq {sequence}, data_low {data_low}"
        )));
    }
    let entries = decode_entries(&meta[LOG_HEADER_BYTES..meta_len], entry_count, data_low, place)?;
    Ok(LogBlockMeta { sequence, data_low, entries })
}

fn decode_entries(
    table: &[u8],
    entry_count: u32,
    data_low: u32,
    place: &BlockPlace,
) -> Result<Vec<LogEntry>, BlockReject> {
    let mut r = Reader::new(table, "cache log block entry");
    let mut entries = Vec::with_capacity(entry_count as usize);
    for _ in 0..entry_count {
        let segment_id = r.u64()?;
        let offset_bytes = r.u32()?;
        let len_bytes = r.u32()?;
        let checksum = r.u64()?;
        let data_offset = r.u32()?;
        let _reserved = r.u32()?;
        let end = u64::from(data_offset) + u64::from(len_bytes);
        if data_offset < data_low || end > u64::from(place.block_bytes) {
            return Err(BlockReject::Corrupt(format!(
                "entry data {data_offset}+{len_bytes} out of range"
            )));
        }
        entries.push(LogEntry {
            key: BlockKey::new(segment_id, offset_bytes),
            len_bytes,
            checksum,
            data_offset,
        });
    }
    Ok(entries)
}

/// Encodes header plus entry table for `place`.
pub(crate) fn encode_meta(
    place: &BlockPlace,
    sequence: u64,
    data_low: u32,
    entries: &[LogEntry],
) -> Vec<u8> {
    let mut table = Writer::with_capacity(entries.len() * LOG_ENTRY_BYTES);
    for e in entries {
        table.u64(e.key.segment_id).u32(e.key.offset_bytes).u32(e.len_bytes);
        table.u64(e.checksum).u32(e.data_offset).u32(0);
    }
    let entry_count = u32::try_from(entries.len()).expect("entries bounded by block size");
    let mut meta = Writer::with_capacity(LOG_HEADER_BYTES + table.len());
    meta.u64(LOG_BLOCK_MAGIC).u32(LOG_BLOCK_VERSION).u32(place.slot_index);
    meta.u128(place.pool_guid).u64(place.device_guid).u64(sequence);
    meta.u32(entry_count).u32(data_low);
    debug_assert_eq!(meta.len(), 56);
    let checksum = checksum64_parts(&[&meta.buf, &table.buf]);
    meta.u64(checksum).bytes(&table.buf);
    let meta = meta.into_inner();
    // Pair assertion: the metadata must verify right before it is written.
    debug_assert_eq!(decode_meta(&meta, place).map(|m| m.entries.len()), Ok(entries.len()));
    meta
}

/// Accumulates entries for one log block in memory.
pub(crate) struct LogBlockBuilder {
    block_bytes: u32,
    buf: Vec<u8>,
    entries: Vec<LogEntry>,
    data_low: u32,
}

impl LogBlockBuilder {
    pub(crate) fn new(block_bytes: u32) -> Self {
        Self {
            block_bytes,
            buf: vec![0u8; block_bytes as usize],
            entries: Vec::new(),
            data_low: block_bytes,
        }
    }

    /// Largest data an empty block can take.
    pub(crate) fn capacity_for_one(block_bytes: u32) -> u64 {
        u64::from(block_bytes) - (LOG_HEADER_BYTES + LOG_ENTRY_BYTES) as u64
    }

    fn table_end_after(&self, extra_entries: usize) -> u64 {
        (LOG_HEADER_BYTES + (self.entries.len() + extra_entries) * LOG_ENTRY_BYTES) as u64
    }

    /// Free bytes left for one more entry's data.
    pub(crate) fn room_for_next(&self) -> u64 {
        u64::from(self.data_low).saturating_sub(self.table_end_after(1))
    }

    pub(crate) fn fits(&self, len_bytes: usize) -> bool {
        len_bytes as u64 <= self.room_for_next()
    }

    /// Places `data` below the current data region. The caller checked [`Self::fits`].
    pub(crate) fn append(&mut self, key: BlockKey, data: &[u8]) -> LogEntry {
        assert!(self.fits(data.len()), "append without room");
        let len_bytes = u32::try_from(data.len()).expect("fits in a log block");
        let data_offset = self.data_low - len_bytes;
        self.buf[data_offset as usize..self.data_low as usize].copy_from_slice(data);
        self.data_low = data_offset;
        let entry =
            LogEntry { key, len_bytes, checksum: xxhash_rust::xxh3::xxh3_64(data), data_offset };
        self.entries.push(entry);
        entry
    }

    pub(crate) fn entries(&self) -> &[LogEntry] {
        &self.entries
    }

    pub(crate) fn data_low(&self) -> u32 {
        self.data_low
    }

    pub(crate) fn block_bytes(&self) -> u32 {
        self.block_bytes
    }

    /// Block bytes in `[from, to)`, offsets from the start of the block.
    pub(crate) fn bytes(&self, from: u32, to: u32) -> &[u8] {
        &self.buf[from as usize..to as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place() -> BlockPlace {
        BlockPlace { pool_guid: 7, device_guid: 9, slot_index: 3, block_bytes: 8192 }
    }

    fn built() -> LogBlockBuilder {
        let mut b = LogBlockBuilder::new(8192);
        b.append(BlockKey::new(1, 0), &[1u8; 1000]);
        b.append(BlockKey::new(1, 4096), &[2u8; 500]);
        b
    }

    #[test]
    fn meta_round_trip() {
        let b = built();
        let meta = encode_meta(&place(), 5, b.data_low(), b.entries());
        assert_eq!(meta_len_from_header(&meta, &place()), Ok(meta.len()));
        let parsed = decode_meta(&meta, &place()).expect("valid");
        assert_eq!(parsed.sequence, 5);
        assert_eq!(parsed.entries, b.entries());
        assert_eq!(parsed.data_low, 8192 - 1500);
        let e = parsed.entries[1];
        assert_eq!(b.bytes(e.data_offset, e.data_offset + e.len_bytes), &[2u8; 500][..]);
    }

    #[test]
    fn flips_are_corrupt_and_foreign_places_are_foreign() {
        let b = built();
        let meta = encode_meta(&place(), 5, b.data_low(), b.entries());
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
    }

    #[test]
    fn builder_respects_capacity() {
        let mut b = LogBlockBuilder::new(8192);
        let big = LogBlockBuilder::capacity_for_one(8192) as usize;
        assert!(b.fits(big));
        assert!(!b.fits(big + 1));
        b.append(BlockKey::new(0, 0), &vec![0u8; 4000]);
        assert!(!b.fits(4200));
        assert_eq!(b.room_for_next(), 8192 - 4000 - 64 - 64);
    }

    #[test]
    fn huge_entry_count_is_rejected_before_reading() {
        let b = built();
        let mut meta = encode_meta(&place(), 5, b.data_low(), b.entries());
        meta[48..52].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(meta_len_from_header(&meta, &place()), Err(BlockReject::Corrupt(_))));
    }
}
