//! A ranged GET's body cut into blocks as its chunks arrive.
//!
//! A reader that caches what it fetches copies every block out of the body into a buffer of its
//! own anyway (the ARC keeps exactly the block). Doing it while the body streams in, each chunk
//! dropped once its bytes are copied, means a GET holds the blocks it has so far and the one it
//! is filling, not a 16 MiB body beside its copies, and each block is hashed while its bytes are
//! still in the CPU's cache ([`CutBlock`]). The hope that the HTTP client would then read into
//! the memory of the chunks it had handed over did not show: page faults per GiB stayed as they
//! were (bench/notes/engine-store.md, "Blocks cut as the body arrives").

use super::{StoreError, StoreErrorKind};
use crate::block_buffers::BlockFill;
use crate::codec::checksum64;
use bytes::Bytes;

/// One block of a GET, with the xxh3-64 of its bytes taken as it was cut. Hashed there, the
/// block is still in the CPU's cache; hashed after its whole 16 MiB GET had arrived, it was read
/// back from memory: the checksum was a ninth of a cold reader's CPU, about 800 ns per 4 KiB
/// block, where the same hash of cached bytes takes 130 ns (bench/notes/engine-store.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutBlock {
    pub bytes: Bytes,
    pub checksum: u64,
}

impl CutBlock {
    pub fn new(bytes: Bytes) -> Self {
        let checksum = checksum64(&bytes);
        CutBlock { bytes, checksum }
    }
}

/// Cuts a body at `ends` (offsets in the body, strictly ascending from above 0: no block is
/// empty; the last is the body's length) into blocks in buffers of their own, from chunks pushed
/// in order.
pub struct BlockCutter<'a> {
    ends: &'a [u64],
    /// Bytes of the body pushed so far.
    received: u64,
    /// The block that the last chunk ended inside of.
    partial: Option<BlockFill>,
    blocks: Vec<CutBlock>,
}

/// A body longer than its blocks, or shorter when it ended: the bytes it had, and the bytes
/// its blocks needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrongLength {
    pub received: u64,
    pub expected: u64,
}

impl WrongLength {
    /// What the store's reader says: a GET that returned other than the bytes asked for (a
    /// short read: the connection ended early) is worth retrying.
    pub fn into_error(self, key: &str) -> StoreError {
        length_error(key, self.received, self.expected)
    }
}

/// Refuses blocks that do not end where `range` does (a caller's mistake, which a retry
/// would repeat), before anything is asked of the store.
pub fn check_cut(key: &str, range: &std::ops::Range<u64>, ends: &[u64]) -> Result<(), StoreError> {
    let len = range.end.saturating_sub(range.start);
    match ends.last() {
        Some(&end) if end == len => Ok(()),
        last => Err(StoreError::new(
            StoreErrorKind::Permanent,
            "GET",
            key,
            format!("blocks end at byte {} of a {len}-byte range", last.copied().unwrap_or(0)),
        )),
    }
}

pub(super) fn length_error(key: &str, got: u64, want: u64) -> StoreError {
    let what = if got < want { "short read" } else { "long read" };
    StoreError::new(StoreErrorKind::Transient, "GET", key, format!("{what}: {got} of {want} bytes"))
}

impl<'a> BlockCutter<'a> {
    /// Panics unless `ends` ascend strictly from above 0: a caller's bug, not the store's.
    pub fn new(ends: &'a [u64]) -> Self {
        let ascending = ends.first().is_none_or(|&e| e > 0) && ends.windows(2).all(|w| w[0] < w[1]);
        assert!(ascending, "block ends out of order");
        BlockCutter { ends, received: 0, partial: None, blocks: Vec::with_capacity(ends.len()) }
    }

    /// Bytes of the body pushed so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The body's length the blocks need.
    pub fn expected(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0)
    }

    /// Copies the next chunk of the body into its blocks; the chunk may be dropped after.
    pub fn push(&mut self, mut chunk: &[u8]) -> Result<(), WrongLength> {
        if self.received + chunk.len() as u64 > self.expected() {
            let received = self.received + chunk.len() as u64;
            return Err(WrongLength { received, expected: self.expected() });
        }
        while !chunk.is_empty() {
            let i = self.blocks.len();
            let start = if i == 0 { 0 } else { self.ends[i - 1] };
            let end = self.ends[i];
            let missing = (end - self.received) as usize;
            let take = missing.min(chunk.len());
            let fill = self.partial.get_or_insert_with(|| BlockFill::new((end - start) as usize));
            fill.extend(&chunk[..take]);
            if take == missing {
                let done = self.partial.take().expect("filled above");
                self.blocks.push(CutBlock::new(done.freeze()));
            }
            self.received += take as u64;
            chunk = &chunk[take..];
        }
        Ok(())
    }

    /// The blocks, once the body had exactly their bytes.
    pub fn finish(self) -> Result<Vec<CutBlock>, WrongLength> {
        if self.received != self.expected() || self.blocks.len() != self.ends.len() {
            return Err(WrongLength { received: self.received, expected: self.expected() });
        }
        Ok(self.blocks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_buffers::BLOCK_BUFFER_BYTES;
    use proptest::prelude::*;

    fn cut(data: &[u8], ends: &[u64], chunk_cuts: &[usize]) -> Result<Vec<CutBlock>, WrongLength> {
        let mut cuts: Vec<usize> = chunk_cuts.iter().map(|c| c % (data.len() + 1)).collect();
        cuts.sort_unstable();
        let mut cutter = BlockCutter::new(ends);
        let mut at = 0;
        for c in cuts.into_iter().chain([data.len()]) {
            cutter.push(&data[at..c])?;
            at = c;
        }
        cutter.finish()
    }

    proptest! {
        #[test]
        fn blocks_hold_their_bytes_whatever_the_chunks(
            sizes in proptest::collection::vec(prop_oneof![Just(BLOCK_BUFFER_BYTES), 1usize..5000], 1..8),
            chunk_cuts in proptest::collection::vec(any::<usize>(), 0..10),
            seed in any::<u8>(),
        ) {
            let total: usize = sizes.iter().sum();
            let data: Vec<u8> = (0..total).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
            let ends: Vec<u64> =
                sizes.iter().scan(0u64, |at, s| { *at += *s as u64; Some(*at) }).collect();
            let blocks = cut(&data, &ends, &chunk_cuts).expect("exact length");
            let mut at = 0;
            for (b, s) in blocks.iter().zip(&sizes) {
                prop_assert_eq!(&b.bytes[..], &data[at..at + s]);
                prop_assert_eq!(b.checksum, checksum64(&data[at..at + s]));
                at += s;
            }
            prop_assert_eq!(blocks.len(), sizes.len());
        }
    }

    #[test]
    fn a_body_of_the_wrong_length_is_refused() {
        let data = [5u8; 100];
        assert_eq!(cut(&data, &[40, 100], &[30]).map(|b| b.len()), Ok(2));
        let wrong = |received, expected| Err(WrongLength { received, expected });
        assert_eq!(cut(&data, &[40, 90], &[30]), wrong(100, 90), "long");
        assert_eq!(cut(&data[..70], &[40, 100], &[30]), wrong(70, 100), "short");
    }
}
