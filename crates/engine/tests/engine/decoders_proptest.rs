//! The engine's parsers of bytes that come back from the store: roots, the head hint, segment
//! headers and footers, map pages. Arbitrary bytes never make one panic; a flipped bit in a
//! checksummed region, or a truncation, is refused; a valid encoding decodes to what was encoded.
//! (Block data inside a segment and map-page slots are checksummed by the pointer that refers to
//! them, which the read path verifies: they are not the parser's to check.)

use fardisk_engine::blkptr::BlockPtr;
use fardisk_engine::blockmap::{
    decode_page, decode_page_hinted, encode_page, encode_page_hinted, LeafHint, TreeRef, FANOUT,
    HINT_WINDOW_SLOTS, SLOT_BYTES,
};
use fardisk_engine::compress::Compression;
use fardisk_engine::frees::FreeEntry;
use fardisk_engine::root::{
    decode_head, encode_head, Holder, Root, SnapshotEntry, VdevEntry, VolumeEntry,
};
use fardisk_engine::segment::{parse_segment, BlockOwner, SegmentBuilder};
use fardisk_engine::space::SpaceTotals;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn ptr(seed: u64) -> BlockPtr {
    BlockPtr {
        segment_id: seed | 1,
        offset_bytes: 64,
        physical_bytes: 100,
        checksum: seed ^ 0xabc,
        birth_txg: seed % 1000,
        compression: 1,
        logical_bytes: 4096,
    }
}

fn tree(id: u32, seed: u64) -> TreeRef {
    TreeRef { tree_id: id, levels: 3, top: ptr(seed), page_tag: id }
}

fn root(seed: u64, volumes: usize, snapshots: usize) -> Root {
    Root {
        pool_guid: seed as u128 * 7919,
        pool_name: format!("pool{seed}"),
        txg: seed,
        epoch: seed / 3,
        time_ms: 1_700_000_000_000 + seed,
        put_id: seed as u128 ^ 0x55,
        holder: Holder {
            hostname: "host".into(),
            pid: 42,
            import_id: 9,
            since_ms: 1,
            active: seed.is_multiple_of(2),
        },
        next_segment_counter: seed + 5,
        next_volume_id: 100,
        space: tree(u32::MAX, seed + 1),
        totals: SpaceTotals { logical_bytes: seed, physical_bytes: seed * 2, live_bytes: seed },
        space_carry: vec![(seed, -(seed as i64)), (seed + 1, 7)],
        props: BTreeMap::from([("compression".to_string(), "zstd".to_string())]),
        vdevs: vec![VdevEntry {
            role: fardisk_engine::root::VdevRole::Log,
            mirror: true,
            guid: seed,
            paths: vec!["/a".into(), "/b".into()],
        }],
        volumes: (0..volumes as u32)
            .map(|i| VolumeEntry {
                id: i + 1,
                name: format!("v{i}"),
                size_bytes: 1 << 30,
                created_txg: 3,
                tree: tree(i + 1, seed + i as u64),
                allocated_blocks: seed,
                props: BTreeMap::new(),
                origin: if i % 2 == 1 { Some(50 + i) } else { None },
            })
            .collect(),
        snapshots: (0..snapshots as u32)
            .map(|i| SnapshotEntry {
                id: 50 + i,
                volume_id: 1,
                name: format!("s{i}"),
                txg: 10 + i as u64,
                time_ms: 5,
                size_bytes: 1 << 30,
                tree: TreeRef { page_tag: 1, ..tree(50 + i, seed) },
                allocated_blocks: 4,
            })
            .collect(),
        // Every other seed has frees pending: a version 3 root.
        free_queue: (0..(seed % 2) * 3)
            .map(|i| FreeEntry {
                page_tag: 1,
                level: i as u8,
                index: seed + i,
                ptr: BlockPtr { birth_txg: 5, ..ptr(seed + i) },
                after_txg: 4,
                volume_id: i as u32,
            })
            .collect(),
        // Every third seed has a tree being destroyed: a version 4 root.
        destroying: (0..u64::from(seed.is_multiple_of(3)))
            .map(|i| fardisk_engine::destroying::DestroyingTree {
                volume_id: 1,
                txg: 9,
                tree: TreeRef {
                    page_tag: 1,
                    top: BlockPtr { birth_txg: 8, ..ptr(seed + i) },
                    ..tree(70, seed)
                },
                floor_txg: seed % 9,
                origin: seed.is_multiple_of(2).then_some(3),
                cursor_block: seed % 4096,
            })
            .collect(),
    }
}

fn segment(seed: u64, blocks: usize) -> Vec<u8> {
    let mut b = SegmentBuilder::new(77, 1234, seed);
    for i in 0..blocks {
        let data = vec![(seed as u8).wrapping_add(i as u8); 4096];
        b.add(BlockOwner::Data { tree_id: 1, block: i as u64 }, &data, Compression::Lz4);
    }
    b.add(BlockOwner::Page { tree_id: 1, level: 0, index: 0 }, &[9u8; 300], Compression::Off);
    b.finish().0
}

proptest! {
    // 256 cases in CI; PROPTEST_CASES=N for a longer run.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let _ = Root::decode(&bytes);
        let _ = decode_head(&bytes);
        let _ = parse_segment(&bytes, 77, 1234);
        let _ = decode_page(&bytes, 1, 0, 0);
        let _ = BlockPtr::from_bytes(&bytes);
    }

    #[test]
    fn roots_round_trip_and_refuse_any_flip(seed in 0u64..1_000_000, vols in 0usize..4, snaps in 0usize..4, pos in any::<usize>(), bit in 0u8..8) {
        let r = root(seed, vols, snaps);
        let bytes = r.encode_verified().unwrap();
        prop_assert_eq!(Root::decode(&bytes).unwrap(), r);
        let mut bad = bytes.clone();
        let at = pos % bad.len();
        bad[at] ^= 1 << bit;
        prop_assert!(Root::decode(&bad).is_err(), "a flipped bit at {} was accepted", at);
        prop_assert!(Root::decode(&bytes[..pos % bytes.len()]).is_err());
    }

    #[test]
    fn head_hints_refuse_any_flip(txg in any::<u64>(), pos in 0usize..32, bit in 0u8..8) {
        let bytes = encode_head(txg);
        prop_assert_eq!(decode_head(&bytes).unwrap(), txg);
        let mut bad = bytes.clone();
        let at = pos % bad.len();
        bad[at] ^= 1 << bit;
        prop_assert!(decode_head(&bad).is_err());
    }

    #[test]
    fn segment_header_and_footer_refuse_any_flip(seed in 0u64..1000, blocks in 1usize..6, pick in any::<usize>(), bit in 0u8..8) {
        let bytes = segment(seed, blocks);
        let index = parse_segment(&bytes, 77, 1234).unwrap();
        prop_assert_eq!(index.entries.len(), blocks + 1);
        // The header (64 bytes) and the footer entries + trailer ((blocks + 1) x 40 + 32 bytes).
        let tail = (blocks + 1) * 40 + 32;
        let at = if pick % 2 == 0 { pick / 2 % 64 } else { bytes.len() - 1 - (pick / 2 % tail) };
        let mut bad = bytes.clone();
        bad[at] ^= 1 << bit;
        prop_assert!(parse_segment(&bad, 77, 1234).is_err(), "a flipped bit at {} of {} was accepted", at, bytes.len());
        prop_assert!(parse_segment(&bytes[..pick % bytes.len()], 77, 1234).is_err());
        prop_assert!(parse_segment(&bytes, 78, 1234).is_err(), "another pool's segment");
        prop_assert!(parse_segment(&bytes, 77, 1235).is_err(), "another segment id");
    }

    #[test]
    fn pages_check_their_header(seed in any::<u64>(), level in 0u8..4, index in 0u64..1000, cut in any::<usize>()) {
        let mut slots = vec![[0u8; SLOT_BYTES]; FANOUT];
        slots[(seed % FANOUT as u64) as usize] = ptr(seed).to_bytes();
        let bytes = encode_page(3, level, index, 9, &slots);
        prop_assert_eq!(decode_page(&bytes, 3, level, index).unwrap(), slots);
        prop_assert!(decode_page(&bytes, 4, level, index).is_err(), "another tree's page");
        prop_assert!(decode_page(&bytes, 3, level, index + 1).is_err(), "another index");
        prop_assert!(decode_page(&bytes, 3, level.wrapping_add(1), index).is_err(), "another level");
        prop_assert!(decode_page(&bytes[..cut % bytes.len()], 3, level, index).is_err());
    }

    /// A leaf's hint names the segment most of its blocks are in, and each window's range holds
    /// every block of that window stored there; the hinted level-1 page reads back as written.
    #[test]
    fn leaf_hints_cover_their_blocks(
        blocks in proptest::collection::vec((0u64..3, 0u32..4_000_000, 1u32..5000), 0..FANOUT),
        index in 0u64..1000,
    ) {
        let mut slots = vec![[0u8; SLOT_BYTES]; FANOUT];
        for (i, &(seg, offset_bytes, physical_bytes)) in blocks.iter().enumerate() {
            // Segment 0 is a hole: about a third of the slots stay empty.
            let p = BlockPtr { segment_id: seg, offset_bytes, physical_bytes, ..ptr(i as u64) };
            slots[(i * 7) % FANOUT] = p.to_bytes();
        }
        let hint = LeafHint::of_leaf(&slots);
        let ptrs: Vec<BlockPtr> = slots.iter().map(|s| BlockPtr::from_bytes(s).unwrap()).collect();
        let in_seg = |id: u64| ptrs.iter().filter(|p| !p.is_hole() && p.segment_id == id).count();
        if ptrs.iter().all(|p| p.is_hole()) {
            prop_assert!(hint.is_none());
        } else {
            prop_assert!(in_seg(hint.segment_id) >= in_seg(1).max(in_seg(2)), "not the segment with most blocks");
        }
        for (pos, p) in ptrs.iter().enumerate() {
            if p.is_hole() || p.segment_id != hint.segment_id {
                continue;
            }
            let w = hint.windows[pos / HINT_WINDOW_SLOTS];
            let (a, b) = (w.offset_bytes as u64, w.offset_bytes as u64 + w.span_bytes as u64);
            prop_assert!(a <= p.range().start && p.range().end <= b, "slot {} outside its window", pos);
        }
        let mut hints = vec![LeafHint::NONE; FANOUT];
        hints[(index % FANOUT as u64) as usize] = hint;
        let bytes = encode_page_hinted(3, 1, index, 9, &slots, &hints);
        let (got_slots, got_hints) = decode_page_hinted(&bytes, 3, 1, index).unwrap();
        prop_assert_eq!(got_slots, slots);
        if hint.is_none() {
            prop_assert!(got_hints.is_empty(), "a page without hints is written as version 1");
        } else {
            prop_assert_eq!(got_hints, hints);
        }
    }
}
