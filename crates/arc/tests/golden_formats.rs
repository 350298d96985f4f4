//! Golden fixtures of the caches' stored formats (docs/format/l2arc.md): the cache-device label,
//! an L2ARC log block (header, entry table and data) and the hot-set blob. The committed bytes in
//! `tests/fixtures/` must be what today's encoders write from the inputs below, today's decoders
//! must read them back to those inputs, and the damaged ones must be refused.
//! `tests/fixtures/README.md` says what each file is; a format change needs a new version and new
//! fixtures, never an edited one.
//!
//! The cache-device format is at version 2 (`l2-*-v2.bin`). The version-1 fixtures (`l2-label.bin`,
//! `l2-log-block.bin` and their damaged copies) stay: a version-1 device is recognised by its
//! label (so `destroy` still clears it), its log blocks are foreign, and opening it formats it
//! again as an empty cache; the tests below pin that.
//!
//! `FARDISK_REGENERATE_FIXTURES=1 cargo test -p fardisk-arc --test golden_formats -- --ignored
//! regenerate_fixtures` writes fixtures that do not exist yet; it never overwrites one.

use fardisk_arc::fuzz_api::{
    cache_label_pool_guid, decode_hot_set, encode_hot_set, sample_log_block, HotSetError, L2Label,
    L2LogBlock, L2Place, L2Reject,
};
use fardisk_arc::{BlockKey, L2Arc, L2ArcConfig, ManualClock};
use fardisk_common::golden::{flip_bit, Fixtures};
use fardisk_common::le::{checksum64, checksum64_parts};

const POOL_GUID: u128 = 0x1234_5678_9abc_def0_1122_3344_5566_7788;
const DEVICE_GUID: u64 = 0x0ddb_a11c_afe5_0001;
/// Log blocks of the version-2 fixtures: one unit of metadata and three data units (one bucket),
/// as many as the three cached blocks need.
const BLOCK_BYTES: u32 = 16384;
/// Log blocks of the version-1 fixtures.
const BLOCK_BYTES_V1: u32 = 8192;
const SLOT_INDEX: u32 = 3;
const SEQUENCE: u64 = 5;

fn fixtures() -> Fixtures {
    Fixtures::new(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"))
}

fn read(name: &str) -> Vec<u8> {
    fixtures().read(name)
}

fn label() -> L2Label {
    L2Label::new(POOL_GUID, DEVICE_GUID, BLOCK_BYTES, 100)
}

fn place() -> L2Place {
    L2Place::new(POOL_GUID, DEVICE_GUID, SLOT_INDEX, BLOCK_BYTES)
}

fn place_v1() -> L2Place {
    L2Place::new(POOL_GUID, DEVICE_GUID, SLOT_INDEX, BLOCK_BYTES_V1)
}

/// The cached blocks of the log block: (segment id, offset in the segment, bytes as stored).
fn cached() -> Vec<(u64, u32, Vec<u8>)> {
    vec![
        (0x0300_0000_0011, 0, (0..1000u32).map(|i| (i % 256) as u8).collect()),
        (0x0300_0000_0011, 4096, vec![0xab; 500]),
        (0x0300_0000_0012, 64, b"a block as stored, possibly compressed".to_vec()),
    ]
}

fn log_block() -> Vec<u8> {
    let blocks = cached();
    let refs: Vec<(u64, u32, &[u8])> = blocks.iter().map(|(s, o, d)| (*s, *o, &d[..])).collect();
    sample_log_block(&place(), SEQUENCE, &refs)
}

/// Keys of the hot-set blob: MFU first, then blocks read once, as the ARC lists them.
fn hot_keys() -> Vec<BlockKey> {
    vec![
        BlockKey::new(0x0300_0000_0011, 0),
        BlockKey::new(0x0300_0000_0011, 4096),
        BlockKey::new(7, 64),
    ]
}

fn with(mut bytes: Vec<u8>, at: usize, new: &[u8]) -> Vec<u8> {
    bytes[at..at + new.len()].copy_from_slice(new);
    bytes
}

fn reseal_label(bytes: Vec<u8>) -> Vec<u8> {
    let sum = checksum64(&bytes[..56]);
    with(bytes, 56, &sum.to_le_bytes())
}

/// The header checksum of log-block metadata covers bytes 0..56 and the entry table.
fn reseal_log_block(bytes: Vec<u8>) -> Vec<u8> {
    let table_end = 64 + 32 * cached().len();
    let sum = checksum64_parts(&[&bytes[..56], &bytes[64..table_end]]);
    with(bytes, 56, &sum.to_le_bytes())
}

fn reseal_hot_set(bytes: Vec<u8>) -> Vec<u8> {
    let sum = checksum64_parts(&[&bytes[..16], &bytes[24..]]);
    with(bytes, 16, &sum.to_le_bytes())
}

/// Where the first entry's data starts in the version-2 log block.
fn first_data_at(block: &[u8]) -> usize {
    let meta_len = L2LogBlock::meta_len(&block[..64], &place()).expect("header");
    let meta = L2LogBlock::decode(&block[..meta_len], &place()).expect("metadata");
    meta.entries(&place())[0].4 as usize
}

/// Every fixture today's encoders write. The version-1 cache-device fixtures are not here: no
/// encoder writes version 1 any more; they are read by the tests below as committed.
fn all() -> Vec<(&'static str, Vec<u8>)> {
    let label = label().encode().to_vec();
    let block = log_block();
    let hot = encode_hot_set(&hot_keys()).expect("hot set");
    let magic = b"FDXXXX00";
    let next_version = 3u32.to_le_bytes();
    let hot_version = 2u32.to_le_bytes();
    let data_at = first_data_at(&block);
    vec![
        ("l2-label-v2.flipped-bit.bin", flip_bit(&label, 20, 4)),
        ("l2-label-v2.truncated.bin", label[..63].to_vec()),
        ("l2-label-v2.wrong-magic.bin", reseal_label(with(label.clone(), 0, magic))),
        ("l2-label-v2.wrong-version.bin", reseal_label(with(label.clone(), 8, &next_version))),
        ("l2-label-v2.bin", label),
        ("l2-log-block-v2.flipped-entry-bit.bin", flip_bit(&block, 64 + 32 + 9, 0)),
        ("l2-log-block-v2.flipped-data-bit.bin", flip_bit(&block, data_at + 10, 7)),
        ("l2-log-block-v2.truncated.bin", block[..100].to_vec()),
        ("l2-log-block-v2.wrong-magic.bin", reseal_log_block(with(block.clone(), 0, magic))),
        (
            "l2-log-block-v2.wrong-version.bin",
            reseal_log_block(with(block.clone(), 8, &next_version)),
        ),
        ("l2-log-block-v2.bin", block),
        ("hot-set.flipped-bit.bin", flip_bit(&hot, 30, 1)),
        ("hot-set.truncated.bin", hot[..hot.len() - 1].to_vec()),
        ("hot-set.wrong-magic.bin", reseal_hot_set(with(hot.clone(), 0, magic))),
        ("hot-set.wrong-version.bin", reseal_hot_set(with(hot.clone(), 8, &hot_version))),
        ("hot-set.bin", hot),
    ]
}

#[test]
#[ignore = "writes missing fixtures; run with FARDISK_REGENERATE_FIXTURES=1"]
fn regenerate_fixtures() {
    fixtures().regenerate_missing(all());
}

#[test]
fn every_fixture_is_what_todays_encoders_write() {
    fixtures().assert_unchanged(all());
}

#[test]
fn label_fixture_decodes_and_damaged_labels_are_refused() {
    let bytes = read("l2-label-v2.bin");
    assert_eq!(bytes.len(), 64);
    assert_eq!(bytes[8..12], 2u32.to_le_bytes(), "format version 2");
    assert_eq!(L2Label::decode(&bytes), Ok(label()));
    let mut sectors = vec![0u8; 8192];
    sectors[..64].copy_from_slice(&read("l2-label-v2.flipped-bit.bin"));
    sectors[4096..4160].copy_from_slice(&bytes);
    assert_eq!(cache_label_pool_guid(&sectors), Some(POOL_GUID), "copy B rescues a bad copy A");
    for name in [
        "l2-label-v2.flipped-bit.bin",
        "l2-label-v2.truncated.bin",
        "l2-label-v2.wrong-magic.bin",
        "l2-label-v2.wrong-version.bin",
    ] {
        assert!(L2Label::decode(&read(name)).is_err(), "{name} accepted");
    }
}

#[test]
fn log_block_fixture_decodes_with_its_data() {
    let bytes = read("l2-log-block-v2.bin");
    assert_eq!(bytes.len(), BLOCK_BYTES as usize);
    assert_eq!(bytes[8..12], 2u32.to_le_bytes(), "format version 2");
    let meta_len = L2LogBlock::meta_len(&bytes[..64], &place()).expect("header");
    assert_eq!(meta_len, 64 + 32 * 3);
    let block = L2LogBlock::decode(&bytes[..meta_len], &place()).expect("metadata");
    assert_eq!(block.sequence(), SEQUENCE);
    let meta_area = L2LogBlock::meta_area_bytes(&place());
    assert_eq!(meta_area, 4096, "one unit of metadata");
    for ((segment_id, offset, len, checksum, at), (want_seg, want_off, data)) in
        block.entries(&place()).into_iter().zip(cached())
    {
        assert_eq!((segment_id, offset, len as usize), (want_seg, want_off, data.len()));
        assert!(at >= meta_area && at % 4096 == 0, "data on a unit boundary after the metadata");
        let stored = &bytes[at as usize..at as usize + len as usize];
        assert_eq!(stored, &data[..]);
        assert_eq!(checksum64(stored), checksum);
    }
    let other_slot = L2Place::new(POOL_GUID, DEVICE_GUID, SLOT_INDEX + 1, BLOCK_BYTES);
    assert_eq!(L2LogBlock::decode(&bytes[..meta_len], &other_slot), Err(L2Reject::Foreign));
    let reformatted = L2Place::new(POOL_GUID, DEVICE_GUID + 1, SLOT_INDEX, BLOCK_BYTES);
    assert_eq!(L2LogBlock::decode(&bytes[..meta_len], &reformatted), Err(L2Reject::Foreign));
}

#[test]
fn damaged_log_blocks_are_refused() {
    let meta = |name: &str| read(name)[..].to_vec();
    for name in ["l2-log-block-v2.flipped-entry-bit.bin", "l2-log-block-v2.wrong-version.bin"] {
        assert!(
            matches!(L2LogBlock::decode(&meta(name), &place()), Err(L2Reject::Corrupt(_))),
            "{name}"
        );
    }
    assert_eq!(
        L2LogBlock::decode(&meta("l2-log-block-v2.wrong-magic.bin"), &place()),
        Err(L2Reject::Empty),
        "a slot without the magic holds no block"
    );
    let short = read("l2-log-block-v2.truncated.bin");
    assert!(matches!(L2LogBlock::decode(&short, &place()), Err(L2Reject::Corrupt(_))));
    // Data is not under the header checksum: the entry's own data checksum refuses it, and only
    // that entry is lost.
    let bytes = read("l2-log-block-v2.flipped-data-bit.bin");
    let block = L2LogBlock::decode(&bytes[..160], &place()).expect("metadata intact");
    let bad: Vec<bool> = block
        .entries(&place())
        .into_iter()
        .map(|(_, _, len, sum, at)| checksum64(&bytes[at as usize..(at + len) as usize]) != sum)
        .collect();
    assert_eq!(bad, [true, false, false]);
}

#[test]
fn version_1_fixtures_are_recognised_and_never_indexed() {
    // The label: named pool and version, refused by the version-2 decoder.
    let v1 = read("l2-label.bin");
    assert_eq!(v1[8..12], 1u32.to_le_bytes());
    let err = L2Label::decode(&v1).expect_err("a version-1 label is not a version-2 label");
    assert!(err.contains("unsupported version 1"), "{err}");
    let v1_label = L2Label::new(POOL_GUID, DEVICE_GUID, BLOCK_BYTES_V1, 100);
    assert_eq!(L2Label::decode_either_any_version(&v1, &v1), Ok((v1_label, 1)));
    let mut sectors = vec![0u8; 8192];
    sectors[..64].copy_from_slice(&v1);
    sectors[4096..4160].copy_from_slice(&v1);
    assert_eq!(cache_label_pool_guid(&sectors), Some(POOL_GUID), "destroy still clears it");
    for name in ["l2-label.flipped-bit.bin", "l2-label.truncated.bin", "l2-label.wrong-magic.bin"] {
        assert!(L2Label::decode_either_any_version(&read(name), &read(name)).is_err(), "{name}");
    }
    // The label layout did not change between the versions: version 1's "wrong version" fixture
    // (a version-1 label stamped 2, checksum recomputed) is a valid version-2 label.
    assert_eq!(L2Label::decode(&read("l2-label.wrong-version.bin")), Ok(v1_label));

    // Log blocks: version 1 is foreign (never parsed), whatever damage follows the version.
    for name in [
        "l2-log-block.bin",
        "l2-log-block.flipped-entry-bit.bin",
        "l2-log-block.flipped-data-bit.bin",
        "l2-log-block.truncated.bin",
    ] {
        let bytes = read(name);
        assert_eq!(
            L2LogBlock::meta_len(&bytes[..64], &place_v1()),
            Err(L2Reject::Foreign),
            "{name}"
        );
        assert_eq!(L2LogBlock::decode(&bytes, &place_v1()), Err(L2Reject::Foreign), "{name}");
    }
    assert_eq!(
        L2LogBlock::decode(&read("l2-log-block.wrong-magic.bin"), &place_v1()),
        Err(L2Reject::Empty)
    );
    // A version-1 layout stamped 2 is not a version-2 block: its metadata size and entry places
    // do not match the layout.
    assert!(matches!(
        L2LogBlock::decode(&read("l2-log-block.wrong-version.bin"), &place_v1()),
        Err(L2Reject::Corrupt(_))
    ));
}

#[test]
fn a_version_1_device_is_formatted_again_as_an_empty_cache() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("cache-v1");
    // A device of this pool as version 1 left it: both label copies, a log block in slot 3.
    let slots = 100u64;
    let file = std::fs::File::create(&path).expect("create");
    file.set_len(8192 + slots * u64::from(BLOCK_BYTES_V1)).expect("size");
    let label = read("l2-label.bin");
    file.write_all_at(&label, 0).expect("label A");
    file.write_all_at(&label, 4096).expect("label B");
    let block = read("l2-log-block.bin");
    file.write_all_at(&block, 8192 + u64::from(SLOT_INDEX) * u64::from(BLOCK_BYTES_V1))
        .expect("log block");
    drop(file);

    let clock = std::sync::Arc::new(ManualClock::starting_at(std::time::Duration::ZERO));
    let config = L2ArcConfig { log_block_bytes: BLOCK_BYTES, ..L2ArcConfig::default() };
    let l2 = L2Arc::new(config, POOL_GUID, clock, 7).expect("l2arc");
    l2.open_device(&path).expect("a version-1 device of this pool is taken, not refused");
    let stats = l2.stats();
    assert_eq!(stats.devices.len(), 1);
    assert_eq!(stats.devices[0].entries, 0, "nothing of version 1 is indexed");
    for (segment_id, offset, data) in cached() {
        let key = BlockKey::new(segment_id, offset);
        assert!(!l2.contains(&key));
        assert_eq!(l2.get(&key, data.len() as u32, checksum64(&data)), None);
    }
    // Formatted again at version 2: both label copies say so now.
    let mut sectors = vec![0u8; 8192];
    std::fs::File::open(&path).expect("open").read_exact_at(&mut sectors, 0).expect("read");
    let (first, second) = sectors.split_at(4096);
    let (now, version) = L2Label::decode_either_any_version(first, second).expect("label");
    assert_eq!((now.pool_guid(), version), (POOL_GUID, 2));
    assert!(L2Label::decode(&first[..64]).is_ok() && L2Label::decode(&second[..64]).is_ok());

    // A version-1 device of another pool is refused, and left as it was.
    let other = dir.path().join("cache-v1-other");
    std::fs::copy(&path, &other).expect("copy");
    let foreign = std::fs::File::options().write(true).open(&other).expect("open");
    foreign.write_all_at(&label, 0).expect("label A");
    foreign.write_all_at(&label, 4096).expect("label B");
    drop(foreign);
    let l2_other = L2Arc::new(
        L2ArcConfig::default(),
        POOL_GUID + 1,
        std::sync::Arc::new(ManualClock::starting_at(std::time::Duration::ZERO)),
        8,
    )
    .expect("l2arc");
    let err = l2_other.open_device(&other).expect_err("another pool's device");
    assert!(err.to_string().contains("pool"), "{err}");
    let mut after = vec![0u8; 64];
    std::fs::File::open(&other).expect("open").read_exact_at(&mut after, 0).expect("read");
    assert_eq!(after, label, "untouched");
}

#[test]
fn hot_set_fixture_decodes_and_damaged_ones_are_refused() {
    assert_eq!(decode_hot_set(&read("hot-set.bin")), Ok(hot_keys()));
    let refused = |name: &str| decode_hot_set(&read(name)).expect_err(name);
    assert!(matches!(refused("hot-set.flipped-bit.bin"), HotSetError::BadChecksum { .. }));
    assert!(matches!(refused("hot-set.truncated.bin"), HotSetError::BadLength { .. }));
    assert!(matches!(refused("hot-set.wrong-magic.bin"), HotSetError::BadMagic { .. }));
    assert!(matches!(refused("hot-set.wrong-version.bin"), HotSetError::BadVersion { found: 2 }));
}

#[test]
fn every_prefix_is_refused_without_a_panic() {
    let label = read("l2-label-v2.bin");
    for len in 0..label.len() {
        assert!(L2Label::decode(&label[..len]).is_err());
    }
    let block = read("l2-log-block-v2.bin");
    for len in 0..160 {
        assert!(L2LogBlock::decode(&block[..len], &place()).is_err(), "{len} bytes");
    }
    let hot = read("hot-set.bin");
    for len in 0..hot.len() {
        assert!(decode_hot_set(&hot[..len]).is_err());
    }
}
