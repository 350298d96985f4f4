//! Trees being destroyed a bounded slice per txg: a destroyed snapshot, or the former map of a
//! volume rolled back or destroyed while one of its snapshots was still being destroyed. Each
//! keeps a cursor in its volume's block address space: below it, what the tree alone held is
//! freed and what it shared is no longer its concern; at and above it, it still holds as a
//! snapshot does (pool/txg/snapshot_space.rs `Holds`). Part of the root, so the slice's frees and
//! the cursor's new place are published together and a crash resumes from the last root.
//! Design note docs/design/0006-free-queue.md; layout in docs/format.md ("Root", version 4).

use crate::blockmap::TreeRef;
use crate::codec::{Reader, Writer};
use crate::error::{Error, Result};
use crate::root::{get_tree, put_tree};

/// Bytes of one encoded tree being destroyed.
pub const DESTROYING_TREE_BYTES: usize = 4 + 8 + (4 + 1 + 40 + 4) + 8 + 4 + 8;

/// `NO_ORIGIN` in the encoding of `origin`.
const NO_ORIGIN: u32 = 0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DestroyingTree {
    /// The volume whose map it was a version of (gone once a destroyed volume's map is queued).
    pub volume_id: u32,
    /// Every block and page it references was born at or before this txg.
    pub txg: u64,
    /// Its pages' cache namespace (`tree_id`) is its own: the snapshot's id, or a fresh id.
    pub tree: TreeRef,
    /// The volume's origin hold when it was queued: what is older belongs to the origin.
    pub floor_txg: u64,
    /// The snapshot `floor_txg` comes from: it cannot be destroyed while this tree is.
    pub origin: Option<u32>,
    /// Blocks below this one are done. Only the first tree of a volume in the root's list
    /// advances; the others wait at 0 and hold all they reference.
    pub cursor_block: u64,
}

impl DestroyingTree {
    pub fn encode(&self, w: &mut Writer) {
        w.u32(self.volume_id).u64(self.txg);
        put_tree(w, &self.tree);
        w.u64(self.floor_txg).u32(self.origin.unwrap_or(NO_ORIGIN)).u64(self.cursor_block);
    }

    pub fn decode(r: &mut Reader) -> Result<DestroyingTree> {
        let (volume_id, txg) = (r.u32()?, r.u64()?);
        let tree = get_tree(r, crate::root::ROOT_VERSION)?;
        let (floor_txg, origin, cursor_block) = (r.u64()?, r.u32()?, r.u64()?);
        // A tree newer than its own txg, a floor above it or a cursor past its end would free
        // what another tree still holds: a damaged root, not work to do.
        if tree.top.birth_txg > txg || floor_txg > txg || cursor_block > tree.capacity_slots() {
            return Err(Error::corrupt(
                "root",
                format!(
                    "destroying tree {} of txg {txg}: top born {}, floor {floor_txg}, cursor {cursor_block}",
                    tree.tree_id, tree.top.birth_txg
                ),
            ));
        }
        let origin = Some(origin).filter(|o| *o != NO_ORIGIN);
        Ok(DestroyingTree { volume_id, txg, tree, floor_txg, origin, cursor_block })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blkptr::BlockPtr;

    fn tree() -> DestroyingTree {
        let top = BlockPtr { segment_id: 9, birth_txg: 5, ..BlockPtr::HOLE };
        DestroyingTree {
            volume_id: 1,
            txg: 6,
            tree: TreeRef { tree_id: 3, levels: 2, top, page_tag: 1 },
            floor_txg: 2,
            origin: Some(7),
            cursor_block: 512,
        }
    }

    #[test]
    fn a_destroying_tree_survives_its_encoding() {
        for t in [tree(), DestroyingTree { origin: None, cursor_block: 0, ..tree() }] {
            let mut w = Writer::default();
            t.encode(&mut w);
            assert_eq!(w.len(), DESTROYING_TREE_BYTES);
            let mut r = Reader::new(&w.buf, "test");
            assert_eq!(DestroyingTree::decode(&mut r).expect("decodes"), t);
        }
    }

    #[test]
    fn a_damaged_destroying_tree_is_refused() {
        let t = tree();
        let damaged = [
            DestroyingTree { txg: 4, ..t },
            DestroyingTree { floor_txg: 7, ..t },
            DestroyingTree { cursor_block: t.tree.capacity_slots() + 1, ..t },
        ];
        for d in damaged {
            let mut w = Writer::default();
            d.encode(&mut w);
            let mut r = Reader::new(&w.buf, "test");
            assert!(DestroyingTree::decode(&mut r).is_err(), "{d:?} is refused");
        }
    }
}
