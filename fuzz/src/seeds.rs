//! Valid encodings, made by the real encoders, that each target's corpus starts from, and the
//! fixed identities (pool, segment, vdev, key) the targets decode them against.

use bytes::Bytes;
use fardisk_arc::fuzz_api::{encode_hot_set, sample_log_block, L2Label, L2Place};
use fardisk_arc::BlockKey;
use fardisk_engine::blkptr::BlockPtr;
use fardisk_engine::blockmap::{encode_page, encode_page_hinted, LeafHint, TreeRef, FANOUT, SLOT_BYTES};
use fardisk_engine::compress::{compress, Compression};
use fardisk_engine::destroying::DestroyingTree;
use fardisk_engine::objstore::{EncryptedStore, EncryptionKey, PutMode, Store};
use fardisk_engine::root::{encode_head, Holder, Root, SnapshotEntry, VdevEntry, VolumeEntry};
use fardisk_engine::segment::{BlockOwner, SegmentBuilder};
use fardisk_engine::space::SpaceTotals;
use fardisk_slog::fuzz_api::{
    encode_block, encode_block_v1, encode_record, BlockContext, ChainPoint, DeviceLabel, LogHead,
    LogRecord, RecordKind, Role,
};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The pool and segment every segment seed names, and parse_segment is asked for.
pub const SEGMENT_POOL_GUID: u128 = 77;
pub const SEGMENT_ID: u64 = 1234;
/// The sequence number and chain value the record target expects of the first record.
pub const RECORD_SEQ: u64 = 42;
pub const RECORD_PREV_CHAIN: u64 = 9;
/// The vdev every slog block and head seed belongs to.
pub const SLOG_VDEV_GUID: u64 = 0x1111;
/// Where the L2ARC log-block seeds were written; the target reads them back from there.
pub const L2_POOL_GUID: u128 = 7;
pub const L2_DEVICE_GUID: u64 = 9;
pub const L2_SLOT_INDEX: u32 = 3;
pub const L2_BLOCK_BYTES: u32 = 8192;
/// The encryption key and object name of the envelope seeds.
pub const ENCRYPTION_KEY_BYTES: [u8; 32] = [7; 32];
pub const ENCRYPTED_OBJECT_KEY: &str = "segments/00000100000004d2";

pub fn l2_place() -> L2Place {
    L2Place::new(L2_POOL_GUID, L2_DEVICE_GUID, L2_SLOT_INDEX, L2_BLOCK_BYTES)
}

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

/// A root with `volumes` volumes (every other one a clone) and `snapshots` snapshots.
pub fn sample_root(seed: u64, volumes: u32, snapshots: u32) -> Root {
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
            active: seed % 2 == 0,
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
        volumes: (0..volumes)
            .map(|i| VolumeEntry {
                id: i + 1,
                name: format!("v{i}"),
                size_bytes: 1 << 30,
                created_txg: 3,
                tree: tree(i + 1, seed + i as u64),
                allocated_blocks: seed,
                props: BTreeMap::from([("volblocksize".to_string(), "4096".to_string())]),
                origin: if i % 2 == 1 { Some(50 + i) } else { None },
            })
            .collect(),
        snapshots: (0..snapshots)
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
        free_queue: Vec::new(),
        destroying: Vec::new(),
    }
}

pub fn roots() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = [(1, 0, 0), (2, 1, 0), (3, 2, 2), (4, 3, 1)]
        .iter()
        .map(|&(s, v, n)| sample_root(s, v, n).encode())
        .collect();
    // A version 4 root: a snapshot destroy half-way (its tree, floor, origin and cursor).
    let destroying = vec![DestroyingTree {
        volume_id: 1,
        txg: 900,
        tree: TreeRef { page_tag: 1, ..tree(60, 5) },
        floor_txg: 3,
        origin: Some(50),
        cursor_block: 65_536,
    }];
    out.push(Root { destroying, ..sample_root(5, 2, 1) }.encode());
    out
}

pub fn heads() -> Vec<Vec<u8>> {
    [0, 1, 12345, u64::MAX].iter().map(|&txg| encode_head(txg)).collect()
}

/// A segment of `blocks` data blocks (lz4, or stored when it does not pay) and one map page.
pub fn sample_segment(seed: u64, blocks: usize) -> Vec<u8> {
    let mut b = SegmentBuilder::new(SEGMENT_POOL_GUID, SEGMENT_ID, seed);
    for i in 0..blocks {
        let data: Vec<u8> =
            (0..512u32).map(|j| (seed as u8).wrapping_add((j % (i as u32 + 2)) as u8)).collect();
        b.add(BlockOwner::Data { tree_id: 1, block: i as u64 }, &data, Compression::Lz4);
    }
    b.add(BlockOwner::Page { tree_id: 1, level: 0, index: 0 }, &[9u8; 64], Compression::Off);
    b.finish().0
}

pub fn segments() -> Vec<Vec<u8>> {
    let empty = SegmentBuilder::new(SEGMENT_POOL_GUID, SEGMENT_ID, 1).finish().0;
    vec![empty, sample_segment(1, 1), sample_segment(2, 3)]
}

pub fn pages() -> Vec<Vec<u8>> {
    let mut slots = vec![[0u8; SLOT_BYTES]; FANOUT];
    let empty = encode_page(3, 0, 0, 9, &slots);
    slots[5] = ptr(5).to_bytes();
    slots[255] = ptr(255).to_bytes();
    // A level-1 page with the hints of the leaves its slots name (version 2).
    let mut hints = vec![LeafHint::NONE; FANOUT];
    let mut leaf = vec![[0u8; SLOT_BYTES]; FANOUT];
    leaf[0] = ptr(5).to_bytes();
    leaf[40] = ptr(5).to_bytes();
    hints[5] = LeafHint::of_leaf(&leaf);
    hints[255] = LeafHint::of_leaf(&slots);
    let hinted = encode_page_hinted(3, 1, 4, 9, &slots, &hints);
    vec![empty, encode_page(3, 0, 7, 9, &slots), encode_page(u32::MAX, 2, 1, 11, &slots), hinted]
}

pub fn blkptrs() -> Vec<Vec<u8>> {
    vec![
        BlockPtr::HOLE.to_bytes().to_vec(),
        ptr(1).to_bytes().to_vec(),
        ptr(u64::MAX).to_bytes().to_vec(),
    ]
}

/// Programs for the codec target: [op count n][n opcodes][bytes the opcodes read] (see
/// fuzz_targets/engine_codec.rs for the opcodes).
pub fn codec_programs() -> Vec<Vec<u8>> {
    let mut all_widths = vec![8u8, 0, 1, 2, 3, 4, 5, 0x36, 7];
    all_widths.extend_from_slice(b"abcdefghijklmnopqrstuvwxyz0123456789");
    let mut string = vec![2u8, 5, 5];
    string.extend_from_slice(b"\x05\x00hello\x00\x00");
    let mut sealed = vec![1u8, 7];
    let mut w = fardisk_engine::codec::Writer::default();
    w.u64(0x1122_3344).str("sealed").seal();
    sealed.extend_from_slice(&w.buf);
    vec![all_widths, string, sealed]
}

/// Prefix of every engine_encrypted input: the ranged read to try (u32 start, u32 length).
pub const ENCRYPTED_RANGE_PREFIX_BYTES: usize = 8;

pub fn encrypted_objects() -> Vec<Vec<u8>> {
    let inner = Arc::new(crate::MemStore::default());
    let enc =
        EncryptedStore::new(inner.clone(), &EncryptionKey::from_bytes(ENCRYPTION_KEY_BYTES), 1);
    let mut out = Vec::new();
    for (len, start, want) in
        [(0usize, 0u32, 0u32), (100, 10, 50), (4096, 4000, 96), (5000, 4090, 10)]
    {
        let plain: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        crate::block_on(enc.put(ENCRYPTED_OBJECT_KEY, Bytes::from(plain), PutMode::Overwrite))
            .expect("seal seed");
        let sealed = crate::block_on(inner.get(ENCRYPTED_OBJECT_KEY)).expect("sealed seed");
        let mut seed = Vec::with_capacity(ENCRYPTED_RANGE_PREFIX_BYTES + sealed.len());
        seed.extend_from_slice(&start.to_le_bytes());
        seed.extend_from_slice(&want.to_le_bytes());
        seed.extend_from_slice(&sealed);
        out.push(seed);
    }
    out
}

/// decompress inputs: [algorithm u8][logical length u16 LE][stored bytes].
pub fn compressed_blocks() -> Vec<Vec<u8>> {
    let logical: Vec<u8> = (0..4096u32).map(|i| (i / 7 % 13) as u8).collect();
    let mut out = Vec::new();
    for algo in [Compression::Off, Compression::Lz4, Compression::Zstd] {
        let (used, stored) = compress(algo, &logical);
        let mut seed = vec![used as u8];
        seed.extend_from_slice(&(logical.len() as u16).to_le_bytes());
        seed.extend_from_slice(&stored);
        out.push(seed);
    }
    out
}

fn slog_records() -> Vec<LogRecord> {
    vec![
        LogRecord {
            txg: 9,
            volume_id: 1,
            kind: RecordKind::Write,
            offset_bytes: 4096,
            length_bytes: 5,
            data: Bytes::from_static(b"hello"),
        },
        LogRecord {
            txg: 9,
            volume_id: 1,
            kind: RecordKind::Trim,
            offset_bytes: 0,
            length_bytes: 4096,
            data: Bytes::new(),
        },
        LogRecord {
            txg: 10,
            volume_id: 2,
            kind: RecordKind::WriteZeroes,
            offset_bytes: 8192,
            length_bytes: 512,
            data: Bytes::new(),
        },
    ]
}

/// Runs of records starting at RECORD_SEQ, chained from RECORD_PREV_CHAIN.
pub fn slog_record_runs() -> Vec<Vec<u8>> {
    let records = slog_records();
    let mut out = Vec::new();
    for n in 1..=records.len() {
        let len: u64 = records[..n].iter().map(|r| r.encoded_len_bytes()).sum();
        let mut buf = vec![0u8; len as usize];
        let (mut at, mut chain) = (0usize, RECORD_PREV_CHAIN);
        for (i, r) in records[..n].iter().enumerate() {
            chain = encode_record(&mut buf, at, RECORD_SEQ + i as u64, r, chain);
            at += r.encoded_len_bytes() as usize;
        }
        out.push(buf);
    }
    out
}

pub fn slog_context(block_seq: u64) -> BlockContext {
    BlockContext {
        vdev_guid: SLOG_VDEV_GUID,
        point: ChainPoint { offset_bytes: 16384, block_seq, prev_chain: 0x2222 },
        release_seq: 3,
        writer_epoch: 2,
        epoch_first_seq: 1,
        // Seeds in the smallest unit (version 2 blocks of 512-byte sectors).
        unit_bytes: 512,
    }
}

pub fn slog_blocks() -> Vec<Vec<u8>> {
    let records = slog_records();
    let big = LogRecord {
        txg: 11,
        volume_id: 3,
        kind: RecordKind::Write,
        offset_bytes: 0,
        length_bytes: 4200,
        data: Bytes::from(vec![0x5a; 4200]),
    };
    let refs: Vec<&LogRecord> = records.iter().collect();
    vec![
        encode_block(&slog_context(7), 40, &refs).0.to_vec(),
        // As fardisk wrote blocks before format version 2 (still read at replay).
        encode_block_v1(&slog_context(7), 40, &refs).0.to_vec(),
        encode_block(&slog_context(1), 1, &[]).0.to_vec(),
        encode_block(&slog_context(8), 43, &[&big, &records[0]]).0.to_vec(),
        // The last sequence number there is: one more record must be refused, not overflow.
        encode_block(&slog_context(9), u64::MAX, &[&records[1]]).0.to_vec(),
    ]
}

pub fn slog_heads() -> Vec<Vec<u8>> {
    let head = |generation| LogHead {
        generation,
        vdev_guid: SLOG_VDEV_GUID,
        point: slog_context(7).point,
        release_seq: 3,
        writer_epoch: 2,
        epoch_first_seq: 1,
    };
    // Only the first 128 bytes of a 4 KiB slot carry data; the rest must merely be there.
    vec![head(1).encode()[..128].to_vec(), head(u64::MAX).encode().to_vec()]
}

pub fn slog_labels() -> Vec<Vec<u8>> {
    let label = |role, name: &str, leg_index| DeviceLabel {
        pool_name: name.into(),
        pool_guid: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
        vdev_guid: SLOG_VDEV_GUID,
        role,
        leg_index,
        leg_count: 2,
        ring_start_bytes: 16384,
        ring_end_bytes: 1 << 20,
    };
    vec![
        label(Role::Log, "tank", 0).encode().expect("label").to_vec(),
        label(Role::Cache, &"p".repeat(64), 1).encode().expect("label").to_vec(),
    ]
}

/// Both 4 KiB label sectors of a cache device.
pub fn l2_labels() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for label in
        [L2Label::new(0x1234_5678_9abc_def0, 42, 1 << 20, 100), L2Label::new(1, 2, 8192, 2)]
    {
        let mut sectors = vec![0u8; 8192];
        sectors[..64].copy_from_slice(&label.encode());
        sectors[4096..4096 + 64].copy_from_slice(&label.encode());
        out.push(sectors);
    }
    out
}

pub fn l2_log_blocks() -> Vec<Vec<u8>> {
    let place = l2_place();
    let (a, b) = (vec![1u8; 1000], vec![2u8; 500]);
    vec![
        sample_log_block(&place, 1, &[]),
        sample_log_block(&place, 5, &[(1, 0, &a[..]), (1, 4096, &b[..])]),
        sample_log_block(&place, u64::MAX, &[(u64::MAX, u32::MAX, &b[..10])]),
    ]
}

pub fn hot_sets() -> Vec<Vec<u8>> {
    let keys: Vec<BlockKey> = (0..20u64).map(|i| BlockKey::new(i * 7, (i * 4096) as u32)).collect();
    vec![encode_hot_set(&[]).expect("hot set"), encode_hot_set(&keys).expect("hot set")]
}

/// Trees for engine_map_tree: [levels][slot index u64][compact pages] (see that target).
pub fn map_trees() -> Vec<Vec<u8>> {
    // A slot pointing at page number `page` (1-based) of the input.
    let child = |page: u64| BlockPtr { segment_id: page, ..ptr(page) }.to_bytes();
    let page = |level: u8, index: u16, slots: &[(u8, [u8; SLOT_BYTES])]| {
        let mut p = vec![level];
        p.extend_from_slice(&index.to_le_bytes());
        p.push(slots.len() as u8);
        for (pos, slot) in slots {
            p.push(*pos);
            p.extend_from_slice(slot);
        }
        p
    };
    let tree = |levels: u8, slot_index: u64, pages: &[Vec<u8>]| {
        let mut t = vec![levels];
        t.extend_from_slice(&slot_index.to_le_bytes());
        pages.iter().for_each(|p| t.extend_from_slice(p));
        t
    };
    let leaf = page(0, 0, &[(0, ptr(10).to_bytes()), (7, ptr(11).to_bytes())]);
    let leaf_high = page(0, 257, &[(1, ptr(12).to_bytes())]);
    vec![
        tree(1, 7, &[leaf.clone()]),
        tree(2, 7, &[page(1, 0, &[(0, child(2))]), leaf.clone()]),
        tree(3, 0x1_0101, &[page(2, 0, &[(1, child(2))]), page(1, 1, &[(1, child(3))]), leaf_high]),
    ]
}
