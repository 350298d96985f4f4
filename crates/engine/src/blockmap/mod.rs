//! The block map: a paged, copy-on-write radix tree per volume (and one for the space table),
//! mapping a slot index to a 40-byte slot. Pages live in segments next to the data they map; only
//! the txg sync mutates them; readers see dirty pages through the page cache. See
//! docs/design/0001-block-map.md for why this and not an LSM.

mod cache;
mod cut;
mod leaf_load;
mod page;
mod tree;

pub use cache::{CachedPage, PageCache, PageKey};
pub use cut::Cut;
pub use leaf_load::LeafToLoad;
pub use page::{
    decode_page, decode_page_hinted, encode_page, encode_page_hinted, HintWindow, LeafHint, Slot,
    FANOUT, HINTED_PAGE_BYTES, HINT_WINDOW_SLOTS, PAGE_BYTES, SLOT_BYTES,
};
pub use tree::{levels_for_slots, page_span, BlockSource, TreeRef, TreeWalk};
