//! Block pointer: where an immutable block lives in the store and how to verify it. Every map entry,
//! every page pointer and every root's tree pointer is one. 40 bytes, see docs/format.md.

use crate::codec::{Reader, Writer};
use crate::compress::Compression;
use crate::error::Result;

pub const BLKPTR_BYTES: usize = 40;

/// `segment_id == 0` means a hole: the block reads as zeros and costs nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct BlockPtr {
    pub segment_id: u64,
    pub offset_bytes: u32,
    pub physical_bytes: u32,
    /// xxh3-64 of the physical (stored, possibly compressed) bytes.
    pub checksum: u64,
    pub birth_txg: u64,
    pub compression: u8,
    pub logical_bytes: u32,
}

impl BlockPtr {
    pub const HOLE: BlockPtr = BlockPtr {
        segment_id: 0,
        offset_bytes: 0,
        physical_bytes: 0,
        checksum: 0,
        birth_txg: 0,
        compression: 0,
        logical_bytes: 0,
    };

    pub fn is_hole(&self) -> bool {
        self.segment_id == 0
    }

    pub fn compression(&self) -> Result<Compression> {
        Compression::from_u8(self.compression)
    }

    /// Byte range of the block inside its segment object.
    pub fn range(&self) -> std::ops::Range<u64> {
        self.offset_bytes as u64..self.offset_bytes as u64 + self.physical_bytes as u64
    }

    pub fn encode(&self, w: &mut Writer) {
        w.u64(self.segment_id)
            .u32(self.offset_bytes)
            .u32(self.physical_bytes)
            .u64(self.checksum)
            .u64(self.birth_txg)
            .u8(self.compression)
            .u8(0)
            .u16(0)
            .u32(self.logical_bytes);
    }

    pub fn decode(r: &mut Reader) -> Result<BlockPtr> {
        let p = BlockPtr {
            segment_id: r.u64()?,
            offset_bytes: r.u32()?,
            physical_bytes: r.u32()?,
            checksum: r.u64()?,
            birth_txg: r.u64()?,
            compression: r.u8()?,
            logical_bytes: {
                r.u8()?;
                r.u16()?;
                r.u32()?
            },
        };
        Ok(p)
    }

    pub fn to_bytes(&self) -> [u8; BLKPTR_BYTES] {
        let mut w = Writer::with_capacity(BLKPTR_BYTES);
        self.encode(&mut w);
        w.buf.try_into().expect("a block pointer is 40 bytes")
    }

    pub fn from_bytes(b: &[u8]) -> Result<BlockPtr> {
        BlockPtr::decode(&mut Reader::new(b, "block pointer"))
    }
}
