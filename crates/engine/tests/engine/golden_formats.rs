//! Golden fixtures of every format the engine stores (docs/format.md): the committed bytes in
//! `tests/fixtures/` must be what today's encoders write from the inputs in `golden/mod.rs`,
//! today's decoders must read them back to those inputs, and the damaged ones must be refused.
//! A format change therefore needs a new version (and new fixtures beside these), never an edit
//! of a fixture. `tests/fixtures/README.md` says what each file is and how it was made:
//!
//! `FARDISK_REGENERATE_FIXTURES=1 cargo test -p fardisk-engine --test engine
//! golden_formats::regenerate_fixtures -- --ignored` writes fixtures that do not exist yet; it
//! never overwrites one.

use crate::golden;

use fardisk_common::golden::Fixtures;
use fardisk_common::le::checksum64;
use fardisk_engine::blkptr::BlockPtr;
use fardisk_engine::blockmap::{
    decode_page, decode_page_hinted, FANOUT, HINTED_PAGE_BYTES, PAGE_BYTES,
};
use fardisk_engine::compress::{decompress, Compression};
use fardisk_engine::objstore::{open_store_url, EncryptedStore, PutMode, Store};
use fardisk_engine::pool::{decode_event, decode_hot_set, HeldRecords, LeaseRecord};
use fardisk_engine::root::{decode_head, Root};
use fardisk_engine::segment::{parse_segment, segment_key, BlockOwner};
use fardisk_engine::space::{SegmentSpace, SPACE_TREE_ID};
use fardisk_engine::ErrorKind;
use golden::{POOL_GUID, SEGMENT_ID, TXG};
use std::sync::Arc;

fn fixtures() -> Fixtures {
    Fixtures::new(golden::fixtures_dir())
}

fn read(name: &str) -> Vec<u8> {
    fixtures().read(name)
}

#[test]
#[ignore = "writes missing fixtures; run with FARDISK_REGENERATE_FIXTURES=1"]
fn regenerate_fixtures() {
    fixtures().regenerate_missing(golden::all().into_iter().map(|f| (f.name, f.bytes)));
}

#[test]
fn every_fixture_is_what_todays_encoders_write() {
    fixtures().assert_unchanged(golden::all().into_iter().map(|f| (f.name, f.bytes)));
}

#[test]
fn root_v2_fixture_decodes_to_its_inputs() {
    assert_eq!(Root::decode(&read("root-v2.bin")).expect("root"), golden::root());
}

#[test]
fn root_v1_fixture_still_opens() {
    let r = Root::decode(&read("root-v1.bin")).expect("a version 1 root opens");
    let want = golden::root();
    assert_eq!((r.pool_guid, r.pool_name.as_str(), r.txg, r.epoch), (POOL_GUID, "tank", TXG, 3));
    assert_eq!(
        (r.holder.clone(), r.props.clone(), r.vdevs.clone()),
        (want.holder, want.props, want.vdevs)
    );
    assert_eq!(r.space.page_tag, r.space.tree_id, "a version 1 tree's page tag is its id");
    assert_eq!(r.volumes.len(), 1);
    let v = &r.volumes[0];
    assert_eq!((v.id, v.name.as_str(), v.origin, v.tree.page_tag), (1, "pg", None, 1));
    assert!(r.snapshots.is_empty(), "version 1 roots have no snapshots");
    assert_eq!(r.space_carry, want.space_carry);
}

#[test]
fn root_v3_fixture_decodes_to_its_inputs_and_an_empty_queue_stays_version_2() {
    let v3 = read("root-v3.bin");
    assert_eq!(u32::from_le_bytes(v3[8..12].try_into().expect("4 bytes")), 3, "version 3");
    assert_eq!(Root::decode(&v3).expect("root"), golden::root_v3());
    let v2 = read("root-v2.bin");
    assert_eq!(u32::from_le_bytes(v2[8..12].try_into().expect("4 bytes")), 2);
    assert_eq!(v3.len(), v2.len() + 4 + 2 * fardisk_engine::frees::FREE_ENTRY_BYTES);
    assert_eq!(&v3[12..v2.len() - 8], &v2[12..v2.len() - 8], "the fields before the queue");
}

#[test]
fn damaged_v3_roots_are_refused() {
    for name in [
        "root-v3.flipped-bit.bin",
        "root-v3.truncated.bin",
        "root-v3.wrong-magic.bin",
        "root-v3.empty-queue.bin",
        "root-v3.held-entry.bin",
    ] {
        let e = Root::decode(&read(name)).expect_err(name);
        assert_eq!(kind_of(e), ErrorKind::DataDamaged, "{name}");
    }
    let e = Root::decode(&read("root-v3.wrong-version.bin")).expect_err("version 99");
    assert!(e.to_string().contains("newer than this fardisk"), "{e}");
}

#[test]
fn root_v4_fixture_decodes_to_its_inputs_and_no_tree_being_destroyed_stays_version_3() {
    let v4 = read("root-v4.bin");
    assert_eq!(u32::from_le_bytes(v4[8..12].try_into().expect("4 bytes")), 4, "version 4");
    assert_eq!(Root::decode(&v4).expect("root"), golden::root_v4());
    let v3 = Root { destroying: Vec::new(), ..golden::root_v4() }.encode();
    assert_eq!(u32::from_le_bytes(v3[8..12].try_into().expect("4 bytes")), 3, "version 3");
    assert_eq!(
        v4.len(),
        v3.len() + 4 + 2 * fardisk_engine::destroying::DESTROYING_TREE_BYTES,
        "81 bytes per tree being destroyed"
    );
    assert_eq!(&v4[12..v3.len() - 8], &v3[12..v3.len() - 8], "the fields before the trees");
}

#[test]
fn damaged_v4_roots_are_refused() {
    for name in [
        "root-v4.flipped-bit.bin",
        "root-v4.truncated.bin",
        "root-v4.wrong-magic.bin",
        "root-v4.no-trees.bin",
        "root-v4.cursor-past-end.bin",
    ] {
        let e = Root::decode(&read(name)).expect_err(name);
        assert_eq!(kind_of(e), ErrorKind::DataDamaged, "{name}");
    }
    let e = Root::decode(&read("root-v4.wrong-version.bin")).expect_err("version 99");
    assert!(e.to_string().contains("newer than this fardisk"), "{e}");
}

fn kind_of(e: fardisk_engine::Error) -> ErrorKind {
    e.kind()
}

#[test]
fn damaged_roots_are_refused() {
    for name in ["root-v2.flipped-bit.bin", "root-v2.truncated.bin", "root-v2.wrong-magic.bin"] {
        let e = Root::decode(&read(name)).expect_err(name);
        assert_eq!(kind_of(e), ErrorKind::DataDamaged, "{name}");
    }
    let e = Root::decode(&read("root-v2.wrong-version.bin")).expect_err("version 99");
    assert!(e.to_string().contains("newer than this fardisk"), "{e}");
}

#[test]
fn head_fixture_decodes_and_damaged_heads_are_refused() {
    assert_eq!(decode_head(&read("head.bin")).expect("head"), TXG);
    for name in [
        "head.flipped-bit.bin",
        "head.truncated.bin",
        "head.wrong-magic.bin",
        "head.wrong-version.bin",
    ] {
        assert!(decode_head(&read(name)).is_err(), "{name} was accepted");
    }
}

#[test]
fn segment_fixture_decodes_block_by_block() {
    let bytes = read("segment.bin");
    let index = parse_segment(&bytes, POOL_GUID, SEGMENT_ID).expect("segment");
    assert_eq!((index.segment_id, index.txg), (SEGMENT_ID, TXG));
    let owners: Vec<BlockOwner> = index.entries.iter().map(|e| e.owner).collect();
    assert_eq!(
        owners,
        [
            BlockOwner::Data { tree_id: 1, block: 0 },
            BlockOwner::Data { tree_id: 1, block: 5 },
            BlockOwner::Data { tree_id: 1, block: 6 },
            BlockOwner::Page { tree_id: 1, level: 0, index: 0 },
        ]
    );
    let algos: Vec<u8> = index.entries.iter().map(|e| e.ptr.compression).collect();
    assert_eq!(algos, [0, 1, 2, 0]);
    let logical = [
        golden::data_block(1, false),
        golden::data_block(2, true),
        golden::data_block(3, true),
        fardisk_engine::blockmap::encode_page(1, 0, 0, TXG, &golden::map_page_slots()),
    ];
    for (e, want) in index.entries.iter().zip(&logical) {
        let r = e.ptr.range();
        let physical = &bytes[r.start as usize..r.end as usize];
        assert_eq!(checksum64(physical), e.ptr.checksum, "{:?}", e.owner);
        assert_eq!(e.ptr.birth_txg, TXG);
        let algo = e.ptr.compression().expect("known compression");
        let got = decompress(algo, physical, e.ptr.logical_bytes as usize).expect("decompress");
        assert_eq!(&got, want, "{:?}", e.owner);
    }
    assert!(index.entries[1].ptr.physical_bytes < 4096, "lz4 shrank the compressible block");
}

#[test]
fn damaged_segments_are_refused() {
    for name in [
        "segment.flipped-header-bit.bin",
        "segment.flipped-footer-bit.bin",
        "segment.truncated.bin",
        "segment.wrong-magic.bin",
        "segment.wrong-version.bin",
    ] {
        assert!(parse_segment(&read(name), POOL_GUID, SEGMENT_ID).is_err(), "{name} accepted");
    }
    assert!(parse_segment(&read("segment.bin"), POOL_GUID + 1, SEGMENT_ID).is_err());
    // A flipped bit inside a block leaves header and footer intact: the block's own checksum,
    // carried by the pointer that references it, refuses it before it is decompressed.
    let bytes = read("segment.flipped-data-bit.bin");
    let index = parse_segment(&bytes, POOL_GUID, SEGMENT_ID).expect("header and footer intact");
    let first = index.entries[0].ptr;
    let r = first.range();
    assert_ne!(checksum64(&bytes[r.start as usize..r.end as usize]), first.checksum);
}

#[test]
fn every_prefix_of_a_segment_is_refused_without_a_panic() {
    let bytes = read("segment.bin");
    for len in 0..bytes.len() {
        assert!(parse_segment(&bytes[..len], POOL_GUID, SEGMENT_ID).is_err(), "{len} bytes");
    }
}

#[test]
fn blkptr_fixture_decodes_and_damaged_ones_are_refused() {
    let bytes = read("blkptr.bin");
    assert_eq!(bytes.len(), 40);
    assert_eq!(BlockPtr::from_bytes(&bytes).expect("pointer"), golden::blkptr());
    assert!(BlockPtr::from_bytes(&read("blkptr.truncated.bin")).is_err());
    // A pointer has no checksum of its own (the page or root holding it has one); an unknown
    // compression is refused before any block is decompressed with it.
    let odd = BlockPtr::from_bytes(&read("blkptr.unknown-compression.bin")).expect("fields");
    assert!(odd.compression().is_err());
    assert_eq!(golden::blkptr().compression().expect("lz4"), Compression::Lz4);
}

#[test]
fn map_page_fixture_decodes_and_damaged_pages_are_refused() {
    let bytes = read("map-page.bin");
    assert_eq!(bytes.len(), PAGE_BYTES);
    let slots = decode_page(&bytes, 1, 0, 0).expect("page");
    assert_eq!(slots, golden::map_page_slots());
    assert_eq!(BlockPtr::from_bytes(&slots[0]).expect("slot 0"), golden::blkptr());
    assert!(slots.iter().skip(6).all(|s| BlockPtr::from_bytes(s).expect("slot").is_hole()));
    assert!(decode_page(&bytes, 2, 0, 0).is_err(), "another tree's page");
    assert!(decode_page(&bytes, 1, 1, 0).is_err(), "another level");
    assert!(decode_page(&bytes, 1, 0, 1).is_err(), "another index");
    for name in [
        "map-page.flipped-level-bit.bin",
        "map-page.truncated.bin",
        "map-page.wrong-magic.bin",
        "map-page.wrong-version.bin",
    ] {
        assert!(decode_page(&read(name), 1, 0, 0).is_err(), "{name} accepted");
    }
    // A page is stored as a block: a flipped slot bit is refused by the checksum in the parent's
    // pointer (xxh3 of the page's bytes as stored), which the read path checks first.
    let flipped = read("map-page.flipped-slot-bit.bin");
    assert_ne!(checksum64(&flipped), checksum64(&bytes));
}

#[test]
fn hinted_map_page_fixture_decodes_and_damaged_pages_are_refused() {
    let bytes = read("map-page-hinted.bin");
    assert_eq!(bytes.len(), HINTED_PAGE_BYTES);
    let (slots, hints) = decode_page_hinted(&bytes, 1, 1, 0).expect("hinted page");
    assert_eq!((slots.clone(), hints), golden::hinted_page_parts());
    assert_eq!(decode_page(&bytes, 1, 1, 0).expect("slots alone"), slots);
    // A version 1 page, as every fardisk before hints wrote level-1 pages: no hints.
    let v1 = fardisk_engine::blockmap::encode_page(1, 1, 0, TXG, &slots);
    assert_eq!(decode_page_hinted(&v1, 1, 1, 0).expect("v1").1, []);
    assert!(decode_page(&bytes, 2, 1, 0).is_err(), "another tree's page");
    assert!(decode_page(&bytes, 1, 1, 1).is_err(), "another index");
    for name in [
        "map-page-hinted.truncated.bin",
        "map-page-hinted.at-level-0.bin",
        "map-page-hinted.wrong-version.bin",
    ] {
        let damaged = read(name);
        assert!(decode_page(&damaged, 1, 1, 0).is_err(), "{name} accepted at level 1");
        assert!(decode_page(&damaged, 1, 0, 0).is_err(), "{name} accepted at level 0");
    }
}

#[test]
fn space_page_fixture_decodes_to_segment_space() {
    let bytes = read("space-page.bin");
    let slots = decode_page(&bytes, SPACE_TREE_ID, 0, 0).expect("space page");
    assert_eq!(slots.len(), FANOUT);
    for (i, want) in golden::space_slots() {
        assert_eq!(SegmentSpace::from_slot(&slots[i]).expect("slot"), want);
    }
    assert!(SegmentSpace::from_slot(&slots[3]).expect("slot").is_empty_slot());
    assert!(decode_page(&bytes, 1, 0, 0).is_err(), "a space page is not a volume's page");
}

#[test]
fn held_records_fixture_decodes_and_damaged_files_are_refused() {
    let held = HeldRecords::decode(&read("held-records.bin")).expect("held records");
    assert_eq!(held, golden::held_records());
    for name in [
        "held-records.flipped-header-bit.bin",
        "held-records.flipped-data-bit.bin",
        "held-records.truncated.bin",
        "held-records.wrong-magic.bin",
        "held-records.wrong-version.bin",
    ] {
        assert!(HeldRecords::decode(&read(name)).is_err(), "{name} accepted");
    }
}

#[test]
fn lease_fixture_decodes_and_damaged_leases_are_refused() {
    assert_eq!(LeaseRecord::decode(&read("lease.bin")).expect("lease"), golden::lease());
    for name in [
        "lease.flipped-bit.bin",
        "lease.truncated.bin",
        "lease.wrong-magic.bin",
        "lease.wrong-version.bin",
    ] {
        assert!(LeaseRecord::decode(&read(name)).is_err(), "{name} accepted");
    }
}

#[test]
fn history_fixture_decodes_and_damaged_events_are_refused() {
    let e = decode_event(&read("history-event.bin")).expect("event");
    assert_eq!(e, golden::history_event());
    for name in [
        "history-event.flipped-bit.bin",
        "history-event.truncated.bin",
        "history-event.wrong-magic.bin",
        "history-event.wrong-version.bin",
    ] {
        assert!(decode_event(&read(name)).is_err(), "{name} accepted");
    }
}

#[test]
fn hotset_fixture_decodes_and_damaged_ones_are_refused() {
    assert_eq!(decode_hot_set(&read("hotset.bin")).expect("hot set"), golden::hot_regions());
    for name in [
        "hotset.flipped-bit.bin",
        "hotset.truncated.bin",
        "hotset.wrong-magic.bin",
        "hotset.wrong-version.bin",
    ] {
        assert!(decode_hot_set(&read(name)).is_err(), "{name} accepted");
    }
}

/// The encrypted store over a memory store holding `sealed` as `key`, as the pool reads it.
fn open_sealed(key: &str, sealed: Vec<u8>) -> Result<Vec<u8>, String> {
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    rt.block_on(async {
        let name = format!("memory://golden-{}-{}", std::process::id(), checksum64(&sealed));
        let inner = open_store_url(&name, true).expect("memory store");
        inner.put(key, sealed.into(), PutMode::Overwrite).await.expect("put");
        let store = EncryptedStore::new(inner, &golden::encryption_key(), 1);
        let store: Arc<dyn Store> = Arc::new(store);
        store.get(key).await.map(|b| b.to_vec()).map_err(|e| e.to_string())
    })
}

#[test]
fn encrypted_fixtures_open_with_the_key() {
    let head = open_sealed("head", read("encrypted-head.bin")).expect("head opens");
    assert_eq!(decode_head(&head).expect("the plaintext is a head"), TXG);
    let key = segment_key(SEGMENT_ID);
    let plain = open_sealed(&key, read("encrypted-segment.bin")).expect("two chunks open");
    assert_eq!(plain, golden::encrypted_plain_two_chunks());
    assert!(open_sealed("roots/0000000000000001", read("encrypted-head.bin")).is_err(), "moved");
}

#[test]
fn damaged_encrypted_objects_are_refused() {
    for name in [
        "encrypted-head.flipped-chunk-bit.bin",
        "encrypted-head.flipped-header-bit.bin",
        "encrypted-head.truncated.bin",
        "encrypted-head.wrong-magic.bin",
        "encrypted-head.wrong-version.bin",
    ] {
        assert!(open_sealed("head", read(name)).is_err(), "{name} accepted");
    }
}
