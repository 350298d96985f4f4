use super::*;
use crate::objstore::open_store_url;

fn key(b: u8) -> EncryptionKey {
    EncryptionKey::from_bytes([b; 32])
}

fn stores(name: &str) -> (Arc<dyn Store>, EncryptedStore) {
    let raw = open_store_url(&format!("memory://enc-{name}"), true).expect("memory store");
    let enc = EncryptedStore::new(raw.clone(), &key(7), 1);
    (raw, enc)
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1]).collect()
}

#[tokio::test]
async fn round_trips_whole_objects_and_any_range() {
    let (_, enc) = stores("rt");
    for len in [0usize, 1, 4095, 4096, 4097, 3 * 4096 + 17] {
        let data = pattern(len);
        let k = format!("segments/{len}");
        enc.put(&k, Bytes::from(data.clone()), PutMode::Create).await.expect("put");
        assert_eq!(enc.get(&k).await.expect("get")[..], data[..], "whole object of {len} bytes");
        assert_eq!(enc.head(&k).await.expect("head"), len as u64);
        for (s, e) in [
            (0usize, len),
            (len / 3, len / 2 + 1),
            (len.saturating_sub(5), len),
            (4090.min(len), (4100).min(len)),
        ] {
            let e = e.min(len);
            if s < e {
                let got = enc.get_range(&k, s as u64..e as u64).await.expect("range");
                assert_eq!(got[..], data[s..e], "range {s}..{e} of {len}");
            }
        }
    }
}

#[tokio::test]
async fn the_store_sees_no_plaintext() {
    let (raw, enc) = stores("opaque");
    let secret = b"postgresql-page-with-a-secret-balance".repeat(200);
    enc.put("segments/1", Bytes::from(secret.clone()), PutMode::Create).await.expect("put");
    let stored = raw.get("segments/1").await.expect("raw get");
    assert!(is_encrypted_object(&stored));
    assert!(!stored.windows(16).any(|w| w == &secret[..16]), "plaintext visible in the store");
}

#[tokio::test]
async fn tampering_moving_truncating_and_wrong_keys_are_refused() {
    let (raw, enc) = stores("tamper");
    let data = pattern(3 * 4096);
    enc.put("segments/a", Bytes::from(data.clone()), PutMode::Create).await.expect("put a");
    enc.put("segments/b", Bytes::from(pattern(3 * 4096)), PutMode::Create).await.expect("put b");
    let sealed = raw.get("segments/a").await.expect("raw");
    // Every single flipped bit in a chunk is caught, in whole and ranged reads.
    for bit in
        [HEADER_BYTES as usize * 8 + 100, (HEADER_BYTES + CHUNK_SEALED_BYTES + 77) as usize * 8 + 3]
    {
        let mut bad = sealed.to_vec();
        bad[bit / 8] ^= 1 << (bit % 8);
        raw.put("segments/flipped", Bytes::from(bad), PutMode::Overwrite).await.expect("raw put");
        assert!(enc.get("segments/flipped").await.is_err(), "flipped bit {bit} went unnoticed");
        assert!(
            enc.get_range("segments/flipped", 0..(3 * 4096)).await.is_err(),
            "flipped bit {bit} in a range"
        );
    }
    // A chunk moved to another position or object fails authentication.
    let mut swapped = sealed.to_vec();
    let (c0, c1) = (HEADER_BYTES as usize, (HEADER_BYTES + CHUNK_SEALED_BYTES) as usize);
    let first: Vec<u8> = swapped[c0..c1].to_vec();
    swapped.copy_within(c1..c1 + CHUNK_SEALED_BYTES as usize, c0);
    swapped[c1..c1 + CHUNK_SEALED_BYTES as usize].copy_from_slice(&first);
    raw.put("segments/swapped", Bytes::from(swapped), PutMode::Overwrite).await.expect("raw put");
    assert!(enc.get("segments/swapped").await.is_err(), "reordered chunks");
    raw.put("segments/renamed", sealed.clone(), PutMode::Overwrite).await.expect("raw put");
    assert!(enc.get("segments/renamed").await.is_err(), "an object copied under another name");
    // Cut short by a chunk.
    raw.put(
        "segments/short",
        sealed.slice(..sealed.len() - CHUNK_SEALED_BYTES as usize),
        PutMode::Overwrite,
    )
    .await
    .expect("raw put");
    assert!(enc.get("segments/short").await.is_err(), "a truncated object");
    // Another key: refused by the header with a message naming both fingerprints.
    let other = EncryptedStore::new(raw.clone(), &key(8), 2);
    let err = other.get("segments/a").await.expect_err("wrong key");
    assert!(err.message.contains("another key"), "{err}");
    assert!(other.get_range("segments/a", 0..100).await.is_err(), "wrong key on a ranged read");
    assert_eq!(enc.get("segments/a").await.expect("the original is intact")[..], data[..]);
}

#[test]
fn keys_parse_from_hex_or_raw_and_never_print() {
    let hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    let k = EncryptionKey::parse(format!("{hex}\n").as_bytes()).expect("hex");
    assert_eq!(k.to_hex(), hex);
    assert_eq!(EncryptionKey::parse(&[9u8; 32]).expect("raw").fingerprint(), key(9).fingerprint());
    assert!(EncryptionKey::parse(b"short").is_err());
    assert!(!format!("{k:?}").contains("0011223344"), "Debug must not show the key");
}
