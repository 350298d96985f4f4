//! A checksummed list of hot ARC block keys. It was written to warm the ARC after a restart; the
//! engine chose logical regions instead (its `hotset` object, design note 0003), so nothing
//! stores this blob today. The format stays pinned (tests/fixtures/hot-set.bin).
//!
//! Layout (all little-endian), see docs/format/l2arc.md:
//! ```text
//! 0   u64  magic "FDHOTSET"
//! 8   u32  version (1)
//! 12  u32  entry_count
//! 16  u64  checksum: xxh3_64(bytes 0..16 ++ entries)
//! 24  entry_count x { u64 segment_id, u32 offset_bytes }   (12 bytes each)
//! ```

use crate::codec::{checksum64_parts, CodecError, Reader, Writer};
use crate::key::BlockKey;

const HOT_SET_MAGIC: u64 = u64::from_le_bytes(*b"FDHOTSET");
const HOT_SET_VERSION: u32 = 1;
const HOT_SET_HEADER_BYTES: usize = 24;
const HOT_SET_ENTRY_BYTES: usize = 12;

/// Upper bound on the entries one blob may carry (12 MiB of keys), so a damaged count can never
/// make the decoder allocate without limit.
pub const HOT_SET_ENTRIES_MAX: usize = 1 << 20;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HotSetError {
    #[error("hot-set blob too short: {len_bytes} bytes")]
    TooShort { len_bytes: usize },
    #[error("hot-set blob has bad magic {found:#x}")]
    BadMagic { found: u64 },
    #[error("hot-set blob has unsupported version {found}")]
    BadVersion { found: u32 },
    #[error("hot-set blob claims {entry_count} entries but is {len_bytes} bytes long")]
    BadLength { entry_count: u32, len_bytes: usize },
    #[error("hot-set blob checksum mismatch (stored {stored:#x}, computed {computed:#x})")]
    BadChecksum { stored: u64, computed: u64 },
    #[error("hot-set list of {entry_count} entries exceeds the limit")]
    TooManyEntries { entry_count: usize },
}

/// Serializes `keys` (at most [`HOT_SET_ENTRIES_MAX`]) into a checksummed blob.
pub fn encode_hot_set(keys: &[BlockKey]) -> Result<Vec<u8>, HotSetError> {
    if keys.len() > HOT_SET_ENTRIES_MAX {
        return Err(HotSetError::TooManyEntries { entry_count: keys.len() });
    }
    let entry_count = u32::try_from(keys.len()).expect("bounded by HOT_SET_ENTRIES_MAX");
    let mut entries = Writer::with_capacity(keys.len() * HOT_SET_ENTRY_BYTES);
    for key in keys {
        entries.u64(key.segment_id).u32(key.offset_bytes);
    }
    let mut blob = Writer::with_capacity(HOT_SET_HEADER_BYTES + entries.len());
    blob.u64(HOT_SET_MAGIC).u32(HOT_SET_VERSION).u32(entry_count);
    let checksum = checksum64_parts(&[&blob.buf, &entries.buf]);
    blob.u64(checksum).bytes(&entries.buf);
    let blob = blob.into_inner();
    // Pair assertion: what we hand out must decode to what we were given.
    debug_assert_eq!(decode_hot_set(&blob).as_deref(), Ok(keys));
    Ok(blob)
}

/// Verifies and parses a blob made by [`encode_hot_set`].
pub fn decode_hot_set(blob: &[u8]) -> Result<Vec<BlockKey>, HotSetError> {
    let too_short = |_: CodecError| HotSetError::TooShort { len_bytes: blob.len() };
    if blob.len() < HOT_SET_HEADER_BYTES {
        return Err(HotSetError::TooShort { len_bytes: blob.len() });
    }
    let mut r = Reader::new(blob, "hot-set blob");
    let magic = r.u64().map_err(too_short)?;
    if magic != HOT_SET_MAGIC {
        return Err(HotSetError::BadMagic { found: magic });
    }
    let version = r.u32().map_err(too_short)?;
    if version != HOT_SET_VERSION {
        return Err(HotSetError::BadVersion { found: version });
    }
    let entry_count = r.u32().map_err(too_short)?;
    let stored = r.u64().map_err(too_short)?;
    let expected_len = usize::try_from(entry_count)
        .ok()
        .filter(|n| *n <= HOT_SET_ENTRIES_MAX)
        .map(|n| HOT_SET_HEADER_BYTES + n * HOT_SET_ENTRY_BYTES);
    if expected_len != Some(blob.len()) {
        return Err(HotSetError::BadLength { entry_count, len_bytes: blob.len() });
    }
    let computed = checksum64_parts(&[&blob[..16], &blob[HOT_SET_HEADER_BYTES..]]);
    if computed != stored {
        return Err(HotSetError::BadChecksum { stored, computed });
    }
    (0..entry_count)
        .map(|_| {
            let segment_id = r.u64().map_err(too_short)?;
            Ok(BlockKey::new(segment_id, r.u32().map_err(too_short)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_keys() -> Vec<BlockKey> {
        (0..100u64).map(|i| BlockKey::new(i * 7, (i * 4096) as u32)).collect()
    }

    #[test]
    fn round_trip_preserves_order_and_values() {
        let keys = sample_keys();
        let blob = encode_hot_set(&keys).expect("encode");
        assert_eq!(blob.len(), 24 + 12 * keys.len());
        assert_eq!(decode_hot_set(&blob), Ok(keys));
        assert_eq!(decode_hot_set(&encode_hot_set(&[]).expect("encode")), Ok(vec![]));
    }

    #[test]
    fn every_single_byte_flip_is_rejected() {
        let blob = encode_hot_set(&sample_keys()[..5]).expect("encode");
        for i in 0..blob.len() {
            let mut bad = blob.clone();
            bad[i] ^= 0x20;
            assert!(decode_hot_set(&bad).is_err(), "flip at byte {i} accepted");
        }
    }

    #[test]
    fn truncated_and_extended_blobs_are_rejected() {
        let blob = encode_hot_set(&sample_keys()).expect("encode");
        assert!(matches!(
            decode_hot_set(&blob[..blob.len() - 1]),
            Err(HotSetError::BadLength { .. })
        ));
        let mut longer = blob.clone();
        longer.push(0);
        assert!(matches!(decode_hot_set(&longer), Err(HotSetError::BadLength { .. })));
        assert!(matches!(decode_hot_set(&blob[..10]), Err(HotSetError::TooShort { .. })));
    }
}
