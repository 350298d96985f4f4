//! Buffers for cached 4 KiB blocks, handed back for the next block when the last reference to
//! one is dropped, instead of to the C allocator.
//!
//! Why: the ARC keeps each block a cold reader fetches in a 4 KiB buffer of its own and frees
//! the oldest as it evicts. glibc serves those from its arenas, where the blocks of one GET sit
//! together and leave together: whole arena heaps came free, were unmapped, and the next blocks
//! (and the HTTP client's receive buffers beside them) were faulted in afresh. Late in a cold
//! 4 GiB read, with the ARC full and evicting, 30 % of the reader's samples were the kernel
//! zeroing fresh pages, about half of them for these blocks (bench/notes/engine-store.md,
//! "Recycled block buffers"). A block buffer used again skips the fault, the zeroing and the
//! arena's lock.
//!
//! Bounded: at most [`IDLE_BUFFERS_MAX`] buffers wait here (32 MiB); past that a buffer goes
//! back to the allocator as before. Held buffers are whatever holds the blocks (the ARC, a
//! read's output), bounded by them.

use bytes::Bytes;
use parking_lot::Mutex;

/// The size of the buffers kept: one block.
pub const BLOCK_BUFFER_BYTES: usize = 4096;

/// The most buffers waiting for reuse (32 MiB): two coalesced GETs' worth, since a GET's blocks
/// are all copied out before the ARC evicts as many to make room for them.
pub const IDLE_BUFFERS_MAX: usize = 8192;

type Buffer = Box<[u8; BLOCK_BUFFER_BYTES]>;

/// One list under one lock: a GET's blocks are taken, and evicted ones given back, by the
/// thousand from whichever thread runs it, and taking and giving back are a push and a pop.
struct Idle {
    buffers: Mutex<Vec<Buffer>>,
}

static IDLE: Idle = Idle::new();

impl Idle {
    const fn new() -> Self {
        Idle { buffers: Mutex::new(Vec::new()) }
    }

    /// A buffer waiting for reuse, or a new one.
    fn take(&self) -> Buffer {
        if let Some(b) = self.buffers.lock().pop() {
            return b;
        }
        // Not zeroed by hand: the copy that follows writes every byte.
        Box::new([0u8; BLOCK_BUFFER_BYTES])
    }

    fn give_back(&self, b: Buffer) {
        let mut buffers = self.buffers.lock();
        if buffers.len() < IDLE_BUFFERS_MAX {
            buffers.push(b);
        }
    }

    #[cfg(test)]
    fn idle(&self) -> usize {
        self.buffers.lock().len()
    }
}

/// One kept buffer inside a `Bytes`; given back to `idle` when the last clone is dropped.
struct Recycled {
    buffer: Option<Buffer>,
    idle: &'static Idle,
}

impl AsRef<[u8]> for Recycled {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_deref().map_or(&[], |b| &b[..])
    }
}

impl Drop for Recycled {
    fn drop(&mut self) {
        if let Some(b) = self.buffer.take() {
            self.idle.give_back(b);
        }
    }
}

/// `src` in a buffer of its own: a recycled block buffer when it is one block long, a fresh
/// allocation of its size otherwise.
pub fn copy_block(src: &[u8]) -> Bytes {
    copy_block_with(&IDLE, src)
}

fn copy_block_with(idle: &'static Idle, src: &[u8]) -> Bytes {
    let mut fill = BlockFill::with_idle(idle, src.len());
    fill.extend(src);
    fill.freeze()
}

/// One block's buffer, filled from pieces that arrive apart (a GET's chunks, which the reader
/// drops as it goes so that the HTTP client can use their memory again): a recycled buffer when
/// the block is one block buffer long, one of its own size otherwise. Dropped unfilled, a
/// recycled buffer goes back for reuse.
pub struct BlockFill {
    buffer: Fill,
    filled: usize,
}

enum Fill {
    Recycled(Option<Buffer>, &'static Idle),
    Own(Vec<u8>),
}

impl BlockFill {
    pub fn new(len: usize) -> Self {
        Self::with_idle(&IDLE, len)
    }

    fn with_idle(idle: &'static Idle, len: usize) -> Self {
        let buffer = if len == BLOCK_BUFFER_BYTES {
            Fill::Recycled(Some(idle.take()), idle)
        } else {
            Fill::Own(Vec::with_capacity(len))
        };
        BlockFill { buffer, filled: 0 }
    }

    fn len(&self) -> usize {
        match &self.buffer {
            Fill::Recycled(..) => BLOCK_BUFFER_BYTES,
            Fill::Own(v) => v.capacity(),
        }
    }

    /// Bytes still to come.
    pub fn missing(&self) -> usize {
        self.len() - self.filled
    }

    /// Appends `piece`. Panics past the block's end.
    pub fn extend(&mut self, piece: &[u8]) {
        assert!(piece.len() <= self.missing(), "piece past the block's end");
        let at = self.filled;
        match &mut self.buffer {
            Fill::Recycled(b, _) => {
                b.as_mut().expect("held until frozen")[at..at + piece.len()].copy_from_slice(piece)
            }
            Fill::Own(v) => v.extend_from_slice(piece),
        }
        self.filled += piece.len();
    }

    /// The block's bytes. Panics unless every byte was written (a recycled buffer holds an
    /// earlier block's bytes past what was written).
    pub fn freeze(mut self) -> Bytes {
        assert_eq!(self.missing(), 0, "block frozen unfilled");
        match &mut self.buffer {
            Fill::Recycled(b, idle) => {
                let idle: &'static Idle = idle;
                Bytes::from_owner(Recycled { buffer: b.take(), idle })
            }
            Fill::Own(v) => Bytes::from(std::mem::take(v)),
        }
    }
}

impl Drop for BlockFill {
    fn drop(&mut self) {
        if let Fill::Recycled(b, idle) = &mut self.buffer {
            if let Some(b) = b.take() {
                idle.give_back(b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Idle buffers of a test's own, so tests running beside it take none of them.
    fn own_idle() -> &'static Idle {
        Box::leak(Box::new(Idle::new()))
    }

    #[test]
    fn a_block_buffer_is_used_again_once_its_last_reference_is_dropped() {
        let idle = own_idle();
        let copy_block = |src: &[u8]| copy_block_with(idle, src);
        let data = [7u8; BLOCK_BUFFER_BYTES];
        let a = copy_block(&data);
        assert_eq!(&a[..], &data[..]);
        let ptr = a.as_ptr();
        let a2 = a.clone();
        drop(a);
        // Still held by a clone: the next block gets another buffer.
        let other = copy_block(&[1u8; BLOCK_BUFFER_BYTES]);
        assert_ne!(other.as_ptr(), ptr);
        assert_eq!(&a2[..], &data[..], "a clone keeps its bytes");
        drop(a2);
        assert_eq!(idle.idle(), 1);
        let next = copy_block(&[9u8; BLOCK_BUFFER_BYTES]);
        assert_eq!(next.as_ptr(), ptr, "the buffer came back for reuse");
        assert!(next.iter().all(|&x| x == 9), "every byte written over");
        assert_eq!(idle.idle(), 0);
    }

    #[test]
    fn other_sizes_get_buffers_of_their_own_and_a_fill_takes_its_pieces_in_order() {
        assert_eq!(&copy_block(b"abc")[..], b"abc");
        let idle = own_idle();
        let mut fill = BlockFill::with_idle(idle, BLOCK_BUFFER_BYTES);
        fill.extend(&[3u8; 1000]);
        fill.extend(&[4u8; BLOCK_BUFFER_BYTES - 1000]);
        assert_eq!(fill.missing(), 0);
        let whole = fill.freeze();
        assert!(whole[..1000].iter().all(|&x| x == 3) && whole[1000..].iter().all(|&x| x == 4));
        drop(whole);
        assert_eq!(idle.idle(), 1, "the filled block's buffer came back");
        let mut unfinished = BlockFill::with_idle(idle, BLOCK_BUFFER_BYTES);
        assert_eq!(idle.idle(), 0);
        unfinished.extend(&[1u8; 10]);
        drop(unfinished);
        assert_eq!(idle.idle(), 1, "a fill dropped unfinished gives its buffer back");
    }

    #[test]
    #[should_panic(expected = "block frozen unfilled")]
    fn a_fill_is_not_frozen_short() {
        let mut fill = BlockFill::new(100);
        fill.extend(&[0u8; 99]);
        fill.freeze();
    }

    #[test]
    #[should_panic(expected = "piece past the block's end")]
    fn a_fill_takes_no_more_than_its_block() {
        BlockFill::new(100).extend(&[0u8; 101]);
    }

    #[test]
    fn no_more_than_the_cap_waits_for_reuse() {
        let idle = own_idle();
        let held: Vec<Bytes> = (0..IDLE_BUFFERS_MAX + 100)
            .map(|_| copy_block_with(idle, &[0u8; BLOCK_BUFFER_BYTES]))
            .collect();
        drop(held);
        assert_eq!(idle.idle(), IDLE_BUFFERS_MAX);
    }
}
