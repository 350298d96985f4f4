//! The free queue: map subtrees no tree references any more (cut off by a trim, left by a
//! rollback or a destroyed volume) whose space is still counted, waiting for the syncer to free
//! them a bounded number of pages per txg (ZFS's async destroy). It is part of the root, so the
//! cut and the queue entry are published together and a crash half-way resumes from the root.
//! Design note docs/design/0006-free-queue.md; layout in docs/format.md ("Root", free queue).

use crate::blkptr::BlockPtr;
use crate::codec::{Reader, Writer};
use crate::error::{Error, Result};

/// Bytes of one encoded entry.
pub const FREE_ENTRY_BYTES: usize = 4 + 1 + 8 + 40 + 8 + 4;

/// One subtree to free: the page (`level`, `index`) of a tree whose pages carry `page_tag`, at
/// `ptr`. Everything in it born after `after_txg` is freed; what is older is still held by a
/// snapshot or a clone's origin (snapshot_space.rs) and is left alone, and since a page is never
/// older than its children a page born at or before `after_txg` is skipped with its subtree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreeEntry {
    pub page_tag: u32,
    pub level: u8,
    pub index: u64,
    pub ptr: BlockPtr,
    pub after_txg: u64,
    /// The volume whose `allocated_blocks` loses the leaves freed (0: none, as for a rollback or
    /// a destroyed volume, whose count is set or gone).
    pub volume_id: u32,
}

impl FreeEntry {
    /// A whole tree: its top page, `levels - 1` levels up, index 0.
    pub fn whole_tree(
        tree: &crate::blockmap::TreeRef,
        after_txg: u64,
        volume_id: u32,
    ) -> FreeEntry {
        FreeEntry {
            page_tag: tree.page_tag,
            level: tree.levels - 1,
            index: 0,
            ptr: tree.top,
            after_txg,
            volume_id,
        }
    }

    pub fn encode(&self, w: &mut Writer) {
        w.u32(self.page_tag).u8(self.level).u64(self.index);
        self.ptr.encode(w);
        w.u64(self.after_txg).u32(self.volume_id);
    }

    pub fn decode(r: &mut Reader) -> Result<FreeEntry> {
        let (page_tag, level, index) = (r.u32()?, r.u8()?, r.u64()?);
        let ptr = BlockPtr::decode(r)?;
        let (after_txg, volume_id) = (r.u64()?, r.u32()?);
        // A page has 8 levels at most (blockmap/tree.rs), and a queued subtree is never a hole
        // nor already held as a whole: either would be a damaged root, not work to do.
        if level >= 8 || ptr.is_hole() || ptr.birth_txg <= after_txg {
            return Err(Error::corrupt(
                "root",
                format!("free queue entry level {level} born {} after {after_txg}", ptr.birth_txg),
            ));
        }
        Ok(FreeEntry { page_tag, level, index, ptr, after_txg, volume_id })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_survives_its_encoding_and_has_its_size() {
        let e = FreeEntry {
            page_tag: 1,
            level: 2,
            index: 7,
            ptr: BlockPtr { segment_id: 9, birth_txg: 5, ..BlockPtr::HOLE },
            after_txg: 4,
            volume_id: 1,
        };
        let mut w = Writer::default();
        e.encode(&mut w);
        assert_eq!(w.len(), FREE_ENTRY_BYTES);
        let mut r = Reader::new(&w.buf, "test");
        assert_eq!(FreeEntry::decode(&mut r).expect("decodes"), e);
        let held = FreeEntry { after_txg: 5, ..e };
        let mut w = Writer::default();
        held.encode(&mut w);
        let mut r = Reader::new(&w.buf, "test");
        assert!(FreeEntry::decode(&mut r).is_err(), "an entry held as a whole is refused");
    }
}
