//! The cache key: an immutable block location in the object store.

/// Where a block lives in the store. A segment object is immutable and its id is never reused,
/// so the bytes behind a key never change: a cached copy can only be right or corrupt, never
/// stale, and corruption is caught by the caller's checksum.
#[derive(Clone, Copy, Hash, Eq, PartialEq, Ord, PartialOrd, Debug)]
pub struct BlockKey {
    pub segment_id: u64,
    pub offset_bytes: u32,
}

impl BlockKey {
    pub fn new(segment_id: u64, offset_bytes: u32) -> Self {
        Self { segment_id, offset_bytes }
    }
}
