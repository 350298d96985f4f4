//! The encryption envelope (engine/src/objstore/encrypted.rs): whatever bytes the store holds,
//! reading them through `EncryptedStore` with a fixed key returns an error, never panics: whole
//! reads (`get`), header reads (`head`) and ranged reads (`get_range`, with ranges a block
//! pointer can name). What opens is consistent: `head` gives its length, a ranged read inside
//! it gives the same bytes, and sealing it again opens to it again (round trip).
//!
//! Input: [range start u32][range length u32][object bytes]. Each object is also tried with a
//! header that passes (magic, version, chunk size, this key's fingerprint, checksum recomputed),
//! so the length and chunk checks behind the header run on arbitrary plaintext lengths.
//! `EncryptionKey::parse` (key files) gets the raw input too.
#![no_main]

use bytes::Bytes;
use fardisk_engine::codec::checksum64;
use fardisk_engine::objstore::{EncryptedStore, EncryptionKey, PutMode, Store};
use fardisk_fuzz::seeds::{
    ENCRYPTED_OBJECT_KEY, ENCRYPTED_RANGE_PREFIX_BYTES, ENCRYPTION_KEY_BYTES,
};
use fardisk_fuzz::{block_on, MemStore};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};

const HEADER_BYTES: usize = 40;
const ROUND_TRIP_KEY: &str = "segments/round-trip";

struct Stores {
    inner: Arc<MemStore>,
    enc: EncryptedStore,
    fingerprint: u64,
}

fn stores() -> &'static Stores {
    static STORES: OnceLock<Stores> = OnceLock::new();
    STORES.get_or_init(|| {
        let key = EncryptionKey::from_bytes(ENCRYPTION_KEY_BYTES);
        let inner = Arc::new(MemStore::default());
        let enc = EncryptedStore::new(inner.clone(), &key, 1);
        Stores { inner, enc, fingerprint: key.fingerprint() }
    })
}

fn check(object: &[u8], start: u64, len: u64) {
    let s = stores();
    block_on(s.inner.put(ENCRYPTED_OBJECT_KEY, Bytes::copy_from_slice(object), PutMode::Overwrite))
        .expect("raw put");
    let whole = block_on(s.enc.get(ENCRYPTED_OBJECT_KEY));
    let head = block_on(s.enc.head(ENCRYPTED_OBJECT_KEY));
    let ranged = block_on(s.enc.get_range(ENCRYPTED_OBJECT_KEY, start..start + len));
    if let Ok(bytes) = &ranged {
        assert_eq!(bytes.len() as u64, len, "a ranged read returns exactly the range");
    }
    let Ok(plain) = whole else { return };
    assert_eq!(head.expect("head of an object that opens"), plain.len() as u64);
    if start + len <= plain.len() as u64 {
        let range = start as usize..(start + len) as usize;
        assert_eq!(ranged.expect("a range inside an object that opens")[..], plain[range]);
    }
    block_on(s.enc.put(ROUND_TRIP_KEY, plain.clone(), PutMode::Overwrite)).expect("seal");
    assert_eq!(block_on(s.enc.get(ROUND_TRIP_KEY)).expect("open what we sealed"), plain);
}

/// A header this key accepts, over whatever plaintext length and chunks the input has.
fn valid_header(object: &mut [u8], fingerprint: u64) {
    object[..8].copy_from_slice(b"FDENCRY1");
    object[8..12].copy_from_slice(&1u32.to_le_bytes());
    object[12..16].copy_from_slice(&4096u32.to_le_bytes());
    object[16..24].copy_from_slice(&fingerprint.to_le_bytes());
    let sum = checksum64(&object[..32]);
    object[32..40].copy_from_slice(&sum.to_le_bytes());
}

fuzz_target!(init: fardisk_fuzz::write_seeds("engine_encrypted", fardisk_fuzz::seeds::encrypted_objects), |data: &[u8]| {
    if let Ok(key) = EncryptionKey::parse(data) {
        let again = EncryptionKey::parse(key.to_hex().as_bytes()).expect("a key's hex parses");
        assert_eq!(again.fingerprint(), key.fingerprint());
    }
    if data.len() < ENCRYPTED_RANGE_PREFIX_BYTES {
        return;
    }
    // Offsets and lengths of block pointers are u32: ranged reads never ask for more.
    let start = fardisk_fuzz::le_u64(&data[..4], 0);
    let len = fardisk_fuzz::le_u64(&data[4..8], 0);
    let object = &data[ENCRYPTED_RANGE_PREFIX_BYTES..];
    check(object, start, len);
    if object.len() >= HEADER_BYTES {
        let mut fixed = object.to_vec();
        valid_header(&mut fixed, stores().fingerprint);
        check(&fixed, start, len);
    }
});
