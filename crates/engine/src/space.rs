//! The space table: one 40-byte slot per segment, kept in its own copy-on-write tree (tree id
//! [`SPACE_TREE_ID`], slot index = segment id). It says how many of a segment's block bytes are
//! still referenced, so compaction can find sparse segments and dead ones can be deleted without
//! listing the store.

use crate::blockmap::Slot;
use crate::codec::{Reader, Writer};
use crate::error::Result;

pub const SPACE_TREE_ID: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegmentSpace {
    /// Block bytes written into the segment when it was created (header/footer excluded).
    pub written_bytes: u64,
    /// Block bytes still referenced by the current root.
    pub live_bytes: u64,
    pub created_txg: u64,
    /// Txg whose root first stopped referencing anything in the segment (0 = in use). The object
    /// is deleted once no retained root is older than this.
    pub freed_txg: u64,
}

impl SegmentSpace {
    pub fn is_empty_slot(&self) -> bool {
        self.written_bytes == 0 && self.created_txg == 0
    }

    pub fn to_slot(&self) -> Slot {
        let mut w = Writer::with_capacity(40);
        w.u64(self.written_bytes)
            .u64(self.live_bytes)
            .u64(self.created_txg)
            .u64(self.freed_txg)
            .u64(0);
        w.buf.try_into().expect("40 bytes")
    }

    pub fn from_slot(s: &Slot) -> Result<SegmentSpace> {
        let mut r = Reader::new(s, "space slot");
        Ok(SegmentSpace {
            written_bytes: r.u64()?,
            live_bytes: r.u64()?,
            created_txg: r.u64()?,
            freed_txg: r.u64()?,
        })
    }
}

/// Pool-wide totals carried in every root, so `status` needs no walk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SpaceTotals {
    /// Logical bytes of allocated (non-hole) volume blocks.
    pub logical_bytes: u64,
    /// Block bytes stored in segments that still exist (live + garbage).
    pub physical_bytes: u64,
    /// Block bytes referenced by the current root.
    pub live_bytes: u64,
}

impl SpaceTotals {
    pub fn garbage_bytes(&self) -> u64 {
        self.physical_bytes.saturating_sub(self.live_bytes)
    }
    /// Logical over physical of what is live (1.0 when nothing is stored).
    pub fn compress_ratio(&self) -> f64 {
        if self.live_bytes == 0 || self.logical_bytes == 0 {
            1.0
        } else {
            self.logical_bytes as f64 / self.live_bytes as f64
        }
    }
}
