//! Client-side encryption of everything the pool stores (a decorator, like `simulate.rs`): whoever
//! holds the bucket sees object names and sizes, never data, block maps, roots or properties.
//!
//! Each object is a plaintext header and a run of independently sealed chunks of one size (the last
//! one padded with zeros), so a ranged GET of a block maps to an exact ranged GET of the chunks that
//! hold it, with no extra request:
//! ```text
//! 0   u64  magic "FDENCRY1"
//! 8   u32  version (1)
//! 12  u32  chunk_plain_bytes (4096)
//! 16  u64  key fingerprint (first 8 bytes of the key's AES-GCM-SIV seal of a constant)
//! 24  u64  plain_bytes: the object's length before padding
//! 32  u64  xxh3_64 of bytes 0..32
//! 40  chunk 0, chunk 1, ...: { nonce[12], ciphertext[4096], tag[16] }
//! ```
//! AES-256-GCM-SIV (RFC 8452) seals each chunk with a random nonce; the associated data binds the
//! chunk to its object name and index, so chunks cannot be moved between objects or positions; a
//! whole-object read checks the chunk count against `plain_bytes`, so an object cannot be cut short
//! unnoticed. GCM-SIV keeps an accidental nonce repeat from revealing more than the equality of two
//! identical chunks.
//! See docs/format.md ("Encryption").

use super::{PutMode, Store, StoreError, StoreErrorKind, StoreResult};
use crate::rng::Rng;
use aes_gcm_siv::aead::{Aead, KeyInit, Payload};
use aes_gcm_siv::{Aes256GcmSiv, Nonce};
use bytes::Bytes;
use std::ops::Range;
use std::sync::Arc;

pub const ENCRYPTED_MAGIC: &[u8; 8] = b"FDENCRY1";
const VERSION: u32 = 1;
const HEADER_BYTES: u64 = 40;
pub const CHUNK_PLAIN_BYTES: u64 = 4096;
const NONCE_BYTES: u64 = 12;
const TAG_BYTES: u64 = 16;
const CHUNK_SEALED_BYTES: u64 = CHUNK_PLAIN_BYTES + NONCE_BYTES + TAG_BYTES;
const AAD_DOMAIN: &[u8] = b"fardisk-object-chunk-v1";

/// True when `bytes` starts like an encrypted object (used to tell a user who forgot the key).
pub fn is_encrypted_object(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && &bytes[..8] == ENCRYPTED_MAGIC
}

/// A 256-bit key. Never printed: `Debug` shows the fingerprint only.
#[derive(Clone)]
pub struct EncryptionKey {
    bytes: [u8; 32],
}

impl std::fmt::Debug for EncryptionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EncryptionKey(fingerprint {:016x})", self.fingerprint())
    }
}

impl EncryptionKey {
    pub fn from_bytes(bytes: [u8; 32]) -> EncryptionKey {
        EncryptionKey { bytes }
    }

    /// 64 hex digits (surrounding whitespace ignored) or exactly 32 raw bytes.
    pub fn parse(text_or_raw: &[u8]) -> Result<EncryptionKey, String> {
        if text_or_raw.len() == 32
            && std::str::from_utf8(text_or_raw).map(|s| s.trim().len() != 64).unwrap_or(true)
        {
            let mut b = [0u8; 32];
            b.copy_from_slice(text_or_raw);
            return Ok(EncryptionKey { bytes: b });
        }
        let s = std::str::from_utf8(text_or_raw)
            .map_err(|_| "a key is 64 hex digits or 32 raw bytes".to_string())?
            .trim();
        if s.len() != 64 || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(format!(
                "a key is 64 hex digits or 32 raw bytes (found {} characters)",
                s.len()
            ));
        }
        let mut b = [0u8; 32];
        for (i, byte) in b.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
        }
        Ok(EncryptionKey { bytes: b })
    }

    pub fn to_hex(&self) -> String {
        self.bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Identifies the key in headers and messages without revealing it: the start of its seal
    /// of a fixed block under a fixed nonce.
    pub fn fingerprint(&self) -> u64 {
        let cipher = Aes256GcmSiv::new_from_slice(&self.bytes).expect("32-byte key");
        let sealed = cipher
            .encrypt(
                Nonce::from_slice(&[0u8; 12]),
                Payload { msg: &[0u8; 16], aad: b"fardisk-key-fingerprint" },
            )
            .expect("sealing a constant cannot fail");
        u64::from_le_bytes(sealed[..8].try_into().expect("8 bytes"))
    }
}

pub struct EncryptedStore {
    inner: Arc<dyn Store>,
    cipher: Aes256GcmSiv,
    fingerprint: u64,
    rng: Rng,
}

impl std::fmt::Debug for EncryptedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncryptedStore")
            .field("inner", &self.inner)
            .field("key", &format_args!("{:016x}", self.fingerprint))
            .finish()
    }
}

fn corrupt(op: &'static str, key: &str, why: impl Into<String>) -> StoreError {
    // Retrying returns the same bytes. The engine reports it like a bad checksum.
    StoreError::new(StoreErrorKind::Corrupt, op, key, why)
}

fn aad(key: &str, index: u64) -> Vec<u8> {
    let mut a = Vec::with_capacity(AAD_DOMAIN.len() + key.len() + 8);
    a.extend_from_slice(AAD_DOMAIN);
    a.extend_from_slice(&index.to_le_bytes());
    a.extend_from_slice(key.as_bytes());
    a
}

fn header(fingerprint: u64, plain_bytes: u64) -> [u8; HEADER_BYTES as usize] {
    let mut h = [0u8; HEADER_BYTES as usize];
    h[..8].copy_from_slice(ENCRYPTED_MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(CHUNK_PLAIN_BYTES as u32).to_le_bytes());
    h[16..24].copy_from_slice(&fingerprint.to_le_bytes());
    h[24..32].copy_from_slice(&plain_bytes.to_le_bytes());
    let sum = xxhash_rust::xxh3::xxh3_64(&h[..32]);
    h[32..40].copy_from_slice(&sum.to_le_bytes());
    h
}

/// The sealed form of object `key` holding `plain`, chunk `i` sealed under `nonce(i)`.
fn seal_chunks(
    cipher: &Aes256GcmSiv,
    fingerprint: u64,
    key: &str,
    plain: &[u8],
    mut nonce: impl FnMut(u64) -> [u8; NONCE_BYTES as usize],
) -> StoreResult<Vec<u8>> {
    let chunks = chunk_count(plain.len() as u64);
    let mut out = Vec::with_capacity((HEADER_BYTES + chunks * CHUNK_SEALED_BYTES) as usize);
    out.extend_from_slice(&header(fingerprint, plain.len() as u64));
    let mut padded = [0u8; CHUNK_PLAIN_BYTES as usize];
    for i in 0..chunks {
        let start = (i * CHUNK_PLAIN_BYTES) as usize;
        let end = (start + CHUNK_PLAIN_BYTES as usize).min(plain.len());
        padded.fill(0);
        padded[..end - start].copy_from_slice(&plain[start..end]);
        let nonce = nonce(i);
        let sealed = cipher
            .encrypt(Nonce::from_slice(&nonce), Payload { msg: &padded, aad: &aad(key, i) })
            .map_err(|_| corrupt("put", key, "encryption failed"))?;
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
    }
    debug_assert_eq!(out.len() as u64, HEADER_BYTES + chunks * CHUNK_SEALED_BYTES);
    Ok(out)
}

/// Seals `plain` as object `key` exactly as a put does, but with the nonces given (chunk `i`
/// takes `nonces[i]`, which must cover every chunk): the golden fixtures reproduce a stored object
/// byte for byte with it. Stored objects always get random nonces (`EncryptedStore`); never store
/// what this returns.
#[doc(hidden)]
pub fn seal_with_nonces(
    key: &EncryptionKey,
    object_key: &str,
    plain: &[u8],
    nonces: &[[u8; 12]],
) -> StoreResult<Vec<u8>> {
    let cipher = Aes256GcmSiv::new_from_slice(&key.bytes).expect("32-byte key");
    let chunks = chunk_count(plain.len() as u64) as usize;
    if nonces.len() < chunks {
        return Err(corrupt(
            "put",
            object_key,
            format!("{chunks} chunks, {} nonces", nonces.len()),
        ));
    }
    seal_chunks(&cipher, key.fingerprint(), object_key, plain, |i| nonces[i as usize])
}

fn chunk_count(plain_bytes: u64) -> u64 {
    plain_bytes.div_ceil(CHUNK_PLAIN_BYTES).max(1)
}

/// Upper bound of the plaintext in a sealed object of `sealed_bytes` (the padding is not known
/// without the header); used for listings only.
fn plain_len_bound(sealed_bytes: u64) -> u64 {
    sealed_bytes.saturating_sub(HEADER_BYTES) / CHUNK_SEALED_BYTES * CHUNK_PLAIN_BYTES
}

impl EncryptedStore {
    pub fn new(inner: Arc<dyn Store>, key: &EncryptionKey, seed: u64) -> EncryptedStore {
        let cipher = Aes256GcmSiv::new_from_slice(&key.bytes).expect("32-byte key");
        // The nonce stream mixes the injected seed with fresh entropy: a simulation replays the
        // same plaintexts, and must still never reuse nonces across processes.
        #[allow(clippy::disallowed_methods)] // Nonces must never repeat, not even on a replay.
        let rng = Rng::new(seed ^ Rng::from_entropy().next_u64());
        EncryptedStore { inner, cipher, fingerprint: key.fingerprint(), rng }
    }

    /// Verifies a header; returns the object's plaintext length.
    fn check_header(&self, key: &str, h: &[u8]) -> StoreResult<u64> {
        if h.len() < HEADER_BYTES as usize || !is_encrypted_object(h) {
            return Err(corrupt(
                "get",
                key,
                "not an encrypted fardisk object (was the pool created without encryption?)",
            ));
        }
        let sum = u64::from_le_bytes(h[32..40].try_into().expect("8 bytes"));
        if xxhash_rust::xxh3::xxh3_64(&h[..32]) != sum {
            return Err(corrupt("get", key, "encryption header checksum mismatch"));
        }
        let version = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
        let chunk = u32::from_le_bytes(h[12..16].try_into().expect("4 bytes"));
        if version != VERSION || u64::from(chunk) != CHUNK_PLAIN_BYTES {
            return Err(corrupt(
                "get",
                key,
                format!("encryption format version {version} (chunk {chunk}) is not supported"),
            ));
        }
        let found = u64::from_le_bytes(h[16..24].try_into().expect("8 bytes"));
        if found != self.fingerprint {
            return Err(StoreError::new(
                StoreErrorKind::Permanent,
                "get",
                key,
                format!("encrypted with another key (fingerprint {found:016x}, this key is {:016x}): give the pool's key", self.fingerprint),
            ));
        }
        Ok(u64::from_le_bytes(h[24..32].try_into().expect("8 bytes")))
    }

    fn seal(&self, key: &str, plain: &[u8]) -> StoreResult<Vec<u8>> {
        seal_chunks(&self.cipher, self.fingerprint, key, plain, |_| {
            let mut nonce = [0u8; NONCE_BYTES as usize];
            nonce[..8].copy_from_slice(&self.rng.next_u64().to_le_bytes());
            nonce[8..].copy_from_slice(&(self.rng.next_u64() as u32).to_le_bytes());
            nonce
        })
    }

    /// Opens whole chunks `first..` held in `sealed`.
    fn open_chunks(&self, key: &str, first: u64, sealed: &[u8]) -> StoreResult<Vec<u8>> {
        if !(sealed.len() as u64).is_multiple_of(CHUNK_SEALED_BYTES) {
            return Err(corrupt(
                "get",
                key,
                format!("encrypted object holds a partial chunk ({} bytes)", sealed.len()),
            ));
        }
        let mut out = Vec::with_capacity(sealed.len());
        for (i, chunk) in sealed.chunks(CHUNK_SEALED_BYTES as usize).enumerate() {
            let index = first + i as u64;
            let (nonce, body) = chunk.split_at(NONCE_BYTES as usize);
            let plain = self
                .cipher
                .decrypt(Nonce::from_slice(nonce), Payload { msg: body, aad: &aad(key, index) })
                .map_err(|_| corrupt("get", key, format!("encrypted chunk {index} failed authentication (corrupt, moved or wrong key)")))?;
            out.extend_from_slice(&plain);
        }
        Ok(out)
    }
}

#[async_trait::async_trait]
impl Store for EncryptedStore {
    async fn put(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        let sealed = self.seal(key, &data)?;
        self.inner.put(key, Bytes::from(sealed), mode).await
    }

    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        let sealed = self.inner.get(key).await?;
        let plain_bytes = self.check_header(key, &sealed)?;
        // Checked: a header claiming close to u64::MAX plain bytes overflowed the product
        // (found by fuzz/fuzz_targets/engine_encrypted.rs).
        let expected_bytes = chunk_count(plain_bytes)
            .checked_mul(CHUNK_SEALED_BYTES)
            .and_then(|n| n.checked_add(HEADER_BYTES));
        if expected_bytes != Some(sealed.len() as u64) {
            return Err(corrupt(
                "get",
                key,
                format!(
                    "encrypted object is {} bytes, its header says {plain_bytes} plain bytes",
                    sealed.len()
                ),
            ));
        }
        let mut plain = self.open_chunks(key, 0, &sealed[HEADER_BYTES as usize..])?;
        plain.truncate(plain_bytes as usize);
        Ok(Bytes::from(plain))
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        if range.start >= range.end {
            return Ok(Bytes::new());
        }
        let (first, last) = (range.start / CHUNK_PLAIN_BYTES, (range.end - 1) / CHUNK_PLAIN_BYTES);
        let sealed_start = HEADER_BYTES + first * CHUNK_SEALED_BYTES;
        let sealed_end = HEADER_BYTES + (last + 1) * CHUNK_SEALED_BYTES;
        let sealed = self.inner.get_range(key, sealed_start..sealed_end).await?;
        let plain = self.open_chunks(key, first, &sealed)?;
        let skip = (range.start - first * CHUNK_PLAIN_BYTES) as usize;
        let want = (range.end - range.start) as usize;
        if plain.len() < skip + want {
            return Err(StoreError::new(
                StoreErrorKind::Permanent,
                "get_range",
                key,
                format!("range {range:?} is past the end of the object"),
            ));
        }
        Ok(Bytes::from(plain).slice(skip..skip + want))
    }

    async fn head(&self, key: &str) -> StoreResult<u64> {
        // The plaintext length is in the header: one small ranged GET (the engine never calls
        // this on a hot path).
        let h = self.inner.get_range(key, 0..HEADER_BYTES).await?;
        self.check_header(key, &h)
    }

    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.inner.delete(key).await
    }

    async fn list(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>> {
        Ok(self
            .inner
            .list(prefix)
            .await?
            .into_iter()
            .map(|(k, n)| (k, plain_len_bound(n)))
            .collect())
    }

    fn describe(&self) -> String {
        format!("{} (encrypted, key {:016x})", self.inner.describe(), self.fingerprint)
    }
}

#[cfg(test)]
#[path = "encrypted_tests.rs"]
mod tests;
