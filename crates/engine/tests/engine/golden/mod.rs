//! The inputs of the engine's golden fixtures and how every fixture file is made from them: the
//! good encodings (today's encoders) and the deliberately damaged ones derived from them. What
//! each file is, and why, is in `tests/fixtures/README.md`.

use fardisk_common::golden::flip_bit;
use fardisk_common::le::checksum64;
use fardisk_engine::blkptr::BlockPtr;
use fardisk_engine::blockmap::{
    encode_page, encode_page_hinted, HintWindow, LeafHint, Slot, TreeRef, FANOUT, SLOT_BYTES,
};
use fardisk_engine::codec::Writer;
use fardisk_engine::compress::Compression;
use fardisk_engine::destroying::DestroyingTree;
use fardisk_engine::frees::FreeEntry;
use fardisk_engine::objstore::{seal_with_nonces, EncryptionKey};
use fardisk_engine::pool::{
    encode_event, encode_hot_set, HeldRecord, HeldRecords, HistoryEvent, LeaseRecord,
};
use fardisk_engine::rng::Rng;
use fardisk_engine::root::{
    encode_head, Holder, Root, SnapshotEntry, VdevEntry, VdevRole, VolumeEntry,
};
use fardisk_engine::segment::{segment_id, BlockOwner, SegmentBuilder};
use fardisk_engine::space::{SegmentSpace, SpaceTotals, SPACE_TREE_ID};
use fardisk_slog::{LogRecord, RecordKind};
use std::collections::BTreeMap;

pub const POOL_GUID: u128 = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;
pub const TXG: u64 = 42;
pub const EPOCH: u64 = 3;
pub const SEGMENT_ID: u64 = (EPOCH << 40) | 17;
pub const TIME_MS: u64 = 1_700_000_123_456;

pub fn fixtures_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

pub fn blkptr() -> BlockPtr {
    BlockPtr {
        segment_id: SEGMENT_ID,
        offset_bytes: 64,
        physical_bytes: 4096,
        checksum: 0x1122_3344_5566_7788,
        birth_txg: TXG,
        compression: Compression::Lz4 as u8,
        logical_bytes: 4096,
    }
}

fn tree(tree_id: u32, levels: u8, page_tag: u32, offset_bytes: u32) -> TreeRef {
    TreeRef {
        tree_id,
        levels,
        top: BlockPtr { offset_bytes, physical_bytes: 900, logical_bytes: 10_272, ..blkptr() },
        page_tag,
    }
}

fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// A root with something in every field: log and cache vdevs, a volume, its snapshot and a
/// clone of the snapshot, pool and volume properties, space carried to the next txg.
pub fn root() -> Root {
    Root {
        pool_guid: POOL_GUID,
        pool_name: "tank".into(),
        txg: TXG,
        epoch: EPOCH,
        time_ms: TIME_MS,
        put_id: 0xaaaa_bbbb_cccc_dddd_eeee_ffff_0000_1111,
        holder: Holder {
            hostname: "host-a".into(),
            pid: 4242,
            import_id: 0x5555_6666_7777_8888_9999_0000_1111_2222,
            since_ms: TIME_MS - 60_000,
            active: true,
        },
        next_segment_counter: 18,
        next_volume_id: 4,
        space: tree(SPACE_TREE_ID, 2, SPACE_TREE_ID, 20_000),
        totals: SpaceTotals {
            logical_bytes: 8 << 20,
            physical_bytes: 5 << 20,
            live_bytes: 4 << 20,
        },
        space_carry: vec![(SEGMENT_ID, -4096), (SEGMENT_ID - 1, 10_272)],
        props: props(&[("compression", "lz4"), ("multihost", "off")]),
        vdevs: vec![
            VdevEntry {
                role: VdevRole::Log,
                mirror: true,
                guid: 0x10,
                paths: vec!["/dev/nvme0n1p1".into(), "/dev/nvme1n1p1".into()],
            },
            VdevEntry {
                role: VdevRole::Cache,
                mirror: false,
                guid: 0x20,
                paths: vec!["/var/lib/fardisk/cache0".into()],
            },
        ],
        volumes: vec![
            VolumeEntry {
                id: 1,
                name: "pg".into(),
                size_bytes: 8 << 30,
                created_txg: 2,
                tree: tree(1, 3, 1, 30_000),
                allocated_blocks: 1024,
                props: props(&[("volblocksize", "4096")]),
                origin: None,
            },
            VolumeEntry {
                id: 3,
                name: "pg-clone".into(),
                size_bytes: 8 << 30,
                created_txg: 40,
                tree: tree(3, 3, 1, 31_000),
                allocated_blocks: 10,
                props: BTreeMap::new(),
                origin: Some(2),
            },
        ],
        snapshots: vec![SnapshotEntry {
            id: 2,
            volume_id: 1,
            name: "before-upgrade".into(),
            txg: 39,
            time_ms: TIME_MS - 30_000,
            size_bytes: 8 << 30,
            tree: tree(2, 3, 1, 29_000),
            allocated_blocks: 1000,
        }],
        free_queue: Vec::new(),
        destroying: Vec::new(),
    }
}

/// The free queue of the version 3 fixture: a trimmed level-1 subtree of volume 1 (its leaves
/// charged to the volume) and the top page of a rolled-back map, both held up to txg 39.
pub fn free_queue() -> Vec<FreeEntry> {
    let page = |offset_bytes| BlockPtr {
        offset_bytes,
        physical_bytes: 900,
        logical_bytes: 10_272,
        ..blkptr()
    };
    vec![
        FreeEntry {
            page_tag: 1,
            level: 1,
            index: 5,
            ptr: page(32_000),
            after_txg: 39,
            volume_id: 1,
        },
        FreeEntry {
            page_tag: 1,
            level: 2,
            index: 0,
            ptr: page(33_000),
            after_txg: 39,
            volume_id: 0,
        },
    ]
}

/// `root()` with frees pending: a version 3 root.
pub fn root_v3() -> Root {
    Root { free_queue: free_queue(), ..root() }
}

/// What the version 4 fixture destroys: snapshot 2 of volume 1 half-way (its cursor past the
/// first 65,536 blocks), and behind it the former map of volume 1, rolled back meanwhile, at 0.
pub fn destroying() -> Vec<DestroyingTree> {
    vec![
        DestroyingTree {
            volume_id: 1,
            txg: TXG,
            tree: tree(2, 3, 1, 29_000),
            floor_txg: 0,
            origin: None,
            cursor_block: 65_536,
        },
        DestroyingTree {
            volume_id: 1,
            txg: TXG,
            tree: tree(5, 3, 1, 34_000),
            floor_txg: 12,
            origin: Some(4),
            cursor_block: 0,
        },
    ]
}

/// `root_v3()` with trees being destroyed: a version 4 root.
pub fn root_v4() -> Root {
    Root { destroying: destroying(), snapshots: Vec::new(), ..root_v3() }
}

/// The root's body ends in the trees being destroyed (`u32 count`, 81-byte entries) before the
/// checksum.
fn root_v4_damaged() -> Vec<Fixture> {
    let v3 = Root { destroying: Vec::new(), ..root_v4() }.encode();
    let mut empty = put_u32(v3[..v3.len() - 8].to_vec(), 8, 4);
    empty.extend_from_slice(&0u32.to_le_bytes());
    empty.extend_from_slice(&[0u8; 8]);
    // The last tree's cursor (the last 8 bytes before the checksum) past its 2^24 blocks.
    let mut past_end = root_v4().encode();
    let at = past_end.len() - 8 - 8;
    past_end[at..at + 8].copy_from_slice(&(1u64 << 30).to_le_bytes());
    vec![
        Fixture::new("root-v4.no-trees.bin", reseal_tail(empty)),
        Fixture::new("root-v4.cursor-past-end.bin", reseal_tail(past_end)),
    ]
}

/// The root's body ends in the free queue (`u32 count`, 65-byte entries) before the checksum.
fn root_v3_damaged() -> Vec<Fixture> {
    let v2 = root().encode();
    let mut empty = put_u32(v2[..v2.len() - 8].to_vec(), 8, 3);
    empty.extend_from_slice(&0u32.to_le_bytes());
    empty.extend_from_slice(&[0u8; 8]);
    let good = root_v3().encode();
    // The last entry's after_txg (8 bytes before its volume id, 12 before the checksum) set to
    // its pointer's birth txg: a subtree held as a whole is not work, it is damage.
    let at = good.len() - 8 - 4 - 8;
    let mut held = good.clone();
    held[at..at + 8].copy_from_slice(&TXG.to_le_bytes());
    vec![
        Fixture::new("root-v3.empty-queue.bin", reseal_tail(empty)),
        Fixture::new("root-v3.held-entry.bin", reseal_tail(held)),
    ]
}

/// `root()` as a version 1 root (written before snapshots existed) would hold it: no page tags,
/// no clone origins, no snapshots. Today's encoder writes version 2 only, so these bytes are
/// made field by field; the decoder must still open them.
pub fn root_v1_bytes() -> Vec<u8> {
    let r = root();
    let put_tree = |w: &mut Writer, t: &TreeRef| {
        w.u32(t.tree_id).u8(t.levels);
        t.top.encode(w);
    };
    let put_props = |w: &mut Writer, p: &BTreeMap<String, String>| {
        w.u16(p.len() as u16);
        for (k, v) in p {
            w.str(k).str(v);
        }
    };
    let mut w = Writer::default();
    w.bytes(b"FDROOT01").u32(1).u32(0).u128(r.pool_guid).str(&r.pool_name);
    w.u64(r.txg).u64(r.epoch).u64(r.time_ms).u128(r.put_id);
    let h = &r.holder;
    w.str(&h.hostname).u32(h.pid).u128(h.import_id).u64(h.since_ms).u8(h.active as u8);
    w.u64(r.next_segment_counter).u32(r.next_volume_id);
    put_tree(&mut w, &r.space);
    w.u64(r.totals.logical_bytes).u64(r.totals.physical_bytes).u64(r.totals.live_bytes);
    w.u32(r.space_carry.len() as u32);
    for (segment, delta) in &r.space_carry {
        w.u64(*segment).u64(*delta as u64);
    }
    put_props(&mut w, &r.props);
    w.u16(r.vdevs.len() as u16);
    for v in &r.vdevs {
        w.str(v.role.name()).u8(v.mirror as u8).u64(v.guid).u16(v.paths.len() as u16);
        for p in &v.paths {
            w.str(p);
        }
    }
    let original = &r.volumes[0];
    w.u32(1).u32(original.id).str(&original.name).u64(original.size_bytes);
    w.u64(original.created_txg);
    put_tree(&mut w, &original.tree);
    w.u64(original.allocated_blocks);
    put_props(&mut w, &original.props);
    w.seal();
    w.buf
}

/// Logical data blocks of the segment fixture: incompressible, and compressible.
pub fn data_block(seed: u64, compressible: bool) -> Vec<u8> {
    let mut block = vec![0u8; 4096];
    if compressible {
        for (i, b) in block.iter_mut().enumerate() {
            *b = (i / 64) as u8;
        }
    } else {
        Rng::new(seed).fill(&mut block);
    }
    block
}

/// A leaf page of volume 1: slot 0 and slot 5 point at blocks, the rest are holes.
pub fn map_page_slots() -> Vec<Slot> {
    let mut slots = vec![[0u8; SLOT_BYTES]; FANOUT];
    slots[0] = blkptr().to_bytes();
    slots[5] = BlockPtr { offset_bytes: 4160, compression: 0, ..blkptr() }.to_bytes();
    slots
}

/// A level-1 page of volume 1 with leaf hints (version 2): slots 0 and 3 point at leaves in
/// segment `SEGMENT_ID`; leaf 0's blocks were written to segment `SEGMENT_ID + 1` (its first two
/// windows hinted), leaf 3's to `SEGMENT_ID + 2` (its last window); other hints none.
pub fn hinted_page_parts() -> (Vec<Slot>, Vec<LeafHint>) {
    let mut slots = vec![[0u8; SLOT_BYTES]; FANOUT];
    slots[0] = BlockPtr { logical_bytes: 10_272, ..blkptr() }.to_bytes();
    slots[3] = BlockPtr { offset_bytes: 8_256, logical_bytes: 10_272, ..blkptr() }.to_bytes();
    let mut hints = vec![LeafHint::NONE; FANOUT];
    hints[0].segment_id = SEGMENT_ID + 1;
    hints[0].windows[0] = HintWindow { offset_bytes: 64, span_bytes: 131_072 };
    hints[0].windows[1] = HintWindow { offset_bytes: 131_136, span_bytes: 4_096 };
    hints[3].segment_id = SEGMENT_ID + 2;
    hints[3].windows[7] = HintWindow { offset_bytes: 1_048_640, span_bytes: 70_000 };
    (slots, hints)
}

pub fn hinted_page() -> Vec<u8> {
    let (slots, hints) = hinted_page_parts();
    encode_page_hinted(1, 1, 0, TXG, &slots, &hints)
}

/// A leaf page of the space table: segments 1 and 2 (epoch 0), one partly live, one freed.
pub fn space_slots() -> Vec<(usize, SegmentSpace)> {
    vec![
        (
            1,
            SegmentSpace {
                written_bytes: 65_536,
                live_bytes: 40_960,
                created_txg: 7,
                freed_txg: 0,
            },
        ),
        (2, SegmentSpace { written_bytes: 8_192, live_bytes: 0, created_txg: 8, freed_txg: 41 }),
    ]
}

pub fn space_page() -> Vec<u8> {
    let mut slots = vec![[0u8; SLOT_BYTES]; FANOUT];
    for (i, s) in space_slots() {
        slots[i] = s.to_slot();
    }
    encode_page(SPACE_TREE_ID, 0, 0, TXG, &slots)
}

/// The segment: an incompressible data block stored as is, an lz4 and a zstd data block, and
/// the map page above as a page block.
pub fn segment() -> Vec<u8> {
    let mut b = SegmentBuilder::new(POOL_GUID, SEGMENT_ID, TXG);
    b.add(BlockOwner::Data { tree_id: 1, block: 0 }, &data_block(1, false), Compression::Off);
    b.add(BlockOwner::Data { tree_id: 1, block: 5 }, &data_block(2, true), Compression::Lz4);
    b.add(BlockOwner::Data { tree_id: 1, block: 6 }, &data_block(3, true), Compression::Zstd);
    let page = encode_page(1, 0, 0, TXG, &map_page_slots());
    b.add(BlockOwner::Page { tree_id: 1, level: 0, index: 0 }, &page, Compression::Off);
    b.finish().0
}

pub fn lease() -> LeaseRecord {
    LeaseRecord {
        pool_guid: POOL_GUID,
        import_id: 0x5555_6666_7777_8888_9999_0000_1111_2222,
        epoch: EPOCH,
        n: 12,
        lease_ms: 20_000,
        time_ms: TIME_MS,
        hostname: "host-a".into(),
        flags: 0,
    }
}

pub fn history_event() -> HistoryEvent {
    HistoryEvent {
        time_ms: TIME_MS,
        txg: TXG,
        host: "host-a".into(),
        event: "fardisk volume create tank/pg 8G".into(),
    }
}

/// A fenced writer's held records file: a write, a trim and a zeroing of volume 1 (`pg`).
pub fn held_records() -> HeldRecords {
    let rec = |seq, kind, offset_bytes, length_bytes, data: Vec<u8>| HeldRecord {
        seq,
        record: LogRecord {
            txg: TXG + 1,
            volume_id: 1,
            kind,
            offset_bytes,
            length_bytes,
            data: data.into(),
        },
    };
    HeldRecords {
        pool_guid: POOL_GUID,
        import_id: 0x5555_6666_7777_8888_9999_0000_1111_2222,
        epoch: EPOCH,
        published_txg: TXG,
        open_txg: TXG + 1,
        time_ms: TIME_MS,
        pool_name: "tank".into(),
        hostname: "host-a".into(),
        reason: "fenced: epoch 4 seen in leases/13".into(),
        volumes: [(1, "pg".to_string())].into_iter().collect(),
        records: vec![
            rec(7, RecordKind::Write, 8192, 4096, data_block(4, false)),
            rec(8, RecordKind::Trim, 1 << 20, 65_536, Vec::new()),
            rec(9, RecordKind::WriteZeroes, 2 << 20, 4096, Vec::new()),
        ],
    }
}

/// (volume id, region index, demand reads), in volume order as `save_hot_set` writes them.
pub fn hot_regions() -> Vec<(u32, u64, u32)> {
    vec![(1, 0, 9), (1, 7, 3), (3, 2, 2)]
}

pub fn encryption_key() -> EncryptionKey {
    let mut bytes = [0u8; 32];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = i as u8 * 7 + 1;
    }
    EncryptionKey::from_bytes(bytes)
}

/// Nonces for the encrypted fixtures (stored objects get random ones).
pub fn nonces(seed: u64, count: usize) -> Vec<[u8; 12]> {
    let rng = Rng::new(seed);
    (0..count)
        .map(|_| {
            let mut n = [0u8; 12];
            rng.fill(&mut n);
            n
        })
        .collect()
}

/// 5,000 bytes: two chunks, the second padded.
pub fn encrypted_plain_two_chunks() -> Vec<u8> {
    (0..5000u32).map(|i| (i % 251) as u8).collect()
}

/// Replaces the xxh3 trailer of a sealed structure (last 8 bytes) after an edit, so the check
/// that refuses it is the one the damage is about (magic, version), not the checksum.
fn reseal_tail(mut bytes: Vec<u8>) -> Vec<u8> {
    let body = bytes.len() - 8;
    let sum = checksum64(&bytes[..body]);
    bytes[body..].copy_from_slice(&sum.to_le_bytes());
    bytes
}

/// Reseals an embedded header checksum at `sum_at` covering `0..sum_at`.
fn reseal_at(mut bytes: Vec<u8>, sum_at: usize) -> Vec<u8> {
    let sum = checksum64(&bytes[..sum_at]);
    bytes[sum_at..sum_at + 8].copy_from_slice(&sum.to_le_bytes());
    bytes
}

fn put_u32(mut bytes: Vec<u8>, at: usize, v: u32) -> Vec<u8> {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
    bytes
}

fn put_u16(mut bytes: Vec<u8>, at: usize, v: u16) -> Vec<u8> {
    bytes[at..at + 2].copy_from_slice(&v.to_le_bytes());
    bytes
}

fn wrong_magic(bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out[..8].copy_from_slice(b"FDXXXX00");
    out
}

fn truncated(bytes: &[u8]) -> Vec<u8> {
    bytes[..bytes.len() - 1].to_vec()
}

/// A good fixture and its damaged variants: flipped bit, truncated, wrong magic, wrong version
/// (the last two resealed so that the magic or version check is what refuses them).
fn sealed_family(name: &str, good: Vec<u8>, flip_at: usize, version_at: usize) -> Vec<Fixture> {
    vec![
        Fixture::new(format!("{name}.flipped-bit.bin"), flip_bit(&good, flip_at, 3)),
        Fixture::new(format!("{name}.truncated.bin"), truncated(&good)),
        Fixture::new(format!("{name}.wrong-magic.bin"), reseal_tail(wrong_magic(&good))),
        Fixture::new(
            format!("{name}.wrong-version.bin"),
            reseal_tail(put_u32(good.clone(), version_at, 99)),
        ),
        Fixture::new(format!("{name}.bin"), good),
    ]
}

pub struct Fixture {
    pub name: String,
    pub bytes: Vec<u8>,
}

impl Fixture {
    fn new(name: impl Into<String>, bytes: Vec<u8>) -> Fixture {
        Fixture { name: name.into(), bytes }
    }
}

/// Every engine fixture, made by today's encoders from the inputs above.
pub fn all() -> Vec<Fixture> {
    let mut out = Vec::new();
    out.extend(sealed_family("root-v2", root().encode(), 30, 8));
    out.push(Fixture::new("root-v1.bin", root_v1_bytes()));
    out.extend(sealed_family("root-v3", root_v3().encode(), 30, 8));
    out.extend(root_v3_damaged());
    out.extend(sealed_family("root-v4", root_v4().encode(), 30, 8));
    out.extend(root_v4_damaged());
    out.extend(sealed_family("head", encode_head(TXG), 17, 8));
    let seg = segment();
    let footer_at = seg.len() - 32 - 4 * 40;
    out.push(Fixture::new("segment.flipped-header-bit.bin", flip_bit(&seg, 33, 0)));
    out.push(Fixture::new("segment.flipped-footer-bit.bin", flip_bit(&seg, footer_at + 9, 5)));
    out.push(Fixture::new("segment.flipped-data-bit.bin", flip_bit(&seg, 64 + 100, 2)));
    out.push(Fixture::new("segment.truncated.bin", truncated(&seg)));
    out.push(Fixture::new("segment.wrong-magic.bin", reseal_at(wrong_magic(&seg), 56)));
    out.push(Fixture::new("segment.wrong-version.bin", reseal_at(put_u32(seg.clone(), 8, 2), 56)));
    out.push(Fixture::new("segment.bin", seg));
    let ptr = blkptr().to_bytes().to_vec();
    out.push(Fixture::new("blkptr.truncated.bin", truncated(&ptr)));
    let mut bad_compression = ptr.clone();
    bad_compression[32] = 7;
    out.push(Fixture::new("blkptr.unknown-compression.bin", bad_compression));
    out.push(Fixture::new("blkptr.bin", ptr));
    let page = encode_page(1, 0, 0, TXG, &map_page_slots());
    out.push(Fixture::new("map-page.flipped-level-bit.bin", flip_bit(&page, 10, 0)));
    out.push(Fixture::new("map-page.flipped-slot-bit.bin", flip_bit(&page, 32 + 9, 1)));
    out.push(Fixture::new("map-page.truncated.bin", truncated(&page)));
    out.push(Fixture::new("map-page.wrong-magic.bin", wrong_magic(&page)));
    out.push(Fixture::new("map-page.wrong-version.bin", put_u16(page.clone(), 8, 2)));
    out.push(Fixture::new("map-page.bin", page));
    let hinted = hinted_page();
    out.push(Fixture::new("map-page-hinted.truncated.bin", truncated(&hinted)));
    out.push(Fixture::new("map-page-hinted.at-level-0.bin", flip_bit(&hinted, 10, 0)));
    out.push(Fixture::new("map-page-hinted.wrong-version.bin", put_u16(hinted.clone(), 8, 3)));
    out.push(Fixture::new("map-page-hinted.bin", hinted));
    out.push(Fixture::new("space-page.bin", space_page()));
    out.extend(sealed_family("lease", lease().encode(), 50, 8));
    out.extend(sealed_family("history-event", encode_event(&history_event()), 40, 8));
    out.extend(sealed_family("hotset", encode_hot_set(TXG, &hot_regions()), 30, 8));
    out.extend(encrypted_family());
    out.extend(held_family());
    out
}

/// A held records file seals its header and each record separately, so its damaged variants
/// are made here rather than by `sealed_family` (which reseals a tail checksum).
fn held_family() -> Vec<Fixture> {
    let good = held_records().encode();
    vec![
        Fixture::new("held-records.flipped-header-bit.bin", flip_bit(&good, 20, 3)),
        Fixture::new("held-records.flipped-data-bit.bin", flip_bit(&good, good.len() - 200, 1)),
        Fixture::new("held-records.truncated.bin", truncated(&good)),
        Fixture::new("held-records.wrong-magic.bin", wrong_magic(&good)),
        Fixture::new("held-records.wrong-version.bin", put_u32(good.clone(), 8, 99)),
        Fixture::new("held-records.bin", good),
    ]
}

fn encrypted_family() -> Vec<Fixture> {
    let key = encryption_key();
    let head = seal_with_nonces(&key, "head", &encode_head(TXG), &nonces(1, 1)).expect("seal");
    let two = encrypted_plain_two_chunks();
    let seg_key = fardisk_engine::segment::segment_key(segment_id(EPOCH, 17));
    let segment = seal_with_nonces(&key, &seg_key, &two, &nonces(2, 2)).expect("seal");
    vec![
        Fixture::new("encrypted-head.flipped-chunk-bit.bin", flip_bit(&head, 40 + 12 + 5, 4)),
        Fixture::new("encrypted-head.flipped-header-bit.bin", flip_bit(&head, 25, 0)),
        Fixture::new("encrypted-head.truncated.bin", truncated(&head)),
        Fixture::new("encrypted-head.wrong-magic.bin", reseal_at(wrong_magic(&head), 32)),
        Fixture::new(
            "encrypted-head.wrong-version.bin",
            reseal_at(put_u32(head.clone(), 8, 2), 32),
        ),
        Fixture::new("encrypted-head.bin", head),
        Fixture::new("encrypted-segment.bin", segment),
    ]
}
