//! The log head: where the oldest live block of a vdev's ring is, so replay starts there
//! without scanning history that was already released.
//!
//! Two 4 KiB slots are written alternately (double buffering); the valid slot with the higher
//! generation wins, so a torn head write leaves the previous head in force. The writer only
//! reuses ring space once a head pointing past it is durable.
//!
//! ```text
//! off size field
//!   0   8  magic "FDSLHEAD"
//!   8   2  version (1)
//!  10   6  reserved (0)
//!  16   8  vdev guid
//!  24   8  generation (+1 per head write)
//!  32   8  head offset: device offset of the oldest live block (or of the next block)
//!  40   8  block sequence number expected at that offset
//!  48   8  prev_chain expected of that block
//!  56   8  release_seq: every record with a lower sequence number is released
//!  64   8  writer epoch
//!  72   8  epoch_first_seq
//!  80  40  reserved (0)
//! 120   8  xxh3-64 of bytes 0..120
//! 128 3968 zero
//! ```

use crate::aligned::AlignedBuf;
use crate::checksum::checksum64;
use crate::device::LogDevice;
use crate::layout::{BLOCK_SIZE_BYTES, HEAD_SLOT_OFFSETS_BYTES};
use crate::le::{get_u16, get_u64, Writer};
use crate::ring::ChainPoint;

pub const HEAD_MAGIC: u64 = u64::from_le_bytes(*b"FDSLHEAD");
pub const HEAD_VERSION: u16 = 1;
const CHECKSUM_OFFSET: usize = 120;
/// Bytes of a slot that carry the head (the rest of the 4 KiB slot is zero).
const HEAD_BYTES: usize = 128;

/// A verified log head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogHead {
    pub generation: u64,
    pub vdev_guid: u64,
    pub point: ChainPoint,
    pub release_seq: u64,
    pub writer_epoch: u64,
    pub epoch_first_seq: u64,
}

/// The newest valid head of a leg and the slot it came from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeadRead {
    pub head: Option<LogHead>,
    pub slot: usize,
}

impl LogHead {
    pub fn encode(&self) -> AlignedBuf {
        let mut w = Writer::with_capacity(HEAD_BYTES);
        w.u64(HEAD_MAGIC).u16(HEAD_VERSION).zeros(6).u64(self.vdev_guid).u64(self.generation);
        w.u64(self.point.offset_bytes).u64(self.point.block_seq).u64(self.point.prev_chain);
        w.u64(self.release_seq).u64(self.writer_epoch).u64(self.epoch_first_seq).zeros(40);
        debug_assert_eq!(w.len(), CHECKSUM_OFFSET);
        w.seal();
        let mut buf = AlignedBuf::zeroed(BLOCK_SIZE_BYTES as usize);
        buf[..HEAD_BYTES].copy_from_slice(&w.buf);
        debug_assert_eq!(Self::decode(&buf, self.vdev_guid), Some(*self));
        buf
    }

    /// Decodes and verifies one slot; `None` for an empty, damaged, short or foreign slot.
    pub fn decode(buf: &[u8], vdev_guid: u64) -> Option<LogHead> {
        let get = |at: usize| get_u64(buf, at).ok();
        if buf.len() < HEAD_BYTES || get(0)? != HEAD_MAGIC || get_u16(buf, 8).ok()? != HEAD_VERSION
        {
            return None;
        }
        if get(CHECKSUM_OFFSET)? != checksum64(&buf[..CHECKSUM_OFFSET]) || get(16)? != vdev_guid {
            return None;
        }
        Some(LogHead {
            vdev_guid,
            generation: get(24)?,
            point: ChainPoint { offset_bytes: get(32)?, block_seq: get(40)?, prev_chain: get(48)? },
            release_seq: get(56)?,
            writer_epoch: get(64)?,
            epoch_first_seq: get(72)?,
        })
    }
}

/// Reads both slots and returns the newest valid head.
pub(crate) fn read_heads(device: &dyn LogDevice, vdev_guid: u64) -> std::io::Result<HeadRead> {
    let mut best: Option<(LogHead, usize)> = None;
    let mut buf = AlignedBuf::zeroed(BLOCK_SIZE_BYTES as usize);
    for (slot, offset) in HEAD_SLOT_OFFSETS_BYTES.iter().enumerate() {
        device.read_at(*offset, &mut buf)?;
        match LogHead::decode(&buf, vdev_guid) {
            Some(head) if best.is_none_or(|(b, _)| head.generation > b.generation) => {
                best = Some((head, slot))
            }
            // An older or torn slot is normal after a crash mid head write.
            Some(_) | None => {}
        }
    }
    Ok(HeadRead { head: best.map(|(h, _)| h), slot: best.map_or(0, |(_, s)| s) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::crash::CrashDevice;

    fn head(generation: u64) -> LogHead {
        LogHead {
            generation,
            vdev_guid: 3,
            point: ChainPoint { offset_bytes: 16384, block_seq: 7, prev_chain: 11 },
            release_seq: 40,
            writer_epoch: 2,
            epoch_first_seq: 30,
        }
    }

    #[test]
    fn newest_valid_slot_wins() {
        let device = CrashDevice::new("/h", 1 << 20);
        device.write_at(HEAD_SLOT_OFFSETS_BYTES[0], &head(4).encode()).expect("w");
        device.write_at(HEAD_SLOT_OFFSETS_BYTES[1], &head(5).encode()).expect("w");
        let read = read_heads(&device, 3).expect("read");
        assert_eq!(read.head, Some(head(5)));
        assert_eq!(read.slot, 1);
        device.corrupt(HEAD_SLOT_OFFSETS_BYTES[1] + 30, 2);
        let read = read_heads(&device, 3).expect("read");
        assert_eq!(read.head, Some(head(4)), "torn newer slot falls back to the older one");
        assert_eq!(read_heads(&device, 4).expect("read").head, None, "foreign vdev");
    }
}
