//! Walking one leg's chain of blocks from its head.
//!
//! The walk starts at the head, reads the block expected there (or, if the block did not fit
//! before the end of the ring, at the ring start), verifies header, link and payload, and
//! stops at the first break. Its cost is bounded by the ring size: a valid chain can never be
//! longer than the ring.

use bytes::Bytes;

use crate::aligned::AlignedBuf;
use crate::block::{check_link, decode_header, decode_payload, BlockError, BlockHeader};
use crate::device::LogDevice;
use crate::head::LogHead;
use crate::layout::{BLOCK_SIZE_BYTES, SECTOR_SIZE_BYTES};
use crate::record::DecodedRecord;
use crate::ring::{ChainPoint, Extent};
use crate::window::ReadWindow;

/// Why a chain walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScanEnd {
    /// No further block links on: the normal end of a log.
    Clean,
    /// The expected block is there but torn or damaged.
    Corrupt,
    /// The device failed to read.
    ReadError,
}

/// One block found by a scan.
#[derive(Clone, Debug)]
pub(crate) struct ScannedBlock {
    pub extent: Extent,
    pub release_seq: u64,
    pub writer_epoch: u64,
    pub epoch_first_seq: u64,
}

impl ScannedBlock {
    pub fn last_seq(&self) -> Option<u64> {
        (self.extent.record_count > 0).then(|| self.extent.first_seq + self.extent.record_count - 1)
    }
}

/// The chain of one leg.
#[derive(Clone, Debug)]
pub(crate) struct LegScan {
    pub head: LogHead,
    pub head_slot: usize,
    pub blocks: Vec<ScannedBlock>,
    pub end: ScanEnd,
}

impl LegScan {
    /// Orders legs of a vdev: newer epoch first, then the longer chain.
    pub fn rank(&self) -> (u64, u64, u64) {
        match self.blocks.last() {
            Some(block) => (block.writer_epoch, block.extent.block_seq, self.head.generation),
            None => (
                self.head.writer_epoch,
                self.head.point.block_seq.saturating_sub(1),
                self.head.generation,
            ),
        }
    }
}

/// Where the ring lies on a device.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RingBounds {
    pub start_bytes: u64,
    pub end_bytes: u64,
    pub vdev_guid: u64,
}

/// A whole block read and verified at a chain point.
pub(crate) struct ReadBlock {
    pub header: BlockHeader,
    pub offset_bytes: u64,
    pub records: Vec<DecodedRecord>,
}

/// Error of reading one block: a block-level verdict or an I/O error.
pub(crate) enum ReadBlockError {
    Block(BlockError),
    Io(std::io::Error),
}

/// Reads the block expected at `at` (exactly at that offset) and verifies it. `window` holds
/// what the walk read ahead: use one per device, for one walk at a time.
pub(crate) fn read_block_at(
    device: &dyn LogDevice,
    window: &mut ReadWindow,
    ring: RingBounds,
    at: ChainPoint,
) -> Result<ReadBlock, ReadBlockError> {
    let in_ring = at.offset_bytes >= ring.start_bytes
        && at.offset_bytes.is_multiple_of(SECTOR_SIZE_BYTES)
        && at.offset_bytes + SECTOR_SIZE_BYTES <= ring.end_bytes;
    if !in_ring {
        return Err(ReadBlockError::Block(BlockError::Garbage));
    }
    // One 4 KiB read holds the header and usually the whole block; near the ring end, what is
    // left of the ring (version 2 blocks end on any sector).
    let first_len = BLOCK_SIZE_BYTES.min(ring.end_bytes - at.offset_bytes);
    let mut first = AlignedBuf::zeroed_sectors(first_len as usize);
    window.read_at(device, at.offset_bytes, &mut first).map_err(ReadBlockError::Io)?;
    let header = decode_header(&first, ring.vdev_guid).map_err(ReadBlockError::Block)?;
    check_link(&header, &at).map_err(ReadBlockError::Block)?;
    let len = u64::from(header.block_len_bytes);
    if at.offset_bytes + len > ring.end_bytes {
        return Err(ReadBlockError::Block(BlockError::Garbage));
    }
    let bytes = if len > first_len {
        let mut whole = AlignedBuf::zeroed_sectors(len as usize);
        whole[..first_len as usize].copy_from_slice(&first);
        let rest = &mut whole[first_len as usize..];
        window.read_at(device, at.offset_bytes + first_len, rest).map_err(ReadBlockError::Io)?;
        Bytes::copy_from_slice(&whole)
    } else {
        Bytes::copy_from_slice(&first)
    };
    let records = decode_payload(&bytes, &header).map_err(ReadBlockError::Block)?;
    Ok(ReadBlock { header, offset_bytes: at.offset_bytes, records })
}

/// Reads the next block of a chain: at the expected offset, else at the ring start.
pub(crate) fn read_next_block(
    device: &dyn LogDevice,
    window: &mut ReadWindow,
    ring: RingBounds,
    expect: ChainPoint,
) -> Result<ReadBlock, ReadBlockError> {
    match read_block_at(device, window, ring, expect) {
        Err(ReadBlockError::Block(BlockError::Garbage | BlockError::Unexpected))
            if expect.offset_bytes != ring.start_bytes =>
        {
            let start = ChainPoint { offset_bytes: ring.start_bytes, ..expect };
            read_block_at(device, window, ring, start)
        }
        other => other,
    }
}

/// Walks a leg's chain from `head`.
pub(crate) fn scan_leg(
    device: &dyn LogDevice,
    ring: RingBounds,
    head: LogHead,
    head_slot: usize,
) -> LegScan {
    let mut blocks = Vec::new();
    let mut expect = head.point;
    let mut budget_bytes = ring.end_bytes - ring.start_bytes;
    let mut window = ReadWindow::new(ring.end_bytes);
    let end = loop {
        let block = match read_next_block(device, &mut window, ring, expect) {
            Ok(block) => block,
            Err(ReadBlockError::Block(BlockError::Corrupt(_))) => break ScanEnd::Corrupt,
            Err(ReadBlockError::Block(_)) => break ScanEnd::Clean,
            Err(ReadBlockError::Io(_)) => break ScanEnd::ReadError,
        };
        let scanned = scanned_block(&block);
        expect = scanned.extent.next_point();
        match budget_bytes.checked_sub(scanned.extent.len_bytes) {
            Some(left) => budget_bytes = left,
            // A chain longer than the ring cannot have been written: stop defensively.
            None => break ScanEnd::Corrupt,
        }
        blocks.push(scanned);
    };
    LegScan { head, head_slot, blocks, end }
}

fn scanned_block(block: &ReadBlock) -> ScannedBlock {
    let h = &block.header;
    ScannedBlock {
        extent: Extent {
            offset_bytes: block.offset_bytes,
            len_bytes: u64::from(h.block_len_bytes),
            block_seq: h.block_seq,
            prev_chain: h.prev_chain,
            header_checksum: h.header_checksum,
            first_seq: h.first_record_seq,
            record_count: u64::from(h.record_count),
            txg_max: h.txg_max,
        },
        release_seq: h.release_seq,
        writer_epoch: h.writer_epoch,
        epoch_first_seq: h.epoch_first_seq,
    }
}
