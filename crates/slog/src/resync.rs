//! Making one leg identical to another (open-time resync and `replace_leg` resilvering).
//!
//! Only what a replay can reach is copied: both head slots and the ring region from the
//! durable head to the tail. The copy is bounded by the ring size and done in 1 MiB pieces.

use std::io;

use crate::aligned::AlignedBuf;
use crate::device::LogDevice;
use crate::layout::{HEAD_SLOT_OFFSETS_BYTES, RING_START_BYTES};
use crate::ring::Ring;

const COPY_CHUNK_BYTES: u64 = 1024 * 1024;

/// Byte ranges (offset, length) a replay of `ring` may read.
pub(crate) fn reachable_ranges(ring: &Ring) -> Vec<(u64, u64)> {
    let mut ranges =
        vec![(HEAD_SLOT_OFFSETS_BYTES[0], RING_START_BYTES - HEAD_SLOT_OFFSETS_BYTES[0])];
    let (head, tail) = (ring.durable_head, ring.tail);
    if head.block_seq == tail.block_seq {
        return ranges;
    }
    if tail.offset_bytes > head.offset_bytes {
        ranges.push((head.offset_bytes, tail.offset_bytes - head.offset_bytes));
    } else {
        ranges.push((head.offset_bytes, ring.end_bytes - head.offset_bytes));
        ranges.push((ring.start_bytes, tail.offset_bytes - ring.start_bytes));
    }
    ranges.retain(|&(_, len)| len > 0);
    ranges
}

/// Copies everything a replay of `ring` may read from `source` to `target`, then flushes.
pub(crate) fn copy_reachable(
    source: &dyn LogDevice,
    target: &dyn LogDevice,
    ring: &Ring,
) -> io::Result<u64> {
    let mut copied = 0;
    let mut buf = AlignedBuf::zeroed(COPY_CHUNK_BYTES as usize);
    for (offset, len) in reachable_ranges(ring) {
        let mut done = 0;
        while done < len {
            let piece = (len - done).min(COPY_CHUNK_BYTES) as usize;
            source.read_at(offset + done, &mut buf[..piece])?;
            target.write_at(offset + done, &buf[..piece])?;
            done += piece as u64;
        }
        copied += len;
    }
    target.flush()?;
    Ok(copied)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::ChainPoint;
    use std::collections::VecDeque;

    #[test]
    fn wrapped_region_is_two_ranges() {
        let start = RING_START_BYTES;
        let end = start + 40960;
        let head = ChainPoint { offset_bytes: start + 32768, block_seq: 5, prev_chain: 0 };
        let tail = ChainPoint { offset_bytes: start + 8192, block_seq: 9, prev_chain: 0 };
        let ring = Ring::new(start, end, head, tail, VecDeque::new());
        let ranges = reachable_ranges(&ring);
        assert_eq!(ranges, vec![(8192, 8192), (start + 32768, 8192), (start, 8192)]);
        let empty = Ring::new(start, end, tail, tail, VecDeque::new());
        assert_eq!(reachable_ranges(&empty).len(), 1, "only the head slots");
    }
}
