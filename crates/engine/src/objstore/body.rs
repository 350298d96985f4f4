//! A ranged GET's body as the store delivered it: the network client's chunks, in order.
//!
//! Gathering a body into one buffer costs a copy of every byte into memory freshly faulted in
//! (a 16 MiB buffer per coalesced GET): the largest share of a cold reader's CPU in the profile
//! of bench/notes/engine-store.md. A reader without a cache takes each block from the chunks
//! instead: as a slice where it lies inside one chunk, copied where it spans two. A reader that
//! caches its blocks has them cut as the body arrives (objstore/blocks.rs).

use bytes::{Bytes, BytesMut};
use std::ops::Range;

/// The chunks of one body and where each starts in it.
#[derive(Debug, Clone, Default)]
pub struct Body {
    chunks: Vec<Bytes>,
    /// `starts[i]` is the offset of `chunks[i]` in the body; empty chunks are left out.
    starts: Vec<u64>,
    len_bytes: u64,
}

impl Body {
    pub fn from_chunks(chunks: impl IntoIterator<Item = Bytes>) -> Self {
        let mut body = Body::default();
        for c in chunks {
            body.push(c);
        }
        body
    }

    /// Appends the next chunk of the body.
    pub fn push(&mut self, chunk: Bytes) {
        if chunk.is_empty() {
            return;
        }
        self.starts.push(self.len_bytes);
        self.len_bytes += chunk.len() as u64;
        self.chunks.push(chunk);
    }

    pub fn len(&self) -> u64 {
        self.len_bytes
    }

    pub fn is_empty(&self) -> bool {
        self.len_bytes == 0
    }

    /// The chunks, in order.
    pub fn chunks(&self) -> impl Iterator<Item = &Bytes> {
        self.chunks.iter()
    }

    /// Bytes `range` of the body: shared with the chunk that holds all of it, or a copy when it
    /// spans chunks. Panics when `range` reaches past the body, as slicing does.
    pub fn slice(&self, range: Range<u64>) -> Bytes {
        match self.locate(&range) {
            Ok((chunk, at)) => self.chunks[chunk].slice(at..at + range_len(&range)),
            Err(first) => self.gather(first, range),
        }
    }

    /// `Ok((chunk, offset in it))` when one chunk holds all of `range` (or it is empty), else
    /// `Err(the chunk it starts in)`.
    fn locate(&self, range: &Range<u64>) -> Result<(usize, usize), usize> {
        assert!(range.start <= range.end && range.end <= self.len_bytes, "range past the body");
        if range.is_empty() {
            return Err(self.chunks.len()); // Gathers nothing.
        }
        // The last chunk starting at or before range.start.
        let first = self.starts.partition_point(|&s| s <= range.start) - 1;
        let at = (range.start - self.starts[first]) as usize;
        if at + range_len(range) <= self.chunks[first].len() {
            Ok((first, at))
        } else {
            Err(first)
        }
    }

    /// A copy of `range`, which starts in chunk `first`.
    fn gather(&self, first: usize, range: Range<u64>) -> Bytes {
        let mut out = BytesMut::with_capacity(range_len(&range));
        for part in self.parts(first, &range) {
            out.extend_from_slice(part);
        }
        out.freeze()
    }

    /// The pieces of the chunks from `first` on that hold `range`, in order.
    fn parts<'a>(&'a self, first: usize, range: &Range<u64>) -> impl Iterator<Item = &'a [u8]> {
        let mut at = self.starts.get(first).map_or(0, |&s| (range.start - s) as usize);
        let mut left = range_len(range);
        self.chunks.iter().skip(first).map_while(move |c| {
            if left == 0 {
                return None;
            }
            let n = (c.len() - at).min(left);
            let part = &c[at..at + n];
            (at, left) = (0, left - n);
            Some(part)
        })
    }

    /// The whole body in one buffer: the chunk itself when there is one, else a copy.
    pub fn into_contiguous(self) -> Bytes {
        self.slice(0..self.len_bytes)
    }
}

fn range_len(r: &Range<u64>) -> usize {
    (r.end - r.start) as usize
}

impl From<Bytes> for Body {
    fn from(b: Bytes) -> Self {
        Body::from_chunks([b])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn body_of(data: &[u8], cuts: &[usize]) -> Body {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
        cuts.sort_unstable();
        let mut body = Body::default();
        let mut at = 0;
        for c in cuts.into_iter().chain([data.len()]) {
            body.push(Bytes::copy_from_slice(&data[at..c]));
            at = c;
        }
        body
    }

    proptest! {
        #[test]
        fn any_slice_reads_the_bytes_of_the_whole(
            data in proptest::collection::vec(any::<u8>(), 1..600),
            cuts in proptest::collection::vec(any::<usize>(), 0..8),
            a in any::<usize>(),
            b in any::<usize>(),
        ) {
            let body = body_of(&data, &cuts);
            prop_assert_eq!(body.len(), data.len() as u64);
            let (x, y) = (a % (data.len() + 1), b % (data.len() + 1));
            let (lo, hi) = (x.min(y), x.max(y));
            prop_assert_eq!(&body.slice(lo as u64..hi as u64)[..], &data[lo..hi]);
            prop_assert_eq!(&body.clone().into_contiguous()[..], &data[..]);
        }
    }

    #[test]
    fn a_slice_inside_one_chunk_shares_it() {
        let chunk = Bytes::from(vec![7u8; 100]);
        let body = Body::from_chunks([Bytes::from_static(b"abc"), chunk.clone()]);
        let s = body.slice(10..50);
        assert_eq!(s.as_ptr(), chunk[7..].as_ptr());
        assert_eq!(body.slice(1..5)[..], [b'b', b'c', 7, 7]);
    }

    #[test]
    #[should_panic(expected = "range past the body")]
    fn a_slice_past_the_end_is_refused() {
        Body::from(Bytes::from_static(b"abc")).slice(1..4);
    }
}
