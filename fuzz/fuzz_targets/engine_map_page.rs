//! Block-map pages (engine/src/blockmap/page.rs, read by tree.rs): `decode_page_hinted` never
//! panics, accepts a page only as the identity it names, and a decoded page (version 1, or a
//! level-1 page with leaf hints, version 2) re-encodes to the same bytes (but the header's
//! padding byte, which it ignores). Every slot of a decoded page then
//! goes through `BlockPtr::from_bytes`, as the tree walk does with the slots of inner pages.
//! Pages carry no checksum of their own (the parent's pointer does), so there is nothing to reseal.
#![no_main]

use fardisk_engine::blkptr::BlockPtr;
use fardisk_engine::blockmap::{
    decode_page, decode_page_hinted, encode_page_hinted, FANOUT, HINTED_PAGE_BYTES, PAGE_BYTES,
    SLOT_BYTES,
};
use libfuzzer_sys::fuzz_target;

const HEADER_BYTES: usize = PAGE_BYTES - FANOUT * SLOT_BYTES;
/// Byte 11 of the header is padding the decoder does not look at.
const PAD_AT: usize = 11;

fuzz_target!(init: fardisk_fuzz::write_seeds("engine_map_page", fardisk_fuzz::seeds::pages), |data: &[u8]| {
    // Ask for the identity the header names (what a read from the right place asks for).
    let level = data.get(10).copied().unwrap_or(0);
    let tree_id = fardisk_fuzz::le_u64(data, 12) as u32;
    let index = fardisk_fuzz::le_u64(data, 16);
    let txg = fardisk_fuzz::le_u64(data, 24);
    let Ok((slots, hints)) = decode_page_hinted(data, tree_id, level, index) else { return };
    let hinted = !hints.is_empty();
    assert_eq!(data.len(), if hinted { HINTED_PAGE_BYTES } else { PAGE_BYTES });
    assert!(!hinted || (level == 1 && hints.len() == FANOUT), "hints only on a level-1 page");
    assert_eq!(slots.len(), FANOUT);
    assert_eq!(decode_page(data, tree_id, level, index).expect("slots alone"), slots);
    let again = encode_page_hinted(tree_id, level, index, txg, &slots, &hints);
    assert_eq!(again[..PAD_AT], data[..PAD_AT]);
    assert_eq!(again[PAD_AT + 1..], data[PAD_AT + 1..]);
    assert!(decode_page(data, tree_id, level, index.wrapping_add(1)).is_err(), "another index");
    assert!(decode_page(data, tree_id.wrapping_add(1), level, index).is_err(), "another tree");
    assert!(decode_page(data, tree_id, level.wrapping_add(1), index).is_err(), "another level");
    for (slot, raw) in slots.iter().zip(data[HEADER_BYTES..].chunks_exact(SLOT_BYTES)) {
        assert_eq!(&slot[..], raw);
        let ptr = BlockPtr::from_bytes(slot).expect("a slot is a whole block pointer");
        let _ = ptr.range();
    }
});
