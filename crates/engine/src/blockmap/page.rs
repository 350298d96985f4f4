//! One block-map page: 256 slots of 40 bytes behind a 32-byte header. The parent's block pointer
//! carries the page's checksum; the header repeats the page's identity so a page read from the
//! wrong place is caught even when its checksum matches. A level-1 page (the parent of leaves)
//! may carry, in version 2, a [`LeafHint`] per leaf after its slots: where that leaf's blocks
//! were written, so a read whose leaf is not cached can ask for the leaf and its blocks at once
//! (pool/cold_read.rs). Layout in docs/format.md ("Map page").

use crate::blkptr::BlockPtr;
use crate::codec::{Reader, Writer};
use crate::error::{Error, Result};

pub const FANOUT: usize = 256;
pub const SLOT_BYTES: usize = 40;
pub const PAGE_MAGIC: u64 = u64::from_le_bytes(*b"FDMPAGE1");
/// Slots only (every level; what a fardisk before leaf hints wrote at level 1 too).
pub const PAGE_VERSION: u16 = 1;
/// A level-1 page with a leaf hint after the slots for each of its 256 leaves.
pub const PAGE_VERSION_HINTS: u16 = 2;
pub const PAGE_HEADER_BYTES: usize = 32;
pub const PAGE_BYTES: usize = PAGE_HEADER_BYTES + FANOUT * SLOT_BYTES;
/// Leaf slots per hint window: a window's blocks are 128 KiB of volume.
pub const HINT_WINDOW_SLOTS: usize = 32;
pub const HINT_WINDOWS: usize = FANOUT / HINT_WINDOW_SLOTS;
pub const HINT_BYTES: usize = 8 + HINT_WINDOWS * 8;
/// A level-1 page of version 2, and what the page cache counts for every level-1 page.
pub const HINTED_PAGE_BYTES: usize = PAGE_BYTES + FANOUT * HINT_BYTES;

pub type Slot = [u8; SLOT_BYTES];

/// Where one leaf's blocks were written, as its parent remembers it: the segment that holds most
/// of them and, per window of 32 slots, the byte range of that segment holding every block of
/// those slots stored there (`span_bytes` 0: none). Only a hint: a read takes each block's place
/// from the leaf and checks its checksum, so a stale or wrong hint costs a wasted GET, never a
/// wrong byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeafHint {
    /// 0: no hint (a leaf written before hints, or with no block).
    pub segment_id: u64,
    pub windows: [HintWindow; HINT_WINDOWS],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HintWindow {
    pub offset_bytes: u32,
    pub span_bytes: u32,
}

impl LeafHint {
    pub const NONE: LeafHint = LeafHint {
        segment_id: 0,
        windows: [HintWindow { offset_bytes: 0, span_bytes: 0 }; HINT_WINDOWS],
    };

    /// The hint of a leaf with these slots: the segment holding most of its blocks (the newest
    /// of equals), and each window's range of it. Slots that are not block pointers (a space
    /// table's) are skipped like holes.
    pub fn of_leaf(slots: &[Slot]) -> LeafHint {
        // Bounded: one entry per distinct segment, at most the 256 slots.
        let mut counts: Vec<(u64, u32)> = Vec::new();
        let ptrs: Vec<Option<BlockPtr>> =
            slots.iter().map(|s| BlockPtr::from_bytes(s).ok().filter(|p| !p.is_hole())).collect();
        for p in ptrs.iter().flatten() {
            match counts.iter_mut().find(|(id, _)| *id == p.segment_id) {
                Some((_, n)) => *n += 1,
                None => counts.push((p.segment_id, 1)),
            }
        }
        let Some(&(segment_id, _)) = counts.iter().max_by_key(|&&(id, n)| (n, id)) else {
            return LeafHint::NONE;
        };
        let mut hint = LeafHint { segment_id, ..LeafHint::NONE };
        for (w, window) in ptrs.chunks(HINT_WINDOW_SLOTS).zip(hint.windows.iter_mut()) {
            let mut range: Option<(u64, u64)> = None;
            for p in w.iter().flatten().filter(|p| p.segment_id == segment_id) {
                let r = p.range();
                range =
                    Some(range.map_or((r.start, r.end), |(a, b)| (a.min(r.start), b.max(r.end))));
            }
            if let Some((a, b)) = range {
                // Segment offsets are u32 (docs/format.md); a span that would not fit is none.
                if let (Ok(offset_bytes), Ok(span_bytes)) = (u32::try_from(a), u32::try_from(b - a))
                {
                    *window = HintWindow { offset_bytes, span_bytes };
                }
            }
        }
        hint
    }

    pub fn is_none(&self) -> bool {
        self.segment_id == 0
    }

    fn encode(&self, w: &mut Writer) {
        w.u64(self.segment_id);
        for win in &self.windows {
            w.u32(win.offset_bytes).u32(win.span_bytes);
        }
    }

    fn decode(r: &mut Reader) -> Result<LeafHint> {
        let mut hint = LeafHint { segment_id: r.u64()?, ..LeafHint::NONE };
        for win in hint.windows.iter_mut() {
            *win = HintWindow { offset_bytes: r.u32()?, span_bytes: r.u32()? };
        }
        Ok(hint)
    }
}

pub fn encode_page(tree_id: u32, level: u8, index: u64, txg: u64, slots: &[Slot]) -> Vec<u8> {
    encode_page_hinted(tree_id, level, index, txg, slots, &[])
}

/// A page with leaf hints (version 2; `hints` one per slot, for a level-1 page); without any
/// hint that is not none, the version 1 page of [`encode_page`].
pub fn encode_page_hinted(
    tree_id: u32,
    level: u8,
    index: u64,
    txg: u64,
    slots: &[Slot],
    hints: &[LeafHint],
) -> Vec<u8> {
    debug_assert_eq!(slots.len(), FANOUT);
    let hinted = level == 1 && hints.len() == FANOUT && hints.iter().any(|h| !h.is_none());
    let (version, bytes) =
        if hinted { (PAGE_VERSION_HINTS, HINTED_PAGE_BYTES) } else { (PAGE_VERSION, PAGE_BYTES) };
    let mut w = Writer::with_capacity(bytes);
    w.u64(PAGE_MAGIC).u16(version).u8(level).u8(0).u32(tree_id).u64(index).u64(txg);
    for s in slots {
        w.bytes(s);
    }
    if hinted {
        for h in hints {
            h.encode(&mut w);
        }
    }
    debug_assert_eq!(w.len(), bytes);
    w.buf
}

/// Decodes a page whose checksum was already verified, and checks it is the page asked for.
pub fn decode_page(bytes: &[u8], tree_id: u32, level: u8, index: u64) -> Result<Vec<Slot>> {
    decode_page_hinted(bytes, tree_id, level, index).map(|(slots, _)| slots)
}

/// [`decode_page`] with the page's leaf hints (empty for a version 1 page).
pub fn decode_page_hinted(
    bytes: &[u8],
    tree_id: u32,
    level: u8,
    index: u64,
) -> Result<(Vec<Slot>, Vec<LeafHint>)> {
    let what = || format!("map page tree {tree_id} level {level} index {index}");
    let mut r = Reader::new(bytes, "map page");
    let (magic, version, lvl, _pad) = (r.u64()?, r.u16()?, r.u8()?, r.u8()?);
    let (tid, idx, _txg) = (r.u32()?, r.u64()?, r.u64()?);
    if magic != PAGE_MAGIC || lvl != level || tid != tree_id || idx != index {
        return Err(Error::corrupt(what(), "header names another page"));
    }
    let expected = match version {
        PAGE_VERSION => PAGE_BYTES,
        PAGE_VERSION_HINTS if level == 1 => HINTED_PAGE_BYTES,
        _ => {
            return Err(Error::corrupt(
                what(),
                format!(
                "format version {version} at level {level}: this fardisk reads 1, and 2 at level 1"
            ),
            ))
        }
    };
    if bytes.len() != expected {
        return Err(Error::corrupt(
            what(),
            format!("{} bytes, expected {expected} for version {version}", bytes.len()),
        ));
    }
    let mut slots = vec![[0u8; SLOT_BYTES]; FANOUT];
    for s in slots.iter_mut() {
        s.copy_from_slice(r.bytes(SLOT_BYTES)?);
    }
    let mut hints = Vec::new();
    if version == PAGE_VERSION_HINTS {
        hints.reserve_exact(FANOUT);
        for _ in 0..FANOUT {
            hints.push(LeafHint::decode(&mut r)?);
        }
        // Version 2 is written only with a hint; without one the page would be version 1.
        if hints.iter().all(LeafHint::is_none) {
            return Err(Error::corrupt(what(), "version 2 without a single leaf hint"));
        }
    }
    Ok((slots, hints))
}
