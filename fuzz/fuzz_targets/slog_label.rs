//! Log and cache device labels (`DeviceLabel::decode`, slog/src/label.rs), read from every
//! device before it is used: arbitrary bytes never panic; a decoded label is within its ranges
//! and re-encodes and decodes to the same label. Also tried with the checksum recomputed.
#![no_main]

use fardisk_slog::fuzz_api::{reseal_label, DeviceLabel};
use libfuzzer_sys::fuzz_target;

fn check(buf: &[u8]) {
    let Ok(label) = DeviceLabel::decode(buf) else { return };
    assert!(label.leg_index < label.leg_count);
    assert!(label.ring_start_bytes < label.ring_end_bytes);
    let again = label.encode().expect("a decoded label encodes");
    assert_eq!(DeviceLabel::decode(&again), Ok(label.clone()));
    let _ = label.describe();
}

fuzz_target!(init: fardisk_fuzz::write_seeds("slog_label", fardisk_fuzz::seeds::slog_labels), |data: &[u8]| {
    check(data);
    let mut resealed = data.to_vec();
    reseal_label(&mut resealed);
    check(&resealed);
});
