//! Intent-log records (slog/src/record.rs): `decode_record` never panics on arbitrary bytes, and
//! decodes a run of chained records the way `decode_payload` walks a block. Every record that
//! decodes is valid, re-encodes and decodes to the same record with the same chain link, and
//! re-encodes to the very same bytes when its reserved fields are zero. Each input is also tried
//! with every record's data checksum and chain link recomputed, so the field checks behind the
//! checksums are fuzzed too.
#![no_main]

use bytes::Bytes;
use fardisk_fuzz::seeds::{RECORD_PREV_CHAIN, RECORD_SEQ};
use fardisk_slog::fuzz_api::{decode_record, encode_record, reseal_record, RECORD_HEADER_BYTES};
use libfuzzer_sys::fuzz_target;

/// A block holds at most this many records in practice; more adds nothing but time.
const RECORDS_MAX: u64 = 64;

fn decode_run(payload: &Bytes) {
    let (mut at, mut chain) = (0usize, RECORD_PREV_CHAIN);
    for seq in RECORD_SEQ..RECORD_SEQ + RECORDS_MAX {
        let Ok(d) = decode_record(payload, at, seq, chain) else { return };
        assert_eq!(d.seq, seq);
        assert!(d.record.validate().is_ok(), "a decoded record is consistent");
        assert_eq!(d.encoded_len, RECORD_HEADER_BYTES + d.record.data.len());
        assert!(at + d.encoded_len <= payload.len());
        let mut buf = vec![0u8; d.encoded_len];
        let chain_again = encode_record(&mut buf, 0, seq, &d.record, chain);
        let again = decode_record(&Bytes::from(buf.clone()), 0, seq, chain)
            .expect("a re-encoded record decodes");
        assert_eq!(again.record, d.record);
        assert_eq!(again.chain, chain_again);
        let original = &payload[at..at + d.encoded_len];
        // Bytes 7 and 44..48 are reserved: written as zero, covered by the chain, not checked.
        if original[7] == 0 && original[44..48] == [0; 4] {
            assert_eq!(&buf[..], original);
            assert_eq!(chain_again, d.chain);
        }
        at += d.encoded_len;
        chain = d.chain;
    }
}

fuzz_target!(init: fardisk_fuzz::write_seeds("slog_record", fardisk_fuzz::seeds::slog_record_runs), |data: &[u8]| {
    decode_run(&Bytes::copy_from_slice(data));
    let mut resealed = data.to_vec();
    let (mut at, mut chain) = (0usize, RECORD_PREV_CHAIN);
    for _ in 0..RECORDS_MAX {
        let Some(next) = reseal_record(&mut resealed, at, chain) else { break };
        let data_len = u32::from_le_bytes(resealed[at + 40..at + 44].try_into().expect("4 bytes")) as usize;
        at = at.saturating_add(RECORD_HEADER_BYTES).saturating_add(data_len);
        chain = next;
    }
    decode_run(&Bytes::from(resealed));
});
