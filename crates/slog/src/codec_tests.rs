//! Property tests and golden values for every parser that reads bytes from a device.
//!
//! * arbitrary bytes never make a decoder panic, and are (almost surely) rejected;
//! * any single-bit flip in a valid block, head or label is detected;
//! * golden checksums pin the byte layout: a change to any encoder shows up here and must be
//!   matched by a format version bump and an update of docs/format/slog.md.

use bytes::Bytes;
use proptest::prelude::*;

use crate::block::{decode_header, decode_payload, encode_block, encode_block_v1, BlockContext};
use crate::head::LogHead;
use crate::label::{DeviceLabel, Role};
use crate::record::{LogRecord, RecordKind};
use crate::ring::ChainPoint;

fn ctx() -> BlockContext {
    BlockContext {
        vdev_guid: 0x1111,
        point: ChainPoint { offset_bytes: 16384, block_seq: 7, prev_chain: 0x2222 },
        release_seq: 3,
        writer_epoch: 2,
        epoch_first_seq: 1,
        unit_bytes: 512,
    }
}

fn records() -> Vec<LogRecord> {
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

fn label() -> DeviceLabel {
    DeviceLabel {
        pool_name: "tank".into(),
        pool_guid: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
        vdev_guid: 0x1111,
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
        vdev_guid: 0x1111,
        point: ctx().point,
        release_seq: 3,
        writer_epoch: 2,
        epoch_first_seq: 1,
    }
}

fn valid_block() -> Vec<u8> {
    let recs = records();
    let refs: Vec<&LogRecord> = recs.iter().collect();
    encode_block(&ctx(), 40, &refs).0.to_vec()
}

/// True when the block is accepted whole with exactly the original records.
fn block_accepted(bytes: &[u8]) -> bool {
    let Ok(header) = decode_header(bytes, 0x1111) else { return false };
    let Ok(decoded) = decode_payload(&Bytes::copy_from_slice(bytes), &header) else { return false };
    decoded.iter().map(|d| &d.record).eq(records().iter())
        && header.block_seq == 7
        && header.prev_chain == 0x2222
}

#[test]
fn golden_checksums_pin_the_layout() {
    let block = valid_block();
    let used = crate::block::BLOCK_HEADER_BYTES
        + records().iter().map(|r| r.encoded_len_bytes() as usize).sum::<usize>();
    assert_eq!(used, 325, "the bit-flip property test covers exactly the used bytes");
    let header = decode_header(&block, 0x1111).expect("valid");
    let golden = [
        header.header_checksum,
        crate::checksum::checksum64(&block),
        crate::checksum::checksum64(&head().encode()),
    ];
    let label_sum = crate::checksum::checksum64(&label().encode().expect("label"));
    assert_eq!(golden, GOLDEN_BLOCK_V2_BLOCKSUM_HEAD, "block/head layout changed: {golden:#x?}");
    assert_eq!(block.len(), 512, "version 2 pads the 325 bytes to one 512-byte unit");
    // Version 1, as written before version 2: still what `encode_block_v1` writes.
    let recs = records();
    let refs: Vec<&LogRecord> = recs.iter().collect();
    let v1 = encode_block_v1(&ctx(), 40, &refs).0.to_vec();
    let v1_header = decode_header(&v1, 0x1111).expect("valid v1");
    let v1_golden = [v1_header.header_checksum, crate::checksum::checksum64(&v1), golden[2]];
    assert_eq!(v1_golden, GOLDEN_BLOCK_BLOCKSUM_HEAD, "version 1 layout changed: {v1_golden:#x?}");
    assert_eq!(label_sum, GOLDEN_LABEL, "label layout changed: {label_sum:#x}");
}

const GOLDEN_BLOCK_BLOCKSUM_HEAD: [u64; 3] =
    [0xba5b_829d_8c96_9985, 0x71ee_6022_3f60_9cb7, 0x5983_196c_3e1a_2ed0];
const GOLDEN_BLOCK_V2_BLOCKSUM_HEAD: [u64; 3] =
    [0x660a_8442_2c6d_a0ce, 0x098a_c116_4654_210a, 0x5983_196c_3e1a_2ed0];
const GOLDEN_LABEL: u64 = 0x95ec_6d45_fa2f_8481;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_are_rejected_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..9000)) {
        let _ = decode_header(&bytes, 0x1111).map(|h| decode_payload(&Bytes::copy_from_slice(&bytes), &h));
        prop_assert!(LogHead::decode(&bytes, 0x1111).is_none());
        prop_assert!(DeviceLabel::decode(&bytes).is_err());
        prop_assert!(!block_accepted(&bytes));
    }

    #[test]
    // Header (128) + records (64 + 5, 64, 64): flips in the zero padding after the payload
    // are harmless by design and not tested.
    fn any_bit_flip_in_a_block_is_detected(bit in 0usize..(325 * 8)) {
        let mut block = valid_block();
        prop_assert!(block_accepted(&block));
        block[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(!block_accepted(&block), "flip of bit {} accepted", bit);
    }

    #[test]
    fn any_bit_flip_in_a_head_or_label_is_detected(bit in 0usize..(128 * 8)) {
        let mut head_bytes = head().encode().to_vec();
        head_bytes[bit / 8] ^= 1 << (bit % 8);
        prop_assert_ne!(LogHead::decode(&head_bytes, 0x1111), Some(head()));
        let mut label_bytes = label().encode().expect("label").to_vec();
        label_bytes[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(DeviceLabel::decode(&label_bytes) != Ok(label()));
    }
}
