//! Space management of one vdev's ring of log blocks.
//!
//! Blocks are appended at the tail. A block that does not fit before the end of the ring goes
//! to the ring start (replay looks for the next block right after the previous one, then at
//! the ring start). Space is reused only behind the *durable* head: the region from the
//! durable head to the tail may still be walked by a replay after a crash, so it is never
//! overwritten, even after the engine released it in memory.

use std::collections::VecDeque;

/// A position in a vdev's chain: the block expected at `offset_bytes` has `block_seq` and
/// `prev_chain`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainPoint {
    pub offset_bytes: u64,
    pub block_seq: u64,
    pub prev_chain: u64,
}

/// One written block (a commit batch or an epoch marker).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Extent {
    pub offset_bytes: u64,
    pub len_bytes: u64,
    pub block_seq: u64,
    pub prev_chain: u64,
    pub header_checksum: u64,
    pub first_seq: u64,
    pub record_count: u64,
    pub txg_max: u64,
}

impl Extent {
    pub fn end_bytes(&self) -> u64 {
        self.offset_bytes + self.len_bytes
    }

    pub fn point(&self) -> ChainPoint {
        ChainPoint {
            offset_bytes: self.offset_bytes,
            block_seq: self.block_seq,
            prev_chain: self.prev_chain,
        }
    }

    /// The chain point right after this block.
    pub fn next_point(&self) -> ChainPoint {
        ChainPoint {
            offset_bytes: self.end_bytes(),
            block_seq: self.block_seq + 1,
            prev_chain: self.header_checksum,
        }
    }
}

/// In-memory state of one vdev's ring.
#[derive(Clone, Debug)]
pub(crate) struct Ring {
    pub start_bytes: u64,
    pub end_bytes: u64,
    /// Where and how the next block will be linked.
    pub tail: ChainPoint,
    /// Blocks not yet released, oldest first.
    pub live: VecDeque<Extent>,
    /// The last head written to every healthy leg and flushed.
    pub durable_head: ChainPoint,
}

impl Ring {
    pub fn new(
        start_bytes: u64,
        end_bytes: u64,
        durable_head: ChainPoint,
        tail: ChainPoint,
        live: VecDeque<Extent>,
    ) -> Self {
        Self { start_bytes, end_bytes, tail, live, durable_head }
    }

    pub fn len_bytes(&self) -> u64 {
        self.end_bytes - self.start_bytes
    }

    /// The head as it stands in memory: the oldest live block, or the tail when none is live.
    pub fn mem_head(&self) -> ChainPoint {
        self.live.front().map_or(self.tail, Extent::point)
    }

    /// True when the durable head lags behind the in-memory one.
    pub fn head_dirty(&self) -> bool {
        self.mem_head().block_seq != self.durable_head.block_seq
    }

    /// Where a block of `len_bytes` can go without overwriting anything from `boundary` to the
    /// tail, or `None`.
    pub fn place(&self, len_bytes: u64, boundary: ChainPoint) -> Option<u64> {
        if len_bytes > self.len_bytes() || len_bytes == 0 {
            return None;
        }
        let tail = self.tail.offset_bytes;
        let fits_at_tail = tail + len_bytes <= self.end_bytes;
        if boundary.block_seq == self.tail.block_seq {
            // Nothing protected: the whole ring is free.
            return Some(if fits_at_tail { tail } else { self.start_bytes });
        }
        let head = boundary.offset_bytes;
        if tail > head {
            if fits_at_tail {
                Some(tail)
            } else if self.start_bytes + len_bytes <= head {
                Some(self.start_bytes)
            } else {
                None
            }
        } else if tail < head && tail + len_bytes <= head {
            Some(tail)
        } else {
            None
        }
    }

    /// The largest block that could be placed once the in-memory head is durable.
    pub fn max_block_bytes(&self) -> u64 {
        let boundary = self.mem_head();
        if boundary.block_seq == self.tail.block_seq {
            return self.len_bytes();
        }
        let (tail, head) = (self.tail.offset_bytes, boundary.offset_bytes);
        if tail > head {
            (self.end_bytes - tail).max(head - self.start_bytes)
        } else {
            // tail == head with live blocks: the ring is full.
            head.saturating_sub(tail)
        }
    }

    /// Bytes from the in-memory head to the tail (live data and wrap padding).
    pub fn used_bytes(&self) -> u64 {
        let head = self.mem_head();
        if head.block_seq == self.tail.block_seq {
            return 0;
        }
        let (tail, head) = (self.tail.offset_bytes, head.offset_bytes);
        if tail > head {
            tail - head
        } else {
            self.len_bytes() - (head - tail)
        }
    }

    pub fn append(&mut self, extent: Extent) {
        debug_assert_eq!(extent.block_seq, self.tail.block_seq);
        if extent.block_seq == self.durable_head.block_seq {
            // The head was written while the ring was empty, naming the tail offset; this
            // block may have gone to the ring start instead. Protect where it really is.
            // (Replay finds it the same way: the head offset, then the ring start.)
            self.durable_head.offset_bytes = extent.offset_bytes;
        }
        self.tail = extent.next_point();
        self.live.push_back(extent);
    }

    /// Lowest sequence number of a live record whose txg is above `txg`.
    pub fn first_seq_above_txg(&self, txg: u64) -> Option<u64> {
        self.live
            .iter()
            .filter(|e| e.record_count > 0 && e.txg_max > txg)
            .map(|e| e.first_seq)
            .min()
    }

    /// Releases blocks, oldest first, while every record in them is below `seq`. Releasing
    /// by sequence number (not by txg) keeps the released records a prefix of the commit
    /// order across all vdevs, which replay relies on. Returns true when the head moved.
    pub fn release_before_seq(&mut self, seq: u64) -> bool {
        let mut moved = false;
        while self.live.front().is_some_and(|e| e.first_seq.saturating_add(e.record_count) <= seq) {
            self.live.pop_front();
            moved = true;
        }
        moved
    }

    /// Sequence number of the oldest live record, if any.
    pub fn first_live_seq(&self) -> Option<u64> {
        self.live.iter().find(|e| e.record_count > 0).map(|e| e.first_seq)
    }

    /// Highest txg among live blocks whose records precede `seq`; `None` when there is none.
    pub fn txg_max_before(&self, seq: u64) -> Option<u64> {
        self.live
            .iter()
            .filter(|e| e.record_count > 0 && e.first_seq < seq)
            .map(|e| e.txg_max)
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: u64 = 16384;
    const END: u64 = START + 10 * 4096;

    fn point(offset: u64, seq: u64) -> ChainPoint {
        ChainPoint { offset_bytes: offset, block_seq: seq, prev_chain: seq * 100 }
    }

    fn extent(offset: u64, len: u64, seq: u64, txg: u64) -> Extent {
        Extent {
            offset_bytes: offset,
            len_bytes: len,
            block_seq: seq,
            prev_chain: seq * 100,
            header_checksum: (seq + 1) * 100,
            first_seq: seq,
            record_count: 1,
            txg_max: txg,
        }
    }

    fn empty_ring() -> Ring {
        Ring::new(START, END, point(START, 1), point(START, 1), VecDeque::new())
    }

    #[test]
    fn fills_then_refuses_then_wraps_after_release() {
        let mut ring = empty_ring();
        for seq in 1..=5 {
            let at = ring.place(8192, ring.durable_head).expect("space");
            assert_eq!(at, START + (seq - 1) * 8192);
            ring.append(extent(at, 8192, seq, seq));
        }
        assert_eq!(ring.used_bytes(), ring.len_bytes());
        assert_eq!(ring.place(4096, ring.durable_head), None, "full");
        assert!(ring.release_before_seq(3));
        assert_eq!(ring.used_bytes(), 3 * 8192);
        assert_eq!(
            ring.place(4096, ring.durable_head),
            None,
            "released space is not reusable before the head is durable"
        );
        assert_eq!(ring.place(16384, ring.mem_head()), Some(START));
        ring.durable_head = ring.mem_head();
        let at = ring.place(16384, ring.durable_head).expect("wrapped");
        assert_eq!(at, START);
        ring.append(extent(at, 16384, 6, 6));
        assert_eq!(ring.place(4096, ring.durable_head), None, "tail caught up with the head");
        assert_eq!(ring.used_bytes(), ring.len_bytes());
    }

    #[test]
    fn block_that_does_not_fit_at_the_end_goes_to_the_start() {
        let mut ring = empty_ring();
        ring.append(extent(START, 7 * 4096, 1, 1));
        ring.release_before_seq(2);
        ring.durable_head = ring.mem_head();
        assert_eq!(ring.used_bytes(), 0);
        assert_eq!(ring.place(4 * 4096, ring.durable_head), Some(START));
        assert_eq!(ring.max_block_bytes(), ring.len_bytes());
    }

    #[test]
    fn block_wrapped_after_an_empty_head_stays_protected() {
        let mut ring = empty_ring();
        ring.append(extent(START, 7 * 4096, 1, 1));
        ring.release_before_seq(u64::MAX);
        // The head is persisted while empty: it names the tail, 7 units into the ring.
        ring.durable_head = ring.mem_head();
        assert_eq!(ring.durable_head.offset_bytes, START + 7 * 4096);
        // The next block does not fit before the end and goes to the start.
        let at = ring.place(4 * 4096, ring.durable_head).expect("empty ring");
        assert_eq!(at, START);
        ring.append(extent(at, 4 * 4096, 2, 2));
        // Until released, nothing may overwrite [START, START + 4 units).
        let at = ring.place(4096, ring.durable_head).expect("room after the block");
        assert_eq!(at, START + 4 * 4096);
        ring.append(extent(at, 4096, 3, 2));
        let mut tail_blocks = 0;
        while let Some(at) = ring.place(4096, ring.durable_head) {
            assert!(at >= START + 4 * 4096, "block 2 at the ring start was overwritten");
            ring.append(extent(at, 4096, 4 + tail_blocks, 2));
            tail_blocks += 1;
            assert!(tail_blocks < 10);
        }
        assert_eq!(ring.used_bytes(), ring.len_bytes());
    }

    #[test]
    fn release_is_a_prefix_of_sequence_numbers() {
        let mut ring = empty_ring();
        ring.append(extent(START, 4096, 1, 5));
        ring.append(extent(START + 4096, 4096, 2, 3));
        // txg 3 is published but seq 2 sits behind seq 1 (txg 5): nothing may go yet.
        let first_unpublished = ring.first_seq_above_txg(4).expect("seq 1 is in txg 5");
        assert_eq!(first_unpublished, 1);
        assert!(!ring.release_before_seq(first_unpublished));
        assert_eq!(ring.first_live_seq(), Some(1));
        assert_eq!(ring.txg_max_before(2), Some(5));
        assert_eq!(ring.txg_max_before(1), None);
        assert_eq!(ring.first_seq_above_txg(5), None);
        assert!(ring.release_before_seq(u64::MAX));
        assert!(ring.live.is_empty());
        assert_eq!(ring.mem_head(), ring.tail);
    }
}
