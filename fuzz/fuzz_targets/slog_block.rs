//! Intent-log blocks (slog/src/block.rs), what replay reads from the ring: `decode_header` and
//! `decode_payload` never panic on arbitrary bytes. A block that decodes holds exactly the
//! records its header counts, and re-encoding those records with the header's context gives a
//! block that decodes to the same header fields and records (round trip). Each input is also
//! tried with all its checksums recomputed (record links, payload, header), so the field checks
//! behind them are fuzzed too.
#![no_main]

use bytes::Bytes;
use fardisk_fuzz::seeds::SLOG_VDEV_GUID;
use fardisk_slog::fuzz_api::{
    decode_header, decode_payload, encode_block, encode_block_v1, reseal_block, BlockContext,
    BlockHeader, ChainPoint, LogRecord,
};
use libfuzzer_sys::fuzz_target;

fn check(buf: &[u8]) {
    let Ok(header) = decode_header(buf, SLOG_VDEV_GUID) else { return };
    assert_eq!(header.vdev_guid, SLOG_VDEV_GUID);
    let Ok(records) = decode_payload(&Bytes::copy_from_slice(buf), &header) else { return };
    assert_eq!(records.len() as u64, u64::from(header.record_count));
    let ctx = BlockContext {
        vdev_guid: header.vdev_guid,
        point: ChainPoint {
            offset_bytes: 0,
            block_seq: header.block_seq,
            prev_chain: header.prev_chain,
        },
        release_seq: header.release_seq,
        writer_epoch: header.writer_epoch,
        epoch_first_seq: header.epoch_first_seq,
        unit_bytes: header.unit_bytes,
    };
    let refs: Vec<&LogRecord> = records.iter().map(|d| &d.record).collect();
    let encode = if header.version == 1 { encode_block_v1 } else { encode_block };
    let (again, written) = encode(&ctx, header.first_record_seq, &refs);
    let decoded = decode_header(&again, SLOG_VDEV_GUID).expect("a re-encoded header decodes");
    assert_eq!(decoded, written);
    // Checksums match only when the reserved bytes were zero; every other field must, except
    // the length of a version 2 block that realigned the chain (padded by less than a unit
    // past the rounded length; re-encoded at offset 0 it takes the rounded length).
    let same_fields = BlockHeader {
        payload_checksum: header.payload_checksum,
        header_checksum: header.header_checksum,
        block_len_bytes: header.block_len_bytes,
        ..written
    };
    assert_eq!(same_fields, header);
    let back = decode_payload(&Bytes::copy_from_slice(&again), &decoded)
        .expect("a re-encoded payload decodes");
    assert!(back.iter().map(|d| &d.record).eq(refs.iter().copied()));
}

fuzz_target!(init: fardisk_fuzz::write_seeds("slog_block", fardisk_fuzz::seeds::slog_blocks), |data: &[u8]| {
    check(data);
    let mut resealed = data.to_vec();
    reseal_block(&mut resealed);
    check(&resealed);
});
