//! Segment objects: the immutable unit of upload. One txg writes one or more segments, each a single
//! create-only PUT holding compressed blocks (volume data and block-map pages) followed by a footer
//! that names the owner of every block, so compaction and scrub can work from the segment alone.
//! Layout in docs/format.md ("Segment").

use crate::blkptr::BlockPtr;
use crate::codec::{checksum64, Reader, Writer};
use crate::compress::{compress, Compression};
use crate::error::{Error, Result};

pub const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"FDSEGMT1");
pub const SEGMENT_TRAILER_MAGIC: u64 = u64::from_le_bytes(*b"FDSEGEND");
pub const SEGMENT_VERSION: u32 = 1;
pub const SEGMENT_HEADER_BYTES: usize = 64;
pub const SEGMENT_TRAILER_BYTES: usize = 32;
pub const FOOTER_ENTRY_BYTES: usize = 40;

/// Segment ids carry the writer's import epoch in the top 24 bits, so two writers (one of them
/// about to be fenced) can never upload different objects under the same key.
pub fn segment_id(epoch: u64, counter: u64) -> u64 {
    ((epoch & 0xff_ffff) << 40) | (counter & ((1 << 40) - 1))
}

pub fn segment_key(segment_id: u64) -> String {
    format!("segments/{segment_id:016x}")
}

/// Who a block in a segment belongs to: what compaction and scrub check liveness against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BlockOwner {
    /// Logical block `block` of volume (tree) `tree_id`.
    Data { tree_id: u32, block: u64 },
    /// Page `index` at `level` of tree `tree_id` (a volume's map or the space table).
    Page { tree_id: u32, level: u8, index: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FooterEntry {
    pub owner: BlockOwner,
    pub ptr: BlockPtr,
}

#[derive(Debug)]
pub struct SegmentBuilder {
    pool_guid: u128,
    segment_id: u64,
    txg: u64,
    buf: Vec<u8>,
    entries: Vec<FooterEntry>,
}

impl SegmentBuilder {
    pub fn new(pool_guid: u128, segment_id: u64, txg: u64) -> SegmentBuilder {
        let mut w = Writer::with_capacity(SEGMENT_HEADER_BYTES);
        w.u64(SEGMENT_MAGIC)
            .u32(SEGMENT_VERSION)
            .u32(0)
            .u128(pool_guid)
            .u64(segment_id)
            .u64(txg)
            .u64(0);
        w.seal();
        debug_assert_eq!(w.len(), SEGMENT_HEADER_BYTES);
        SegmentBuilder { pool_guid, segment_id, txg, buf: w.buf, entries: Vec::new() }
    }

    pub fn segment_id(&self) -> u64 {
        self.segment_id
    }

    pub fn len_bytes(&self) -> usize {
        self.buf.len()
    }

    pub fn block_count(&self) -> usize {
        self.entries.len()
    }

    /// Compresses and appends a logical block; returns the pointer that will find it.
    pub fn add(&mut self, owner: BlockOwner, logical: &[u8], algo: Compression) -> BlockPtr {
        let (used, physical) = compress(algo, logical);
        self.add_physical(owner, &physical, used, logical.len() as u32)
    }

    /// Appends bytes already in their stored form (compaction moves blocks without recompressing).
    pub fn add_physical(
        &mut self,
        owner: BlockOwner,
        physical: &[u8],
        algo: Compression,
        logical_bytes: u32,
    ) -> BlockPtr {
        let ptr = BlockPtr {
            segment_id: self.segment_id,
            offset_bytes: self.buf.len() as u32,
            physical_bytes: physical.len() as u32,
            checksum: checksum64(physical),
            birth_txg: self.txg,
            compression: algo as u8,
            logical_bytes,
        };
        self.buf.extend_from_slice(physical);
        self.entries.push(FooterEntry { owner, ptr });
        ptr
    }

    /// Appends the footer and trailer and returns the object's bytes plus the footer entries.
    pub fn finish(mut self) -> (Vec<u8>, Vec<FooterEntry>) {
        let footer_offset = self.buf.len() as u64;
        let mut w =
            Writer::with_capacity(self.entries.len() * FOOTER_ENTRY_BYTES + SEGMENT_TRAILER_BYTES);
        for e in &self.entries {
            encode_entry(&mut w, e);
        }
        w.u64(footer_offset).u32(self.entries.len() as u32).u32(0);
        let sum = checksum64(&w.buf);
        w.u64(sum).u64(SEGMENT_TRAILER_MAGIC);
        self.buf.extend_from_slice(&w.buf);
        let _ = self.pool_guid;
        (self.buf, self.entries)
    }
}

fn encode_entry(w: &mut Writer, e: &FooterEntry) {
    let (kind, level, tree_id, key) = match e.owner {
        BlockOwner::Data { tree_id, block } => (0u8, 0u8, tree_id, block),
        BlockOwner::Page { tree_id, level, index } => (1u8, level, tree_id, index),
    };
    w.u8(kind).u8(level).u8(e.ptr.compression).u8(0).u32(tree_id).u64(key);
    w.u32(e.ptr.offset_bytes)
        .u32(e.ptr.physical_bytes)
        .u32(e.ptr.logical_bytes)
        .u32(0)
        .u64(e.ptr.checksum);
}

/// Parsed and verified header + footer of a whole segment object.
#[derive(Debug)]
pub struct SegmentIndex {
    pub segment_id: u64,
    pub txg: u64,
    pub entries: Vec<FooterEntry>,
}

/// Verifies header and footer checksums of a complete segment and returns its index.
pub fn parse_segment(
    bytes: &[u8],
    pool_guid: u128,
    expect_segment_id: u64,
) -> Result<SegmentIndex> {
    let what = format!("segment {expect_segment_id:016x}");
    if bytes.len() < SEGMENT_HEADER_BYTES + SEGMENT_TRAILER_BYTES {
        return Err(Error::corrupt(&what, "too short"));
    }
    let header = crate::codec::verify_sealed(&bytes[..SEGMENT_HEADER_BYTES], &what)?;
    let mut r = Reader::new(header, "segment header");
    let (magic, version, _flags) = (r.u64()?, r.u32()?, r.u32()?);
    let (guid, id, txg) = (r.u128()?, r.u64()?, r.u64()?);
    if magic != SEGMENT_MAGIC
        || version != SEGMENT_VERSION
        || guid != pool_guid
        || id != expect_segment_id
    {
        return Err(Error::corrupt(&what, "header names another pool, segment or version"));
    }
    let trailer = &bytes[bytes.len() - SEGMENT_TRAILER_BYTES..];
    let mut t = Reader::new(trailer, "segment trailer");
    let (footer_offset, count, _pad, sum, tmagic) =
        (t.u64()?, t.u32()?, t.u32()?, t.u64()?, t.u64()?);
    let footer_end = bytes.len() - SEGMENT_TRAILER_BYTES;
    let footer_len = count as usize * FOOTER_ENTRY_BYTES;
    // Checked: an offset near u64::MAX wrapped the sum back onto footer_end and the slice below
    // then panicked (found by fuzz/fuzz_targets/engine_segment.rs).
    if tmagic != SEGMENT_TRAILER_MAGIC
        || footer_offset.checked_add(footer_len as u64) != Some(footer_end as u64)
    {
        return Err(Error::corrupt(&what, "bad trailer"));
    }
    let covered = &bytes[footer_offset as usize..footer_end + 16];
    let found = checksum64(covered);
    if found != sum {
        return Err(Error::Checksum { what: format!("{what} footer"), expected: sum, found });
    }
    let mut r = Reader::new(&bytes[footer_offset as usize..footer_end], "segment footer");
    let mut entries = Vec::with_capacity(count as usize);
    for _ in 0..count {
        entries.push(decode_entry(&mut r, id, txg)?);
    }
    Ok(SegmentIndex { segment_id: id, txg, entries })
}

fn decode_entry(r: &mut Reader, segment_id: u64, txg: u64) -> Result<FooterEntry> {
    let (kind, level, compression, _pad) = (r.u8()?, r.u8()?, r.u8()?, r.u8()?);
    let (tree_id, key) = (r.u32()?, r.u64()?);
    let (offset_bytes, physical_bytes, logical_bytes, _pad2, checksum) =
        (r.u32()?, r.u32()?, r.u32()?, r.u32()?, r.u64()?);
    let owner = match kind {
        0 => BlockOwner::Data { tree_id, block: key },
        1 => BlockOwner::Page { tree_id, level, index: key },
        _ => return Err(Error::corrupt("segment footer", format!("unknown entry kind {kind}"))),
    };
    let ptr = BlockPtr {
        segment_id,
        offset_bytes,
        physical_bytes,
        checksum,
        birth_txg: txg,
        compression,
        logical_bytes,
    };
    Ok(FooterEntry { owner, ptr })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruption_detected() {
        let mut b = SegmentBuilder::new(7, segment_id(1, 3), 9);
        let p1 = b.add(BlockOwner::Data { tree_id: 1, block: 5 }, &[1u8; 4096], Compression::Lz4);
        let p2 = b.add(
            BlockOwner::Page { tree_id: 1, level: 0, index: 0 },
            &[9u8; 100],
            Compression::Off,
        );
        let (bytes, entries) = b.finish();
        let idx = parse_segment(&bytes, 7, segment_id(1, 3)).expect("valid segment");
        assert_eq!(idx.entries, entries);
        assert_eq!(idx.entries[0].ptr, p1);
        assert_eq!(idx.entries[1].ptr, p2);
        assert!(p1.physical_bytes < 4096, "lz4 must shrink a constant block");
        assert!(parse_segment(&bytes, 8, segment_id(1, 3)).is_err(), "foreign pool refused");
        for pos in [3usize, bytes.len() - 40, bytes.len() - 2] {
            let mut bad = bytes.clone();
            bad[pos] ^= 0x40;
            assert!(parse_segment(&bad, 7, segment_id(1, 3)).is_err(), "flip at {pos} detected");
        }
    }
}
