//! Golden fixtures of the caches' stored formats (docs/format/l2arc.md): the cache-device label,
//! an L2ARC log block (header, entry table and data) and the hot-set blob. The committed bytes in
//! `tests/fixtures/` must be what today's encoders write from the inputs below, today's decoders
//! must read them back to those inputs, and the damaged ones must be refused.
//! `tests/fixtures/README.md` says what each file is; a format change needs a new version and new
//! fixtures, never an edited one.
//!
//! `FARDISK_REGENERATE_FIXTURES=1 cargo test -p fardisk-arc --test golden_formats -- --ignored
//! regenerate_fixtures` writes fixtures that do not exist yet; it never overwrites one.

use fardisk_arc::fuzz_api::{
    cache_label_pool_guid, decode_hot_set, encode_hot_set, sample_log_block, HotSetError, L2Label,
    L2LogBlock, L2Place, L2Reject,
};
use fardisk_arc::BlockKey;
use fardisk_common::golden::{flip_bit, Fixtures};
use fardisk_common::le::{checksum64, checksum64_parts};

const POOL_GUID: u128 = 0x1234_5678_9abc_def0_1122_3344_5566_7788;
const DEVICE_GUID: u64 = 0x0ddb_a11c_afe5_0001;
const BLOCK_BYTES: u32 = 8192;
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

fn all() -> Vec<(&'static str, Vec<u8>)> {
    let label = label().encode().to_vec();
    let block = log_block();
    let hot = encode_hot_set(&hot_keys()).expect("hot set");
    let magic = b"FDXXXX00";
    let version = 2u32.to_le_bytes();
    let data_at = BLOCK_BYTES as usize - 1000;
    vec![
        ("l2-label.flipped-bit.bin", flip_bit(&label, 20, 4)),
        ("l2-label.truncated.bin", label[..63].to_vec()),
        ("l2-label.wrong-magic.bin", reseal_label(with(label.clone(), 0, magic))),
        ("l2-label.wrong-version.bin", reseal_label(with(label.clone(), 8, &version))),
        ("l2-label.bin", label),
        ("l2-log-block.flipped-entry-bit.bin", flip_bit(&block, 64 + 32 + 9, 0)),
        ("l2-log-block.flipped-data-bit.bin", flip_bit(&block, data_at + 10, 7)),
        ("l2-log-block.truncated.bin", block[..100].to_vec()),
        ("l2-log-block.wrong-magic.bin", reseal_log_block(with(block.clone(), 0, magic))),
        ("l2-log-block.wrong-version.bin", reseal_log_block(with(block.clone(), 8, &version))),
        ("l2-log-block.bin", block),
        ("hot-set.flipped-bit.bin", flip_bit(&hot, 30, 1)),
        ("hot-set.truncated.bin", hot[..hot.len() - 1].to_vec()),
        ("hot-set.wrong-magic.bin", reseal_hot_set(with(hot.clone(), 0, magic))),
        ("hot-set.wrong-version.bin", reseal_hot_set(with(hot.clone(), 8, &version))),
        ("hot-set.bin", hot),
    ]
}

#[test]
#[ignore = "writes missing fixtures; run with FARDISK_REGENERATE_FIXTURES=1"]
fn regenerate_fixtures() {
    assert!(Fixtures::regenerating(), "set FARDISK_REGENERATE_FIXTURES=1 to write fixtures");
    for (name, bytes) in all() {
        if fixtures().create(name, &bytes).expect("write fixture") {
            eprintln!("wrote tests/fixtures/{name} ({} bytes)", bytes.len());
        }
    }
}

#[test]
fn every_fixture_is_what_todays_encoders_write() {
    for (name, bytes) in all() {
        assert!(
            read(name) == bytes,
            "tests/fixtures/{name} differs from what today's encoder writes: a format change \
             needs a new version, not an edited fixture"
        );
    }
}

#[test]
fn label_fixture_decodes_and_damaged_labels_are_refused() {
    let bytes = read("l2-label.bin");
    assert_eq!(bytes.len(), 64);
    assert_eq!(L2Label::decode(&bytes), Ok(label()));
    let mut sectors = vec![0u8; 8192];
    sectors[..64].copy_from_slice(&read("l2-label.flipped-bit.bin"));
    sectors[4096..4160].copy_from_slice(&bytes);
    assert_eq!(cache_label_pool_guid(&sectors), Some(POOL_GUID), "copy B rescues a bad copy A");
    for name in [
        "l2-label.flipped-bit.bin",
        "l2-label.truncated.bin",
        "l2-label.wrong-magic.bin",
        "l2-label.wrong-version.bin",
    ] {
        assert!(L2Label::decode(&read(name)).is_err(), "{name} accepted");
    }
}

#[test]
fn log_block_fixture_decodes_with_its_data() {
    let bytes = read("l2-log-block.bin");
    assert_eq!(bytes.len(), BLOCK_BYTES as usize);
    let meta_len = L2LogBlock::meta_len(&bytes[..64], &place()).expect("header");
    assert_eq!(meta_len, 64 + 32 * 3);
    let block = L2LogBlock::decode(&bytes[..meta_len], &place()).expect("metadata");
    assert_eq!(block.sequence(), SEQUENCE);
    assert_eq!(block.data_low(), BLOCK_BYTES - 1000 - 500 - 38);
    for ((segment_id, offset, len, checksum, at), (want_seg, want_off, data)) in
        block.entries().into_iter().zip(cached())
    {
        assert_eq!((segment_id, offset, len as usize), (want_seg, want_off, data.len()));
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
    for name in ["l2-log-block.flipped-entry-bit.bin", "l2-log-block.wrong-version.bin"] {
        assert!(
            matches!(L2LogBlock::decode(&meta(name), &place()), Err(L2Reject::Corrupt(_))),
            "{name}"
        );
    }
    assert_eq!(
        L2LogBlock::decode(&meta("l2-log-block.wrong-magic.bin"), &place()),
        Err(L2Reject::Empty),
        "a slot without the magic holds no block"
    );
    let short = read("l2-log-block.truncated.bin");
    assert!(matches!(L2LogBlock::decode(&short, &place()), Err(L2Reject::Corrupt(_))));
    // Data is not under the header checksum: the entry's own data checksum refuses it, and only
    // that entry is lost.
    let bytes = read("l2-log-block.flipped-data-bit.bin");
    let block = L2LogBlock::decode(&bytes[..160], &place()).expect("metadata intact");
    let bad: Vec<bool> = block
        .entries()
        .into_iter()
        .map(|(_, _, len, sum, at)| checksum64(&bytes[at as usize..(at + len) as usize]) != sum)
        .collect();
    assert_eq!(bad, [true, false, false]);
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
    let label = read("l2-label.bin");
    for len in 0..label.len() {
        assert!(L2Label::decode(&label[..len]).is_err());
    }
    let block = read("l2-log-block.bin");
    for len in 0..160 {
        assert!(L2LogBlock::decode(&block[..len], &place()).is_err(), "{len} bytes");
    }
    let hot = read("hot-set.bin");
    for len in 0..hot.len() {
        assert!(decode_hot_set(&hot[..len]).is_err());
    }
}
