//! The head hint (`head` object, `decode_head` in engine/src/root.rs): arbitrary bytes never
//! panic; a decoded txg round-trips through `encode_head`. Also tried with the checksum
//! recomputed.
#![no_main]

use fardisk_engine::codec::checksum64;
use fardisk_engine::root::{decode_head, encode_head};
use libfuzzer_sys::fuzz_target;

fn check(bytes: &[u8]) {
    let Ok(txg) = decode_head(bytes) else { return };
    assert_eq!(decode_head(&encode_head(txg)).expect("re-encoded head decodes"), txg);
}

fuzz_target!(init: fardisk_fuzz::write_seeds("engine_head", fardisk_fuzz::seeds::heads), |data: &[u8]| {
    check(data);
    if let Some(body_len) = data.len().checked_sub(8) {
        let mut sealed = data.to_vec();
        let sum = checksum64(&sealed[..body_len]);
        sealed[body_len..].copy_from_slice(&sum.to_le_bytes());
        check(&sealed);
    }
});
