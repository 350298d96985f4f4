//! Log blocks: one commit batch, written as one contiguous device write.
//!
//! A block is a 128-byte header followed by packed records and zero padding to the block's
//! write unit. The header's checksum is also the block's link in the vdev's chain: the next
//! block's `prev_chain` must equal it, so a stale block left in the ring from an earlier lap (or
//! an earlier life of the device) never continues the chain. The payload checksum covers every
//! record, so a torn block is rejected whole and a batch is replayed all or nothing.
//!
//! Version 1 padded every block to 4 KiB, so a 4 KiB sync write (128 + 64 + 4096 bytes) took
//! 8 KiB of the device. Version 2 pads to the vdev's write unit instead (byte 96: log2 of it,
//! 9..=12): the legs' atomic write unit (physical sector), so on a 512-byte-sector device the
//! same write takes 4.5 KiB, and a block never shares an atomic unit with an earlier block
//! (a torn write cannot reach data already acknowledged). Writers write version 2; readers
//! read both, so a log written by an older fardisk replays, and its chain continues in
//! version 2 blocks.
//!
//! ```text
//! off size field
//!   0   8  magic "FDSLBLK1"
//!   8   2  version (1 or 2)
//!  10   2  header length (128)
//!  12   4  block length in bytes (header, payload and padding to the write unit)
//!  16   8  vdev guid
//!  24   8  block sequence number (per vdev, +1 per block)
//!  32   8  prev_chain: header checksum of the previous block of this vdev (or the chain seed)
//!  40   8  global sequence number of the first record
//!  48   4  record count (0 for an epoch marker)
//!  52   4  payload length in bytes (records only)
//!  56   8  release_seq: every record with a lower sequence number was released when written
//!  64   8  highest txg of the records (0 when none)
//!  72   8  writer epoch (incremented at every open of the log)
//!  80   8  epoch_first_seq: first global sequence number the epoch's writer handed out
//!  88   8  xxh3-64 of the payload
//!  96   1  version 2: log2 of the write unit (9..=12); version 1: 0 (the unit is 4096)
//!  97  23  reserved (0)
//! 120   8  header checksum: xxh3-64 of bytes 0..120
//! ```

use bytes::Bytes;

use crate::aligned::AlignedBuf;
use crate::checksum::checksum64;
use crate::layout::{round_up_to, BLOCK_SIZE_BYTES, SECTOR_SIZE_BYTES};
use crate::le::{get_u16, get_u32, get_u64, get_u8, CodecError, Writer};
use crate::record::{decode_record, encode_record, DecodedRecord, LogRecord, RECORD_HEADER_BYTES};
use crate::ring::ChainPoint;

pub const BLOCK_MAGIC: u64 = u64::from_le_bytes(*b"FDSLBLK1");
/// The version writers write.
pub const BLOCK_VERSION: u16 = 2;
/// The previous version (4 KiB units), still read.
pub const BLOCK_VERSION_V1: u16 = 1;
pub const BLOCK_HEADER_BYTES: usize = 128;
const HEADER_CHECKSUM_OFFSET: usize = 120;

/// Everything a block header needs besides its records.
#[derive(Clone, Copy, Debug)]
pub struct BlockContext {
    pub vdev_guid: u64,
    pub point: ChainPoint,
    pub release_seq: u64,
    pub writer_epoch: u64,
    pub epoch_first_seq: u64,
    /// The vdev's write unit (a power of two, 512..=4096): the block is padded to it.
    pub unit_bytes: u64,
}

/// A verified block header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockHeader {
    pub version: u16,
    /// The unit the block is padded to (4096 for version 1).
    pub unit_bytes: u64,
    pub block_len_bytes: u32,
    pub vdev_guid: u64,
    pub block_seq: u64,
    pub prev_chain: u64,
    pub first_record_seq: u64,
    pub record_count: u32,
    pub payload_len_bytes: u32,
    pub release_seq: u64,
    pub txg_max: u64,
    pub writer_epoch: u64,
    pub epoch_first_seq: u64,
    pub payload_checksum: u64,
    pub header_checksum: u64,
}

/// Why bytes at a ring position are not the expected next block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlockError {
    /// Not a block of this vdev at all (zeroes, foreign data, damaged header).
    Garbage,
    /// A valid block, but not the next link of the chain (stale, from an earlier lap).
    Unexpected,
    /// The expected block, but its payload is torn or damaged.
    Corrupt(&'static str),
}

/// Size of the block holding `payload_bytes` of records, padded to `unit_bytes`.
pub(crate) fn block_len_for_payload(payload_bytes: u64, unit_bytes: u64) -> u64 {
    round_up_to(BLOCK_HEADER_BYTES as u64 + payload_bytes, unit_bytes)
}

/// Size of a version 2 block holding `payload_bytes` when written at `offset_bytes`: padded so
/// that it ends on a `unit_bytes` boundary. Blocks start on one already, except the first after
/// the vdev's unit grew (a leg replaced by one with larger sectors); that block realigns the
/// chain and pads by less than a unit.
pub(crate) fn block_len_at(offset_bytes: u64, payload_bytes: u64, unit_bytes: u64) -> u64 {
    round_up_to(offset_bytes + BLOCK_HEADER_BYTES as u64 + payload_bytes, unit_bytes) - offset_bytes
}

/// The most a block holding `payload_bytes` can take on any vdev (4 KiB units): for checks made
/// before the vdev is chosen.
pub(crate) fn block_len_upper_bound(payload_bytes: u64) -> u64 {
    block_len_for_payload(payload_bytes, BLOCK_SIZE_BYTES)
}

/// Encodes a block (version 2, padded to `ctx.unit_bytes`) holding `records`, numbered from
/// `first_seq`.
pub fn encode_block(
    ctx: &BlockContext,
    first_seq: u64,
    records: &[&LogRecord],
) -> (AlignedBuf, BlockHeader) {
    encode_block_version(ctx, first_seq, records, BLOCK_VERSION)
}

/// Encodes a version 1 block (4 KiB units), as fardisk before format version 2 wrote them:
/// for the golden fixtures and the upgrade tests only.
#[doc(hidden)]
pub fn encode_block_v1(
    ctx: &BlockContext,
    first_seq: u64,
    records: &[&LogRecord],
) -> (AlignedBuf, BlockHeader) {
    encode_block_version(ctx, first_seq, records, BLOCK_VERSION_V1)
}

fn encode_block_version(
    ctx: &BlockContext,
    first_seq: u64,
    records: &[&LogRecord],
    version: u16,
) -> (AlignedBuf, BlockHeader) {
    let unit_bytes = if version == BLOCK_VERSION_V1 { BLOCK_SIZE_BYTES } else { ctx.unit_bytes };
    assert!(
        unit_bytes.is_power_of_two()
            && (SECTOR_SIZE_BYTES..=BLOCK_SIZE_BYTES).contains(&unit_bytes),
        "log block unit {unit_bytes} is not a power of two in 512..=4096"
    );
    let payload_len: u64 = records.iter().map(|r| r.encoded_len_bytes()).sum();
    let block_len = if version == BLOCK_VERSION_V1 {
        block_len_for_payload(payload_len, unit_bytes)
    } else {
        block_len_at(ctx.point.offset_bytes, payload_len, unit_bytes)
    };
    let mut buf = AlignedBuf::zeroed_sectors(block_len as usize);
    let mut chain = ctx.point.prev_chain;
    let mut at = BLOCK_HEADER_BYTES;
    for (index, record) in records.iter().enumerate() {
        chain = encode_record(&mut buf, at, first_seq + index as u64, record, chain);
        at += record.encoded_len_bytes() as usize;
    }
    let mut header = BlockHeader {
        version,
        unit_bytes,
        block_len_bytes: block_len as u32,
        vdev_guid: ctx.vdev_guid,
        block_seq: ctx.point.block_seq,
        prev_chain: ctx.point.prev_chain,
        first_record_seq: first_seq,
        record_count: records.len() as u32,
        payload_len_bytes: payload_len as u32,
        release_seq: ctx.release_seq,
        txg_max: records.iter().map(|r| r.txg).max().unwrap_or(0),
        writer_epoch: ctx.writer_epoch,
        epoch_first_seq: ctx.epoch_first_seq,
        payload_checksum: checksum64(&buf[BLOCK_HEADER_BYTES..at]),
        header_checksum: 0,
    };
    header.header_checksum = write_header(&mut buf, &header);
    (buf, header)
}

fn write_header(buf: &mut [u8], h: &BlockHeader) -> u64 {
    let mut w = Writer::with_capacity(BLOCK_HEADER_BYTES);
    w.u64(BLOCK_MAGIC).u16(h.version).u16(BLOCK_HEADER_BYTES as u16).u32(h.block_len_bytes);
    w.u64(h.vdev_guid).u64(h.block_seq).u64(h.prev_chain).u64(h.first_record_seq);
    w.u32(h.record_count).u32(h.payload_len_bytes).u64(h.release_seq).u64(h.txg_max);
    w.u64(h.writer_epoch).u64(h.epoch_first_seq).u64(h.payload_checksum);
    let unit_shift = if h.version == BLOCK_VERSION_V1 { 0 } else { h.unit_bytes.trailing_zeros() };
    w.u8(unit_shift as u8).zeros(23);
    debug_assert_eq!(w.len(), HEADER_CHECKSUM_OFFSET);
    let checksum = checksum64(&w.buf);
    w.u64(checksum);
    buf[..BLOCK_HEADER_BYTES].copy_from_slice(&w.buf);
    checksum
}

/// Decodes and verifies a block header read from the ring.
pub fn decode_header(buf: &[u8], vdev_guid: u64) -> Result<BlockHeader, BlockError> {
    if buf.len() < BLOCK_HEADER_BYTES || get_u64(buf, 0)? != BLOCK_MAGIC {
        return Err(BlockError::Garbage);
    }
    let header_checksum = get_u64(buf, HEADER_CHECKSUM_OFFSET)?;
    if header_checksum != checksum64(&buf[..HEADER_CHECKSUM_OFFSET]) {
        return Err(BlockError::Garbage);
    }
    let version = get_u16(buf, 8)?;
    if usize::from(get_u16(buf, 10)?) != BLOCK_HEADER_BYTES {
        return Err(BlockError::Garbage);
    }
    let unit_shift = get_u8(buf, 96)?;
    let unit_bytes = match (version, unit_shift) {
        (BLOCK_VERSION_V1, 0) => BLOCK_SIZE_BYTES,
        (BLOCK_VERSION, 9..=12) => 1u64 << unit_shift,
        _ => return Err(BlockError::Garbage),
    };
    let header = BlockHeader {
        version,
        unit_bytes,
        block_len_bytes: get_u32(buf, 12)?,
        vdev_guid: get_u64(buf, 16)?,
        block_seq: get_u64(buf, 24)?,
        prev_chain: get_u64(buf, 32)?,
        first_record_seq: get_u64(buf, 40)?,
        record_count: get_u32(buf, 48)?,
        payload_len_bytes: get_u32(buf, 52)?,
        release_seq: get_u64(buf, 56)?,
        txg_max: get_u64(buf, 64)?,
        writer_epoch: get_u64(buf, 72)?,
        epoch_first_seq: get_u64(buf, 80)?,
        payload_checksum: get_u64(buf, 88)?,
        header_checksum,
    };
    let (len, used) = (
        u64::from(header.block_len_bytes),
        BLOCK_HEADER_BYTES as u64 + u64::from(header.payload_len_bytes),
    );
    let len_ok = if version == BLOCK_VERSION_V1 {
        len == block_len_for_payload(used - BLOCK_HEADER_BYTES as u64, unit_bytes)
    } else {
        len.is_multiple_of(SECTOR_SIZE_BYTES) && len >= used && len - used < unit_bytes
    };
    if header.vdev_guid != vdev_guid || !len_ok {
        return Err(BlockError::Garbage);
    }
    Ok(header)
}

impl From<CodecError> for BlockError {
    /// Fewer bytes than a header holds: not a block (unreachable after the length check).
    fn from(_: CodecError) -> Self {
        BlockError::Garbage
    }
}

/// Checks that a valid header is the next link of the chain.
pub(crate) fn check_link(header: &BlockHeader, expect: &ChainPoint) -> Result<(), BlockError> {
    if header.block_seq == expect.block_seq && header.prev_chain == expect.prev_chain {
        Ok(())
    } else {
        Err(BlockError::Unexpected)
    }
}

/// Verifies the payload of a whole block and decodes its records.
pub fn decode_payload(
    block: &Bytes,
    header: &BlockHeader,
) -> Result<Vec<DecodedRecord>, BlockError> {
    // Every record takes at least its header: a count the payload cannot hold is damage, and
    // must not size the allocation below (a 50 GB one aborted; found by fuzz/fuzz_targets/slog_block.rs).
    if u64::from(header.record_count) * RECORD_HEADER_BYTES as u64
        > u64::from(header.payload_len_bytes)
    {
        return Err(BlockError::Corrupt("more records than the payload can hold"));
    }
    let end = BLOCK_HEADER_BYTES + header.payload_len_bytes as usize;
    let payload =
        block.get(BLOCK_HEADER_BYTES..end).ok_or(BlockError::Corrupt("payload past the block"))?;
    if checksum64(payload) != header.payload_checksum {
        return Err(BlockError::Corrupt("payload checksum mismatch"));
    }
    let payload = block.slice(BLOCK_HEADER_BYTES..end);
    let mut records = Vec::with_capacity(header.record_count as usize);
    let mut chain = header.prev_chain;
    let mut at = 0usize;
    for index in 0..u64::from(header.record_count) {
        // Checked: a valid-looking header starting at u64::MAX overflowed here in overflow-checked
        // builds (a crafted input of fuzz/fuzz_targets/slog_block.rs).
        let seq = header
            .first_record_seq
            .checked_add(index)
            .ok_or(BlockError::Corrupt("record sequence number overflows"))?;
        let decoded = decode_record(&payload, at, seq, chain).map_err(BlockError::Corrupt)?;
        chain = decoded.chain;
        at += decoded.encoded_len;
        records.push(decoded);
    }
    let txg_max = records.iter().map(|r| r.record.txg).max().unwrap_or(0);
    if at != payload.len() || txg_max != header.txg_max {
        return Err(BlockError::Corrupt("payload does not match the header"));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RecordKind;

    fn ctx() -> BlockContext {
        BlockContext {
            vdev_guid: 5,
            point: ChainPoint { offset_bytes: 16384, block_seq: 3, prev_chain: 99 },
            release_seq: 10,
            writer_epoch: 2,
            epoch_first_seq: 8,
            unit_bytes: 4096,
        }
    }

    fn rec(txg: u64, len: usize) -> LogRecord {
        LogRecord {
            txg,
            volume_id: 1,
            kind: RecordKind::Write,
            offset_bytes: 0,
            length_bytes: len as u32,
            data: Bytes::from(vec![txg as u8; len]),
        }
    }

    #[test]
    fn block_round_trip() {
        let (a, b) = (rec(4, 5000), rec(6, 10));
        let (buf, header) = encode_block(&ctx(), 12, &[&a, &b]);
        assert_eq!(buf.len(), 8192);
        let decoded = decode_header(&buf, 5).expect("header");
        assert_eq!(decoded, header);
        assert_eq!(decoded.txg_max, 6);
        check_link(&decoded, &ctx().point).expect("link");
        let records = decode_payload(&Bytes::copy_from_slice(&buf), &decoded).expect("payload");
        assert_eq!(records.len(), 2);
        assert_eq!(records[1].seq, 13);
        assert_eq!(records[1].record, b);
    }

    #[test]
    fn stale_or_foreign_blocks_rejected() {
        let (buf, header) = encode_block(&ctx(), 12, &[&rec(1, 10)]);
        assert_eq!(decode_header(&buf, 6), Err(BlockError::Garbage), "another vdev");
        let later = ChainPoint { block_seq: 4, ..ctx().point };
        assert_eq!(check_link(&header, &later), Err(BlockError::Unexpected));
        let other_chain = ChainPoint { prev_chain: 1, ..ctx().point };
        assert_eq!(check_link(&header, &other_chain), Err(BlockError::Unexpected));
    }

    #[test]
    fn torn_payload_rejected_whole() {
        let (mut buf, _) = encode_block(&ctx(), 12, &[&rec(1, 3000), &rec(1, 3000)]);
        let header = decode_header(&buf, 5).expect("header survives");
        for byte in &mut buf[4096..4608] {
            *byte = 0;
        }
        let result = decode_payload(&Bytes::copy_from_slice(&buf), &header);
        assert!(matches!(result, Err(BlockError::Corrupt(_))));
    }

    #[test]
    fn version_2_pads_to_the_unit_and_version_1_still_decodes() {
        let a = rec(4, 4096);
        let small = BlockContext { unit_bytes: 512, ..ctx() };
        let (buf, header) = encode_block(&small, 12, &[&a]);
        assert_eq!(buf.len(), 4608, "128 + 64 + 4096 bytes in 512-byte units");
        assert_eq!((header.version, header.unit_bytes), (2, 512));
        let (big, _) = encode_block(&ctx(), 12, &[&a]);
        assert_eq!(big.len(), 8192);
        let (old, old_header) = encode_block_v1(&small, 12, &[&a]);
        assert_eq!(old.len(), 8192, "version 1 always pads to 4 KiB");
        for (bytes, want) in [(&buf, &header), (&old, &old_header)] {
            let decoded = decode_header(bytes, 5).expect("header");
            assert_eq!(&decoded, want);
            let records =
                decode_payload(&Bytes::copy_from_slice(bytes), &decoded).expect("payload");
            assert_eq!(records[0].record, a);
        }
    }

    #[test]
    fn block_after_a_unit_change_realigns_the_chain() {
        let misaligned = ChainPoint { offset_bytes: 16384 + 512, ..ctx().point };
        let ctx = BlockContext { point: misaligned, ..ctx() };
        let (buf, header) = encode_block(&ctx, 12, &[&rec(1, 100)]);
        assert_eq!(buf.len(), 4096 - 512, "ends on the next 4 KiB boundary");
        assert_eq!(decode_header(&buf, 5).expect("header"), header);
    }

    #[test]
    fn unit_outside_the_version_is_refused() {
        let small = BlockContext { unit_bytes: 512, ..ctx() };
        let (buf, _) = encode_block(&small, 12, &[&rec(1, 10)]);
        for (version, shift) in [(2u16, 0u8), (2, 8), (2, 13), (1, 9), (3, 9)] {
            let mut bytes = buf.to_vec();
            bytes[8..10].copy_from_slice(&version.to_le_bytes());
            bytes[96] = shift;
            let sum = checksum64(&bytes[..HEADER_CHECKSUM_OFFSET]);
            bytes[HEADER_CHECKSUM_OFFSET..BLOCK_HEADER_BYTES].copy_from_slice(&sum.to_le_bytes());
            assert_eq!(decode_header(&bytes, 5), Err(BlockError::Garbage), "{version} {shift}");
        }
    }

    #[test]
    fn empty_marker_block() {
        let (buf, header) = encode_block(&ctx(), 12, &[]);
        assert_eq!(buf.len(), 4096);
        assert_eq!(header.record_count, 0);
        let records = decode_payload(&Bytes::copy_from_slice(&buf), &header).expect("marker");
        assert!(records.is_empty());
    }
}
