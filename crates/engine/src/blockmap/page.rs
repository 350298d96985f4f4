//! One block-map page: 256 slots of 40 bytes behind a 32-byte header. The parent's block pointer
//! carries the page's checksum; the header repeats the page's identity so a page read from the
//! wrong place is caught even when its checksum matches. Layout in docs/format.md ("Map page").

use crate::codec::{Reader, Writer};
use crate::error::{Error, Result};

pub const FANOUT: usize = 256;
pub const SLOT_BYTES: usize = 40;
pub const PAGE_MAGIC: u64 = u64::from_le_bytes(*b"FDMPAGE1");
pub const PAGE_VERSION: u16 = 1;
pub const PAGE_HEADER_BYTES: usize = 32;
pub const PAGE_BYTES: usize = PAGE_HEADER_BYTES + FANOUT * SLOT_BYTES;

pub type Slot = [u8; SLOT_BYTES];

pub fn encode_page(tree_id: u32, level: u8, index: u64, txg: u64, slots: &[Slot]) -> Vec<u8> {
    debug_assert_eq!(slots.len(), FANOUT);
    let mut w = Writer::with_capacity(PAGE_BYTES);
    w.u64(PAGE_MAGIC).u16(PAGE_VERSION).u8(level).u8(0).u32(tree_id).u64(index).u64(txg);
    for s in slots {
        w.bytes(s);
    }
    debug_assert_eq!(w.len(), PAGE_BYTES);
    w.buf
}

/// Decodes a page whose checksum was already verified, and checks it is the page asked for.
pub fn decode_page(bytes: &[u8], tree_id: u32, level: u8, index: u64) -> Result<Vec<Slot>> {
    let what = || format!("map page tree {tree_id} level {level} index {index}");
    if bytes.len() != PAGE_BYTES {
        return Err(Error::corrupt(
            what(),
            format!("{} bytes, expected {PAGE_BYTES}", bytes.len()),
        ));
    }
    let mut r = Reader::new(bytes, "map page");
    let (magic, version, lvl, _pad) = (r.u64()?, r.u16()?, r.u8()?, r.u8()?);
    let (tid, idx, _txg) = (r.u32()?, r.u64()?, r.u64()?);
    if magic != PAGE_MAGIC
        || version != PAGE_VERSION
        || lvl != level
        || tid != tree_id
        || idx != index
    {
        return Err(Error::corrupt(what(), "header names another page"));
    }
    let mut slots = vec![[0u8; SLOT_BYTES]; FANOUT];
    for s in slots.iter_mut() {
        s.copy_from_slice(r.bytes(SLOT_BYTES)?);
    }
    Ok(slots)
}
