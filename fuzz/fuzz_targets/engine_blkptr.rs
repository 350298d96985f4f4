//! Block pointers (engine/src/blkptr.rs): `BlockPtr::from_bytes` never panics, decodes any 40
//! bytes, and re-encodes to them (but the three reserved bytes after the compression code, which
//! it ignores).
#![no_main]

use fardisk_engine::blkptr::{BlockPtr, BLKPTR_BYTES};
use libfuzzer_sys::fuzz_target;

/// Bytes 33..36 are reserved (zero when written, not checked when read).
const RESERVED: std::ops::Range<usize> = 33..36;

fuzz_target!(init: fardisk_fuzz::write_seeds("engine_blkptr", fardisk_fuzz::seeds::blkptrs), |data: &[u8]| {
    match BlockPtr::from_bytes(data) {
        Ok(ptr) => {
            assert!(data.len() >= BLKPTR_BYTES);
            let again = ptr.to_bytes();
            assert_eq!(again[..RESERVED.start], data[..RESERVED.start]);
            assert_eq!(again[RESERVED.end..], data[RESERVED.end..BLKPTR_BYTES]);
            assert_eq!(BlockPtr::from_bytes(&again).expect("re-encoded pointer decodes"), ptr);
            let range = ptr.range();
            assert!(range.start <= range.end);
            let _ = ptr.compression();
        }
        Err(_) => assert!(data.len() < BLKPTR_BYTES, "40 bytes always decode"),
    }
});
