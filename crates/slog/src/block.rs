//! Log blocks: one commit batch, written as one contiguous, 4 KiB aligned device write.
//!
//! A block is a 128-byte header followed by packed records and zero padding to a 4 KiB unit.
//! The header's checksum is also the block's link in the vdev's chain: the next block's
//! `prev_chain` must equal it, so a stale block left in the ring from an earlier lap (or an
//! earlier life of the device) never continues the chain. The payload checksum covers every
//! record, so a torn block is rejected whole and a batch is replayed all or nothing.
//!
//! ```text
//! off size field
//!   0   8  magic "FDSLBLK1"
//!   8   2  version (1)
//!  10   2  header length (128)
//!  12   4  block length in bytes (multiple of 4096, header and padding included)
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
//!  96  24  reserved (0)
//! 120   8  header checksum: xxh3-64 of bytes 0..120
//! ```

use bytes::Bytes;

use crate::aligned::AlignedBuf;
use crate::checksum::checksum64;
use crate::layout::round_up_block;
use crate::le::{get_u16, get_u32, get_u64, CodecError, Writer};
use crate::record::{decode_record, encode_record, DecodedRecord, LogRecord, RECORD_HEADER_BYTES};
use crate::ring::ChainPoint;

pub const BLOCK_MAGIC: u64 = u64::from_le_bytes(*b"FDSLBLK1");
pub const BLOCK_VERSION: u16 = 1;
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
}

/// A verified block header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockHeader {
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

/// Size of the block holding `payload_bytes` of records.
pub(crate) fn block_len_for_payload(payload_bytes: u64) -> u64 {
    round_up_block(BLOCK_HEADER_BYTES as u64 + payload_bytes)
}

/// Encodes a block holding `records`, numbered from `first_seq`.
pub fn encode_block(
    ctx: &BlockContext,
    first_seq: u64,
    records: &[&LogRecord],
) -> (AlignedBuf, BlockHeader) {
    let payload_len: u64 = records.iter().map(|r| r.encoded_len_bytes()).sum();
    let block_len = block_len_for_payload(payload_len);
    let mut buf = AlignedBuf::zeroed(block_len as usize);
    let mut chain = ctx.point.prev_chain;
    let mut at = BLOCK_HEADER_BYTES;
    for (index, record) in records.iter().enumerate() {
        chain = encode_record(&mut buf, at, first_seq + index as u64, record, chain);
        at += record.encoded_len_bytes() as usize;
    }
    let mut header = BlockHeader {
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
    w.u64(BLOCK_MAGIC).u16(BLOCK_VERSION).u16(BLOCK_HEADER_BYTES as u16).u32(h.block_len_bytes);
    w.u64(h.vdev_guid).u64(h.block_seq).u64(h.prev_chain).u64(h.first_record_seq);
    w.u32(h.record_count).u32(h.payload_len_bytes).u64(h.release_seq).u64(h.txg_max);
    w.u64(h.writer_epoch).u64(h.epoch_first_seq).u64(h.payload_checksum).zeros(24);
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
    if get_u16(buf, 8)? != BLOCK_VERSION || usize::from(get_u16(buf, 10)?) != BLOCK_HEADER_BYTES {
        return Err(BlockError::Garbage);
    }
    let header = BlockHeader {
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
    let len_ok = u64::from(header.block_len_bytes)
        == block_len_for_payload(u64::from(header.payload_len_bytes));
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
    fn empty_marker_block() {
        let (buf, header) = encode_block(&ctx(), 12, &[]);
        assert_eq!(buf.len(), 4096);
        assert_eq!(header.record_count, 0);
        let records = decode_payload(&Bytes::copy_from_slice(&buf), &header).expect("marker");
        assert!(records.is_empty());
    }
}
