//! Shared pieces of fardisk's cargo-fuzz targets (fuzz_targets/*.rs): the seed corpus each
//! target starts from, and a tiny in-memory object store for the encryption envelope.
//!
//! Seeds are valid encodings made by the real encoders, so libFuzzer starts past the magic and
//! checksum checks. They are not committed: a target writes its seeds when it starts with
//! FARDISK_FUZZ_SEEDS_DIR set (scripts/fuzz.sh does), so they always match today's format.

pub mod patches;
pub mod seeds;

use bytes::Bytes;
use fardisk_engine::objstore::{PutMode, Store, StoreError, StoreErrorKind, StoreResult};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Mutex;

/// Writes `seeds()` as files under `$FARDISK_FUZZ_SEEDS_DIR/<target>/` when that variable is
/// set; called from a target's `init:` block, which libFuzzer runs before it reads the corpus
/// directories, so a run that names that directory as a corpus starts from these seeds.
pub fn write_seeds(target: &str, seeds: impl FnOnce() -> Vec<Vec<u8>>) {
    let Some(root) = std::env::var_os("FARDISK_FUZZ_SEEDS_DIR") else { return };
    let dir = std::path::Path::new(&root).join(target);
    let result = std::fs::create_dir_all(&dir).and_then(|()| {
        for (i, seed) in seeds().iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:03}")), seed)?;
        }
        Ok(())
    });
    if let Err(err) = result {
        // A missing seed corpus makes the run weaker, not wrong: say so and fuzz anyway.
        eprintln!("fardisk-fuzz: cannot write seeds to {}: {err}", dir.display());
    }
}

/// Runs a future that never waits on I/O or timers (the stores here answer at once).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}

/// An object store in a `HashMap`. A ranged read past the end returns what exists, like a
/// short read from a damaged store, so the envelope's own length checks are exercised.
#[derive(Debug, Default)]
pub struct MemStore {
    objects: Mutex<HashMap<String, Bytes>>,
}

impl MemStore {
    fn object(&self, op: &'static str, key: &str) -> StoreResult<Bytes> {
        let objects = self.objects.lock().expect("store lock");
        objects
            .get(key)
            .cloned()
            .ok_or_else(|| StoreError::new(StoreErrorKind::NotFound, op, key, "no such object"))
    }
}

#[async_trait::async_trait]
impl Store for MemStore {
    async fn put(&self, key: &str, data: Bytes, _mode: PutMode) -> StoreResult<()> {
        self.objects.lock().expect("store lock").insert(key.to_string(), data);
        Ok(())
    }
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        self.object("get", key)
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        let object = self.object("get_range", key)?;
        let len = object.len() as u64;
        if range.start > range.end || range.start > len {
            return Err(StoreError::new(
                StoreErrorKind::Permanent,
                "get_range",
                key,
                "range past the end",
            ));
        }
        Ok(object.slice(range.start as usize..range.end.min(len) as usize))
    }
    async fn head(&self, key: &str) -> StoreResult<u64> {
        Ok(self.object("head", key)?.len() as u64)
    }
    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.objects.lock().expect("store lock").remove(key);
        Ok(())
    }
    async fn list(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>> {
        let objects = self.objects.lock().expect("store lock");
        let mut out: Vec<_> = objects
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.len() as u64))
            .collect();
        out.sort();
        Ok(out)
    }
    fn describe(&self) -> String {
        "memory (fuzz)".to_string()
    }
}

/// Little-endian u64 at `at`, or 0 past the end (targets read optional parameters with it).
pub fn le_u64(data: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    if let Some(s) = data.get(at..) {
        let n = s.len().min(8);
        b[..n].copy_from_slice(&s[..n]);
    }
    u64::from_le_bytes(b)
}
