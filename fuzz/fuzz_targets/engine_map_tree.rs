//! The block-map tree (engine/src/blockmap/tree.rs) over damaged pages: lookups, leaf runs, page
//! locations and the whole-tree walk (destroy, scrub) never panic and never loop, whatever the
//! pages hold. The tree reference comes from a decoded root, as at import, so its level count is
//! whatever `Root::decode` lets through.
//!
//! Input: [levels u8][slot index u64 LE][pages...], each page compact: [level u8][index u16 LE]
//! [slot count u8][slot count x (position u8, 40-byte slot)], encoded as a full map page by
//! `encode_page`. A block pointer reads page number `segment_id - 1` (segment 0 is a hole, a
//! number past the pages is a store error); the tree's top pointer is page 1.
#![no_main]

use bytes::Bytes;
use fardisk_engine::blkptr::BlockPtr;
use fardisk_engine::blockmap::{
    encode_page, BlockSource, PageCache, TreeRef, TreeWalk, FANOUT, SLOT_BYTES,
};
use fardisk_engine::root::Root;
use fardisk_engine::{Error, Result};
use fardisk_fuzz::{block_on, le_u64};
use libfuzzer_sys::fuzz_target;

const TREE_ID: u32 = 5;
/// More pages than this adds time, not coverage.
const PAGES_MAX: usize = 64;

/// A compact page: its header's level and index, and its non-zero slots.
struct Page {
    level: u8,
    index: u16,
    slots: Vec<(u8, [u8; SLOT_BYTES])>,
}

/// The pages of the input; a page is encoded only when the tree reads it (most are not).
struct Pages(Vec<Page>);

#[async_trait::async_trait]
impl BlockSource for Pages {
    async fn read_block(&self, ptr: &BlockPtr) -> Result<Bytes> {
        let n = ptr.segment_id.checked_sub(1).ok_or_else(|| Error::Bug("read of a hole".into()))?;
        let page =
            self.0.get(n as usize).ok_or_else(|| Error::corrupt("fuzz store", "no such block"))?;
        let mut slots = vec![[0u8; SLOT_BYTES]; FANOUT];
        for (pos, slot) in &page.slots {
            slots[*pos as usize] = *slot;
        }
        Ok(Bytes::from(encode_page(TREE_ID, page.level, page.index as u64, 1, &slots)))
    }
}

/// Parses the compact pages; a page the input holds only in part keeps the slots it has.
fn pages(mut data: &[u8]) -> Vec<Page> {
    let mut out = Vec::new();
    while data.len() >= 4 && out.len() < PAGES_MAX {
        let (level, index, count) =
            (data[0], u16::from_le_bytes([data[1], data[2]]), data[3] as usize);
        data = &data[4..];
        let mut slots = Vec::with_capacity(count);
        for _ in 0..count {
            let Some((entry, rest)) = data.split_first_chunk::<{ 1 + SLOT_BYTES }>() else { break };
            slots.push((entry[0], entry[1..].try_into().expect("40 bytes")));
            data = rest;
        }
        out.push(Page { level, index, slots });
    }
    out
}

/// The tree reference as import gets it: through a root's encoding and decoder.
fn tree_from_root(levels: u8) -> Option<TreeRef> {
    let top = BlockPtr {
        segment_id: 1,
        offset_bytes: 0,
        physical_bytes: 0,
        checksum: 0,
        birth_txg: 1,
        compression: 0,
        logical_bytes: 0,
    };
    let mut root = fardisk_fuzz::seeds::sample_root(1, 0, 0);
    root.space = TreeRef { tree_id: TREE_ID, levels, top, page_tag: TREE_ID };
    Root::decode(&root.encode()).ok().map(|r| r.space)
}

fuzz_target!(init: fardisk_fuzz::write_seeds("engine_map_tree", fardisk_fuzz::seeds::map_trees), |data: &[u8]| {
    if data.len() < 9 {
        return;
    }
    let Some(tree) = tree_from_root(data[0]) else { return };
    let slot_index = le_u64(data, 1);
    let src = Pages(pages(&data[9..]));
    let cache = PageCache::new(0);
    let generation = cache.generation();
    block_on(async {
        let _ = tree.lookup(&cache, &src, slot_index, generation).await;
        let run_start = slot_index & !0xff;
        let _ = tree.lookup_leaf_run(&cache, &src, run_start, FANOUT, generation).await;
        let _ = tree.page_location(&cache, &src, (slot_index >> 56) as u8, slot_index & 0xffff).await;
        let _ = tree.page_slots(&cache, &src, (slot_index >> 48) as u8 & 7, slot_index & 0xff).await;
        if let Ok(walk) = TreeWalk::walk(&tree, &PageCache::new(0), &src).await {
            // Each page is visited once: its (level, index) is in its header, checked on read.
            assert!(walk.pages.len() <= src.0.len());
            for (level, _, _) in &walk.pages {
                assert!(*level < tree.levels);
            }
        }
    });
});
