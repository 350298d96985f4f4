//! The decoders of bytes read from cache devices (label, log-block metadata) and of the hot-set
//! blob, for the cargo-fuzz targets in `fuzz/` at the repository root. Not an API: hidden from
//! the docs and free to change with the format.
//!
//! The crate's own types stay crate-private: the wrappers here are opaque (compare, print,
//! encode), which is all a round-trip check needs. The `reseal_*` helpers recompute checksums
//! of mutated bytes, so a target gets past them to the field checks behind.

use super::builder::LogBlockBuilder;
use super::geometry::UNIT_BYTES;
use super::label::Label;
use super::log_block::{
    decode_meta, encode_meta, meta_len_from_header, BlockPlace, BlockReject, LogBlockMeta,
    LOG_ENTRY_BYTES, LOG_HEADER_BYTES,
};
use crate::codec::checksum64_parts;
use crate::key::BlockKey;

pub use super::label::cache_label_pool_guid;
pub use crate::hot_set::{decode_hot_set, encode_hot_set, HotSetError};

/// Bytes of one label copy that carry data (the rest of its 4 KiB sector is zero).
pub const L2_LABEL_BYTES: usize = super::label::LABEL_BYTES;
/// Bytes of the fixed log-block header.
pub const L2_LOG_HEADER_BYTES: usize = LOG_HEADER_BYTES;

/// A verified cache-device label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L2Label(Label);

impl L2Label {
    pub fn new(pool_guid: u128, device_guid: u64, log_block_bytes: u32, slot_count: u32) -> Self {
        L2Label(Label { pool_guid, device_guid, log_block_bytes, slot_count })
    }
    pub fn decode(buf: &[u8]) -> Result<Self, String> {
        Label::decode(buf).map(L2Label)
    }
    pub fn decode_either(first: &[u8], second: &[u8]) -> Result<Self, String> {
        Label::decode_either(first, second).map(L2Label)
    }
    /// Like `decode_either`, also accepting the previous format version (what `destroy` and
    /// `open` read); returns the version too.
    pub fn decode_either_any_version(first: &[u8], second: &[u8]) -> Result<(Self, u32), String> {
        Label::decode_either_any_version(first, second).map(|(l, v)| (L2Label(l), v))
    }
    pub fn encode(&self) -> [u8; L2_LABEL_BYTES] {
        self.0.encode()
    }
    pub fn pool_guid(&self) -> u128 {
        self.0.pool_guid
    }
}

/// Where a log block is read from: what it must name to be accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L2Place(BlockPlace);

impl L2Place {
    pub fn new(pool_guid: u128, device_guid: u64, slot_index: u32, block_bytes: u32) -> Self {
        L2Place(BlockPlace { pool_guid, device_guid, slot_index, block_bytes })
    }
    pub fn block_bytes(&self) -> u32 {
        self.0.block_bytes
    }
}

/// Why a slot yields no entries (the crate's `BlockReject`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum L2Reject {
    Empty,
    Foreign,
    Corrupt(String),
}

impl From<BlockReject> for L2Reject {
    fn from(r: BlockReject) -> Self {
        match r {
            BlockReject::Empty => L2Reject::Empty,
            BlockReject::Foreign => L2Reject::Foreign,
            BlockReject::Corrupt(why) => L2Reject::Corrupt(why),
        }
    }
}

/// Verified metadata (header and entry table) of one log block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct L2LogBlock(LogBlockMeta);

impl L2LogBlock {
    /// What rebuild does with a slot's first bytes: how much metadata to read.
    pub fn meta_len(header: &[u8], place: &L2Place) -> Result<usize, L2Reject> {
        meta_len_from_header(header, &place.0).map_err(L2Reject::from)
    }
    pub fn decode(meta: &[u8], place: &L2Place) -> Result<Self, L2Reject> {
        decode_meta(meta, &place.0).map(L2LogBlock).map_err(L2Reject::from)
    }
    pub fn encode(&self, place: &L2Place) -> Vec<u8> {
        encode_meta(&place.0, self.0.sequence, &self.0.entries)
    }
    /// Every entry's data range in the block, as (offset_bytes, len_bytes): reads trust them
    /// after decode.
    pub fn data_ranges(&self, place: &L2Place) -> Vec<(u32, u32)> {
        let g = place.0.geometry();
        self.0.entries.iter().map(|e| (g.unit_offset(e.unit), e.len_bytes)).collect()
    }
    /// Bytes of the block's metadata area (data starts after it).
    pub fn meta_area_bytes(place: &L2Place) -> u32 {
        place.0.geometry().meta_bytes()
    }
    pub fn sequence(&self) -> u64 {
        self.0.sequence
    }
    /// Every entry as (segment_id, offset_bytes, len_bytes, data checksum, data offset in the
    /// block at `place`).
    pub fn entries(&self, place: &L2Place) -> Vec<(u64, u32, u32, u64, u32)> {
        let g = place.0.geometry();
        let e = self.0.entries.iter();
        e.map(|e| {
            let at = g.unit_offset(e.unit);
            (e.key.segment_id, e.key.offset_bytes, e.len_bytes, e.checksum, at)
        })
        .collect()
    }
}

/// A whole valid log block of `place.block_bytes()` holding `blocks` (key, data) as the writer
/// lays it out; entries that do not fit are left out. Seeds for the fuzz corpus.
pub fn sample_log_block(place: &L2Place, sequence: u64, blocks: &[(u64, u32, &[u8])]) -> Vec<u8> {
    let geometry = place.0.geometry();
    let mut b = LogBlockBuilder::new(geometry, place.0.slot_index);
    for (segment_id, offset_bytes, data) in blocks {
        if data.len() <= geometry.largest_entry_bytes() as usize {
            b.try_append(
                BlockKey::new(*segment_id, *offset_bytes),
                data,
                xxhash_rust::xxh3::xxh3_64(data),
            );
        }
    }
    let meta = encode_meta(&place.0, sequence, b.entries());
    let mut block = vec![0u8; geometry.meta_bytes() as usize];
    block[..meta.len()].copy_from_slice(&meta);
    block.extend_from_slice(b.unit_bytes(0, geometry.data_units));
    debug_assert_eq!(block.len() % UNIT_BYTES as usize, 0);
    block
}

/// Recomputes the checksum of a label copy.
pub fn reseal_label(buf: &mut [u8]) {
    if buf.len() >= L2_LABEL_BYTES {
        let sum = checksum64_parts(&[&buf[..56]]);
        buf[56..64].copy_from_slice(&sum.to_le_bytes());
    }
}

/// Recomputes the header checksum of log-block metadata over the entry table its entry count
/// names (cut to what the buffer holds).
pub fn reseal_log_block(meta: &mut [u8]) {
    if meta.len() < LOG_HEADER_BYTES {
        return;
    }
    let count = u32::from_le_bytes(meta[48..52].try_into().expect("4 bytes")) as usize;
    let end =
        LOG_HEADER_BYTES.saturating_add(count.saturating_mul(LOG_ENTRY_BYTES)).min(meta.len());
    let sum = checksum64_parts(&[&meta[..56], &meta[LOG_HEADER_BYTES..end]]);
    meta[56..64].copy_from_slice(&sum.to_le_bytes());
}

/// Recomputes the checksum of a hot-set blob.
pub fn reseal_hot_set(blob: &mut [u8]) {
    if blob.len() >= 24 {
        let sum = checksum64_parts(&[&blob[..16], &blob[24..]]);
        blob[16..24].copy_from_slice(&sum.to_le_bytes());
    }
}
