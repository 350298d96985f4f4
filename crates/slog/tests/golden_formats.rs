//! Golden fixtures of the intent log's on-device formats (docs/format/slog.md): device label, log
//! head, log block with its records (version 1, 4 KiB units, and version 2, padded to the
//! vdev's write unit), an epoch marker block of each version, and one record. The committed bytes
//! in `tests/fixtures/` must be what today's encoders write from the inputs below (the same
//! inputs as the golden checksums in `src/codec_tests.rs`), today's decoders must read them back
//! to those inputs, and the damaged ones must be refused. `tests/fixtures/README.md` says what
//! each file is; a format change needs a new version and new fixtures, never an edited one.
//!
//! `FARDISK_REGENERATE_FIXTURES=1 cargo test -p fardisk-slog --test golden_formats -- --ignored
//! regenerate_fixtures` writes fixtures that do not exist yet; it never overwrites one.

use bytes::Bytes;
use fardisk_common::golden::{flip_bit, Fixtures};
use fardisk_slog::fuzz_api::{
    chained64, checksum64, decode_header, decode_payload, decode_record, encode_block,
    encode_block_v1, encode_record, BlockContext, BlockError, ChainPoint, DeviceLabel,
    LabelDecodeError, LogHead, LogRecord, RecordKind, Role, RECORD_HEADER_BYTES,
};

const VDEV_GUID: u64 = 0x1111;
const PREV_CHAIN: u64 = 0x2222;
const FIRST_SEQ: u64 = 40;

fn fixtures() -> Fixtures {
    Fixtures::new(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"))
}

fn read(name: &str) -> Vec<u8> {
    fixtures().read(name)
}

fn ctx(prev_chain: u64) -> BlockContext {
    BlockContext {
        vdev_guid: VDEV_GUID,
        point: ChainPoint { offset_bytes: 16384, block_seq: 7, prev_chain },
        release_seq: 3,
        writer_epoch: 2,
        epoch_first_seq: 1,
        unit_bytes: 512,
    }
}

fn records() -> Vec<LogRecord> {
    let record = |txg, volume_id, kind, offset_bytes, length_bytes, data: &'static [u8]| {
        LogRecord { txg, volume_id, kind, offset_bytes, length_bytes, data: Bytes::from(data) }
    };
    vec![
        record(9, 1, RecordKind::Write, 4096, 5, b"hello"),
        record(9, 1, RecordKind::Trim, 0, 4096, b""),
        record(10, 2, RecordKind::WriteZeroes, 8192, 512, b""),
    ]
}

fn label() -> DeviceLabel {
    DeviceLabel {
        pool_name: "tank".into(),
        pool_guid: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
        vdev_guid: VDEV_GUID,
        role: Role::Log,
        leg_index: 0,
        leg_count: 2,
        ring_start_bytes: 16384,
        ring_end_bytes: 1 << 20,
    }
}

fn head() -> LogHead {
    LogHead {
        generation: 5,
        vdev_guid: VDEV_GUID,
        point: ctx(PREV_CHAIN).point,
        release_seq: 3,
        writer_epoch: 2,
        epoch_first_seq: 1,
    }
}

/// A version 1 block (as fardisk wrote them before version 2).
fn block() -> Vec<u8> {
    let recs = records();
    let refs: Vec<&LogRecord> = recs.iter().collect();
    encode_block_v1(&ctx(PREV_CHAIN), FIRST_SEQ, &refs).0.to_vec()
}

/// The version 1 epoch marker an open wrote at the new tail: a block with no records.
fn marker() -> Vec<u8> {
    encode_block_v1(&ctx(PREV_CHAIN), FIRST_SEQ, &[]).0.to_vec()
}

/// A version 2 block in 512-byte units, as today's writer writes it.
fn block_v2() -> Vec<u8> {
    let recs = records();
    let refs: Vec<&LogRecord> = recs.iter().collect();
    encode_block(&ctx(PREV_CHAIN), FIRST_SEQ, &refs).0.to_vec()
}

/// The version 2 epoch marker: one 512-byte unit.
fn marker_v2() -> Vec<u8> {
    encode_block(&ctx(PREV_CHAIN), FIRST_SEQ, &[]).0.to_vec()
}

/// The first record as it sits in the block: header and data, chained from `PREV_CHAIN`.
fn record() -> Vec<u8> {
    let r = &records()[0];
    let mut buf = vec![0u8; r.encoded_len_bytes() as usize];
    encode_record(&mut buf, 0, FIRST_SEQ, r, PREV_CHAIN);
    buf
}

fn reseal(mut bytes: Vec<u8>, sum_at: usize) -> Vec<u8> {
    let sum = checksum64(&bytes[..sum_at]);
    bytes[sum_at..sum_at + 8].copy_from_slice(&sum.to_le_bytes());
    bytes
}

fn reseal_record(mut bytes: Vec<u8>) -> Vec<u8> {
    let chain = chained64(&bytes[..56], PREV_CHAIN);
    bytes[56..64].copy_from_slice(&chain.to_le_bytes());
    bytes
}

fn with(mut bytes: Vec<u8>, at: usize, new: &[u8]) -> Vec<u8> {
    bytes[at..at + new.len()].copy_from_slice(new);
    bytes
}

fn truncated(bytes: &[u8], len: usize) -> Vec<u8> {
    bytes[..len].to_vec()
}

/// Every fixture: name and the bytes today's encoders (and the damage) make.
fn all() -> Vec<(&'static str, Vec<u8>)> {
    let label = label().encode().expect("label").to_vec();
    let head = head().encode().to_vec();
    let (block, record, block_v2) = (block(), record(), block_v2());
    let wrong_magic = b"FDXXXX00";
    vec![
        ("label.flipped-bit.bin", flip_bit(&label, 70, 0)),
        ("label.truncated.bin", truncated(&label, 4095)),
        ("label.wrong-magic.bin", reseal(with(label.clone(), 0, wrong_magic), 4088)),
        ("label.wrong-version.bin", reseal(with(label.clone(), 8, &2u16.to_le_bytes()), 4088)),
        ("label.bin", label),
        ("head.flipped-bit.bin", flip_bit(&head, 30, 2)),
        ("head.truncated.bin", truncated(&head, 127)),
        ("head.wrong-magic.bin", reseal(with(head.clone(), 0, wrong_magic), 120)),
        ("head.wrong-version.bin", reseal(with(head.clone(), 8, &2u16.to_le_bytes()), 120)),
        ("head.bin", head),
        ("block.flipped-header-bit.bin", flip_bit(&block, 44, 1)),
        ("block.flipped-payload-bit.bin", flip_bit(&block, 128 + 64 + 2, 6)),
        ("block.truncated.bin", truncated(&block, 300)),
        ("block.wrong-magic.bin", reseal(with(block.clone(), 0, wrong_magic), 120)),
        ("block.wrong-version.bin", reseal(with(block.clone(), 8, &2u16.to_le_bytes()), 120)),
        ("block.bin", block),
        ("epoch-marker-block.bin", marker()),
        ("block-v2.flipped-payload-bit.bin", flip_bit(&block_v2, 128 + 64 + 2, 6)),
        ("block-v2.truncated.bin", truncated(&block_v2, 300)),
        ("block-v2.unit-too-large.bin", reseal(with(block_v2.clone(), 96, &[13]), 120)),
        ("block-v2.unit-missing.bin", reseal(with(block_v2.clone(), 96, &[0]), 120)),
        ("block-v2.wrong-version.bin", reseal(with(block_v2.clone(), 8, &3u16.to_le_bytes()), 120)),
        ("block-v2.bin", block_v2),
        ("epoch-marker-block-v2.bin", marker_v2()),
        ("record.flipped-data-bit.bin", flip_bit(&record, 65, 0)),
        ("record.truncated.bin", truncated(&record, RECORD_HEADER_BYTES - 1)),
        ("record.wrong-magic.bin", reseal_record(with(record.clone(), 0, b"FDXX"))),
        ("record.wrong-version.bin", reseal_record(with(record.clone(), 4, &2u16.to_le_bytes()))),
        ("record.bin", record),
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
    let bytes = read("label.bin");
    assert_eq!(bytes.len(), 4096);
    assert_eq!(DeviceLabel::decode(&bytes), Ok(label()));
    for name in ["label.flipped-bit.bin", "label.wrong-version.bin"] {
        assert!(
            matches!(DeviceLabel::decode(&read(name)), Err(LabelDecodeError::Damaged(_))),
            "{name}"
        );
    }
    for name in ["label.truncated.bin", "label.wrong-magic.bin"] {
        assert_eq!(DeviceLabel::decode(&read(name)), Err(LabelDecodeError::NotALabel), "{name}");
    }
}

#[test]
fn head_fixture_decodes_and_damaged_heads_are_refused() {
    let bytes = read("head.bin");
    assert_eq!(bytes.len(), 4096);
    assert_eq!(LogHead::decode(&bytes, VDEV_GUID), Some(head()));
    assert_eq!(LogHead::decode(&bytes, VDEV_GUID + 1), None, "another vdev's head");
    for name in [
        "head.flipped-bit.bin",
        "head.truncated.bin",
        "head.wrong-magic.bin",
        "head.wrong-version.bin",
    ] {
        assert_eq!(LogHead::decode(&read(name), VDEV_GUID), None, "{name} accepted");
    }
}

#[test]
fn block_fixture_decodes_to_its_records() {
    let bytes = Bytes::from(read("block.bin"));
    assert_eq!(bytes.len(), 4096);
    let header = decode_header(&bytes, VDEV_GUID).expect("header");
    assert_eq!(
        (header.block_seq, header.prev_chain, header.first_record_seq, header.record_count),
        (7, PREV_CHAIN, FIRST_SEQ, 3)
    );
    assert_eq!((header.release_seq, header.txg_max, header.writer_epoch), (3, 10, 2));
    assert_eq!((header.epoch_first_seq, header.payload_len_bytes), (1, 197));
    let decoded = decode_payload(&bytes, &header).expect("payload");
    let seqs: Vec<u64> = decoded.iter().map(|d| d.seq).collect();
    assert_eq!(seqs, [40, 41, 42]);
    assert!(decoded.iter().map(|d| &d.record).eq(records().iter()));
    assert!(decode_header(&bytes, VDEV_GUID + 1).is_err(), "another vdev's block");
}

#[test]
fn epoch_marker_fixture_decodes_to_no_records() {
    let bytes = Bytes::from(read("epoch-marker-block.bin"));
    let header = decode_header(&bytes, VDEV_GUID).expect("header");
    assert_eq!((header.record_count, header.payload_len_bytes, header.txg_max), (0, 0, 0));
    assert!(decode_payload(&bytes, &header).expect("payload").is_empty());
}

#[test]
fn damaged_blocks_are_refused() {
    for name in ["block.flipped-header-bit.bin", "block.wrong-magic.bin", "block.wrong-version.bin"]
    {
        assert_eq!(decode_header(&read(name), VDEV_GUID), Err(BlockError::Garbage), "{name}");
    }
    for name in ["block.flipped-payload-bit.bin", "block.truncated.bin"] {
        let bytes = Bytes::from(read(name));
        let header = decode_header(&bytes, VDEV_GUID).expect("the header is intact");
        assert!(
            matches!(decode_payload(&bytes, &header), Err(BlockError::Corrupt(_))),
            "{name} accepted"
        );
    }
}

#[test]
fn block_v2_fixture_decodes_to_its_records_in_512_bytes() {
    let bytes = Bytes::from(read("block-v2.bin"));
    assert_eq!(bytes.len(), 512, "128 + 197 bytes padded to one 512-byte unit");
    let header = decode_header(&bytes, VDEV_GUID).expect("header");
    assert_eq!((header.version, header.unit_bytes, header.block_len_bytes), (2, 512, 512));
    assert_eq!((header.block_seq, header.prev_chain, header.record_count), (7, PREV_CHAIN, 3));
    let decoded = decode_payload(&bytes, &header).expect("payload");
    assert!(decoded.iter().map(|d| &d.record).eq(records().iter()));
    let marker = Bytes::from(read("epoch-marker-block-v2.bin"));
    assert_eq!(marker.len(), 512);
    let header = decode_header(&marker, VDEV_GUID).expect("marker header");
    assert!(decode_payload(&marker, &header).expect("payload").is_empty());
}

#[test]
fn damaged_v2_blocks_are_refused() {
    for name in
        ["block-v2.unit-too-large.bin", "block-v2.unit-missing.bin", "block-v2.wrong-version.bin"]
    {
        assert_eq!(decode_header(&read(name), VDEV_GUID), Err(BlockError::Garbage), "{name}");
    }
    for name in ["block-v2.flipped-payload-bit.bin", "block-v2.truncated.bin"] {
        let bytes = Bytes::from(read(name));
        let header = decode_header(&bytes, VDEV_GUID).expect("the header is intact");
        assert!(
            matches!(decode_payload(&bytes, &header), Err(BlockError::Corrupt(_))),
            "{name} accepted"
        );
    }
}

#[test]
fn record_fixture_decodes_in_its_place_only() {
    let bytes = Bytes::from(read("record.bin"));
    let d = decode_record(&bytes, 0, FIRST_SEQ, PREV_CHAIN).expect("record");
    assert_eq!((d.seq, d.encoded_len), (FIRST_SEQ, 69));
    assert_eq!(d.record, records()[0]);
    assert!(decode_record(&bytes, 0, FIRST_SEQ, PREV_CHAIN + 1).is_err(), "another chain");
    assert!(decode_record(&bytes, 0, FIRST_SEQ + 1, PREV_CHAIN).is_err(), "another place");
    for name in [
        "record.flipped-data-bit.bin",
        "record.truncated.bin",
        "record.wrong-magic.bin",
        "record.wrong-version.bin",
    ] {
        let damaged = Bytes::from(read(name));
        assert!(decode_record(&damaged, 0, FIRST_SEQ, PREV_CHAIN).is_err(), "{name} accepted");
    }
}

#[test]
fn every_prefix_of_each_structure_is_refused_without_a_panic() {
    let (label, head) = (read("label.bin"), read("head.bin"));
    for len in 0..4096 {
        assert!(DeviceLabel::decode(&label[..len]).is_err(), "label, {len} bytes");
    }
    for len in 0..128 {
        assert_eq!(LogHead::decode(&head[..len], VDEV_GUID), None, "head, {len} bytes");
    }
    let block = Bytes::from(read("block.bin"));
    for len in 0..325 {
        let cut = block.slice(..len);
        if let Ok(header) = decode_header(&cut, VDEV_GUID) {
            assert!(decode_payload(&cut, &header).is_err(), "block, {len} bytes");
        }
    }
    let record = Bytes::from(read("record.bin"));
    for len in 0..record.len() {
        assert!(decode_record(&record.slice(..len), 0, FIRST_SEQ, PREV_CHAIN).is_err());
    }
}
