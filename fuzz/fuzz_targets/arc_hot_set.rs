//! The ARC warm-up list (`decode_hot_set`, arc/src/hot_set.rs), read from the store at import:
//! arbitrary bytes never panic and never allocate beyond the entry limit; a decoded list
//! re-encodes to exactly the same bytes. Also tried with the checksum recomputed.
#![no_main]

use fardisk_arc::fuzz_api::{decode_hot_set, encode_hot_set, reseal_hot_set};
use libfuzzer_sys::fuzz_target;

fn check(blob: &[u8]) {
    let Ok(keys) = decode_hot_set(blob) else { return };
    assert_eq!(encode_hot_set(&keys).expect("a decoded list encodes"), blob);
}

fuzz_target!(init: fardisk_fuzz::write_seeds("arc_hot_set", fardisk_fuzz::seeds::hot_sets), |data: &[u8]| {
    check(data);
    let mut resealed = data.to_vec();
    reseal_hot_set(&mut resealed);
    check(&resealed);
});
