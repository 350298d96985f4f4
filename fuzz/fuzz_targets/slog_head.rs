//! Intent-log heads (`LogHead::decode`, slog/src/head.rs), read from both head slots at open:
//! arbitrary bytes never panic; a decoded head re-encodes and decodes to the same head. Also
//! tried with the checksum recomputed.
#![no_main]

use fardisk_fuzz::seeds::SLOG_VDEV_GUID;
use fardisk_slog::fuzz_api::{reseal_head, LogHead};
use libfuzzer_sys::fuzz_target;

fn check(buf: &[u8]) {
    let Some(head) = LogHead::decode(buf, SLOG_VDEV_GUID) else { return };
    assert_eq!(head.vdev_guid, SLOG_VDEV_GUID);
    let again = head.encode();
    assert_eq!(LogHead::decode(&again, SLOG_VDEV_GUID), Some(head));
    assert_eq!(LogHead::decode(&again, SLOG_VDEV_GUID ^ 1), None, "another vdev's head");
}

fuzz_target!(init: fardisk_fuzz::write_seeds("slog_head", fardisk_fuzz::seeds::slog_heads), |data: &[u8]| {
    check(data);
    let mut resealed = data.to_vec();
    reseal_head(&mut resealed);
    check(&resealed);
});
