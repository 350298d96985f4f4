//! Pool roots (`roots/<txg>` objects, engine/src/root.rs): arbitrary bytes never panic
//! `Root::decode`; whatever decodes re-encodes (through the writer's own `encode_verified`) and
//! decodes to the same root. Each input is also tried with its checksum recomputed, so the field
//! parsing behind the seal is fuzzed too, not only the checksum check.
#![no_main]

use fardisk_engine::codec::checksum64;
use fardisk_engine::root::Root;
use libfuzzer_sys::fuzz_target;

fn check(bytes: &[u8]) {
    let Ok(root) = Root::decode(bytes) else { return };
    let again = root.encode_verified().expect("a decoded root survives the writer's own check");
    assert_eq!(Root::decode(&again).expect("re-encoded root decodes"), root);
}

fuzz_target!(init: fardisk_fuzz::write_seeds("engine_root", fardisk_fuzz::seeds::roots), |data: &[u8]| {
    check(data);
    if let Some(body_len) = data.len().checked_sub(8) {
        let mut sealed = data.to_vec();
        let sum = checksum64(&sealed[..body_len]);
        sealed[body_len..].copy_from_slice(&sum.to_le_bytes());
        check(&sealed);
    }
});
