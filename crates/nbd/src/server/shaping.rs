//! Pure helpers that shape device results into protocol replies: splitting read data
//! into data and hole chunks, and turning device extents into block-status
//! descriptors that obey the spec's rules (non-zero lengths, clipped to the request,
//! one descriptor for REQ_ONE, bounded count).

use crate::device::Extent;
use crate::wire::consts::{NBD_STATE_HOLE, NBD_STATE_ZERO};
use crate::wire::BlockDescriptor;

/// More pieces than this and a read is sent as one data chunk: chunk headers would
/// cost more than the zeroes they save.
pub const READ_PIECES_MAX: usize = 64;

/// One content chunk of a structured read reply, as a range of the read buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadPiece {
    pub start: usize,
    pub length_bytes: usize,
    /// All zeroes: sent as NBD_REPLY_TYPE_OFFSET_HOLE, without data.
    pub hole: bool,
}

/// Eight bytes at a time: every read reply asks this of its data, once per granularity piece.
fn is_zero(bytes: &[u8]) -> bool {
    let words = bytes.chunks_exact(8);
    let tail = words.remainder();
    words.into_iter().all(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")) == 0)
        && tail.iter().all(|byte| *byte == 0)
}

/// Splits `data` (read at export `offset`) into data and hole pieces at
/// `granularity_bytes` boundaries of the export. With `dont_fragment` (NBD_CMD_FLAG_DF)
/// the reply must have a single content chunk.
pub fn read_pieces(
    offset: u64,
    data: &[u8],
    dont_fragment: bool,
    granularity_bytes: u32,
) -> Vec<ReadPiece> {
    // Scanned only when it is the answer (the pieces below scan the same bytes otherwise).
    let whole = || ReadPiece { start: 0, length_bytes: data.len(), hole: is_zero(data) };
    if dont_fragment || data.is_empty() {
        return vec![whole()];
    }
    let granularity = granularity_bytes.max(512) as u64;
    let mut pieces: Vec<ReadPiece> = Vec::new();
    let mut start = 0usize;
    while start < data.len() {
        let absolute = offset + start as u64;
        let to_boundary = (granularity - absolute % granularity) as usize;
        let length_bytes = to_boundary.min(data.len() - start);
        let hole = is_zero(&data[start..start + length_bytes]);
        match pieces.last_mut() {
            Some(last) if last.hole == hole => last.length_bytes += length_bytes,
            _ => pieces.push(ReadPiece { start, length_bytes, hole }),
        }
        if pieces.len() > READ_PIECES_MAX {
            return vec![whole()];
        }
        start += length_bytes;
    }
    pieces
}

fn status_flags(extent: &Extent) -> u32 {
    let mut flags = 0;
    if extent.hole {
        flags |= NBD_STATE_HOLE;
    }
    if extent.zero {
        flags |= NBD_STATE_ZERO;
    }
    flags
}

/// Converts device extents (starting at the request offset) into descriptors covering
/// at most `length_bytes`. Never returns an empty list: if the device reported nothing
/// usable, one descriptor with status 0 ("allocated, contents unknown", always safe)
/// covers the request.
pub fn block_descriptors(
    extents: &[Extent],
    length_bytes: u32,
    req_one: bool,
    descriptors_max: usize,
) -> Vec<BlockDescriptor> {
    let mut descriptors: Vec<BlockDescriptor> = Vec::new();
    let mut remaining_bytes = length_bytes as u64;
    for extent in extents {
        if remaining_bytes == 0 {
            break;
        }
        if extent.length_bytes == 0 {
            continue;
        }
        // Fits in u32: never more than the u32 request length.
        let length = extent.length_bytes.min(remaining_bytes) as u32;
        let flags = status_flags(extent);
        let full = req_one || descriptors.len() >= descriptors_max;
        match descriptors.last_mut() {
            Some(last) if last.status_flags == flags => last.length_bytes += length,
            Some(_) if full => break,
            _ => descriptors.push(BlockDescriptor { length_bytes: length, status_flags: flags }),
        }
        remaining_bytes -= length as u64;
    }
    if descriptors.is_empty() {
        descriptors.push(BlockDescriptor { length_bytes, status_flags: 0 });
    }
    descriptors
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One non-zero byte anywhere, in the words or in the tail, makes data (never a hole).
    #[test]
    fn a_single_nonzero_byte_anywhere_is_data() {
        for len in [1usize, 7, 8, 9, 4096, 4103] {
            let mut bytes = vec![0u8; len];
            assert!(is_zero(&bytes), "{len} zero bytes");
            for at in 0..len {
                bytes[at] = 1;
                assert!(!is_zero(&bytes), "byte {at} of {len} set");
                let pieces = read_pieces(0, &bytes, false, 4096);
                assert!(pieces
                    .iter()
                    .all(|p| !p.hole || !(p.start..p.start + p.length_bytes).contains(&at)));
                bytes[at] = 0;
            }
        }
        assert!(is_zero(&[]));
    }
}
