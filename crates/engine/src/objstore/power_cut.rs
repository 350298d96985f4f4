//! The host of a `file://` store losing power, for the simulation: a local file system keeps what
//! it was told in its page cache and writes it back when it likes, so after a power cut a file
//! that was never fsynced may be there, gone (the previous content is back), or torn (cut short
//! or with a zeroed tail), and a delete that was never fsynced may be undone.
//!
//! Which mutations are durable when they return is not decided here: it is what the real
//! `file://` backend does ([`FILE_STORE_FSYNC`], read by `url.rs` when it opens one), so the
//! simulation checks the durability the product actually has. object_store's `LocalFileSystem`
//! with fsync syncs the staged file, links or renames it into place and syncs the directory
//! before a PUT returns; it never syncs a delete.

use super::url::FILE_STORE_FSYNC;
use super::{Body, CutBlock, PutMode, Store, StoreResult};
use crate::rng::Rng;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

/// What a power cut did, for the simulation's report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PowerCutCounts {
    pub power_cuts: u64,
    /// Objects (or deletes) that were not yet durable when the power went.
    pub volatile_at_cut: u64,
    /// Of those: back to their previous state (a PUT vanished, a delete undone).
    pub reverted: u64,
    /// Of those: cut short or with a zeroed tail.
    pub torn: u64,
}

#[derive(Debug)]
pub struct PowerCutStore {
    inner: Arc<dyn Store>,
    /// Whether a PUT is durable when it returns (deletes never are).
    puts_durable: bool,
    /// Keys changed since they were last durable, with their durable content (None: absent).
    volatile: Mutex<BTreeMap<String, Option<Bytes>>>,
    counts: Mutex<PowerCutCounts>,
}

impl PowerCutStore {
    /// A local directory as `open_store_url("file://...")` opens it, over `inner` as its disk.
    pub fn file_host(inner: Arc<dyn Store>) -> Self {
        Self::new(inner, FILE_STORE_FSYNC)
    }

    pub fn new(inner: Arc<dyn Store>, puts_durable: bool) -> Self {
        PowerCutStore {
            inner,
            puts_durable,
            volatile: Mutex::new(BTreeMap::new()),
            counts: Mutex::new(PowerCutCounts::default()),
        }
    }

    pub fn counts(&self) -> PowerCutCounts {
        *self.counts.lock()
    }

    /// Objects whose current state is not durable yet.
    pub fn volatile_keys(&self) -> usize {
        self.volatile.lock().len()
    }

    /// Remembers the durable state of `key` before its first non-durable change.
    async fn remember(&self, key: &str) -> StoreResult<()> {
        if self.volatile.lock().contains_key(key) {
            return Ok(());
        }
        let durable = match self.inner.get(key).await {
            Ok(b) => Some(b),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
        self.volatile.lock().entry(key.to_string()).or_insert(durable);
        Ok(())
    }

    /// The power goes: every change not yet durable is kept (written back in time), reverted or
    /// torn, each decided by `rng`, in key order so a seed replays.
    pub async fn power_cut(&self, rng: &Rng) -> StoreResult<PowerCutCounts> {
        let volatile = std::mem::take(&mut *self.volatile.lock());
        let mut cut = PowerCutCounts {
            power_cuts: 1,
            volatile_at_cut: volatile.len() as u64,
            ..Default::default()
        };
        for (key, durable) in volatile {
            let current = match self.inner.get(&key).await {
                Ok(b) => Some(b),
                Err(e) if e.is_not_found() => None,
                Err(e) => return Err(e),
            };
            match rng.below(3) {
                0 => {} // Written back before the power went.
                1 => {
                    cut.reverted += 1;
                    self.inner.delete(&key).await?;
                    if let Some(old) = durable {
                        self.inner.put(&key, old, PutMode::Overwrite).await?;
                    }
                }
                _ => match current {
                    Some(now) if !now.is_empty() => {
                        cut.torn += 1;
                        let keep = rng.below(now.len() as u64) as usize;
                        let torn = if rng.chance(0.5) {
                            now.slice(..keep) // Cut short (0 bytes: the inode made it, the data did not).
                        } else {
                            let mut v = now.to_vec();
                            v[keep..].fill(0); // The size made it, the last pages did not.
                            Bytes::from(v)
                        };
                        self.inner.put(&key, torn, PutMode::Overwrite).await?;
                    }
                    _ => {}
                },
            }
        }
        let mut total = self.counts.lock();
        total.power_cuts += cut.power_cuts;
        total.volatile_at_cut += cut.volatile_at_cut;
        total.reverted += cut.reverted;
        total.torn += cut.torn;
        Ok(cut)
    }
}

#[async_trait::async_trait]
impl Store for PowerCutStore {
    async fn put(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        if !self.puts_durable {
            self.remember(key).await?;
        }
        self.inner.put(key, data, mode).await
    }

    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        self.inner.get(key).await
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        self.inner.get_range(key, range).await
    }

    async fn get_range_body(&self, key: &str, range: Range<u64>) -> StoreResult<Body> {
        self.inner.get_range_body(key, range).await
    }

    async fn get_range_blocks(
        &self,
        key: &str,
        range: Range<u64>,
        ends: &[u64],
    ) -> StoreResult<Vec<CutBlock>> {
        self.inner.get_range_blocks(key, range, ends).await
    }

    async fn head(&self, key: &str) -> StoreResult<u64> {
        self.inner.head(key).await
    }

    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.remember(key).await?;
        self.inner.delete(key).await
    }

    async fn list(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>> {
        self.inner.list(prefix).await
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(puts_durable: bool) -> PowerCutStore {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mem = super::super::open_store_url(&format!("memory://power-cut-{n}"), true).unwrap();
        PowerCutStore::new(mem, puts_durable)
    }

    #[tokio::test]
    async fn durable_puts_survive_every_cut_and_deletes_may_come_back() {
        for seed in 0..32 {
            let s = store(true);
            s.put("a", Bytes::from_static(b"first"), PutMode::Create).await.unwrap();
            s.put("gone", Bytes::from_static(b"old"), PutMode::Create).await.unwrap();
            s.delete("gone").await.unwrap();
            s.power_cut(&Rng::new(seed)).await.unwrap();
            assert_eq!(s.get("a").await.unwrap(), Bytes::from_static(b"first"));
            if let Ok(b) = s.get("gone").await {
                assert_eq!(
                    b,
                    Bytes::from_static(b"old"),
                    "an undone delete brings back the whole old object"
                );
            }
        }
    }

    #[tokio::test]
    async fn unsynced_puts_vanish_or_tear_at_a_cut() {
        let (mut vanished, mut torn) = (0, 0);
        for seed in 0..64 {
            let s = store(false);
            s.put("head", Bytes::from_static(b"txg 1"), PutMode::Overwrite).await.unwrap();
            s.power_cut(&Rng::new(seed)).await.unwrap(); // Starts from a durable "txg 1" or less.
            let before = s.get("head").await.ok();
            s.put("head", Bytes::from_static(b"txg 2"), PutMode::Overwrite).await.unwrap();
            s.put("roots/2", Bytes::from_static(b"root two"), PutMode::Create).await.unwrap();
            s.power_cut(&Rng::new(seed ^ 0xabc)).await.unwrap();
            match s.get("roots/2").await {
                Err(_) => vanished += 1,
                Ok(b) if b[..] != b"root two"[..] => torn += 1,
                Ok(_) => {}
            }
            let head = s.get("head").await.ok();
            assert!(
                head == before
                    || head.as_deref() == Some(&b"txg 2"[..])
                    || head.as_ref().is_some_and(|h| h.len() <= 5),
                "{head:?}"
            );
        }
        assert!(vanished > 0 && torn > 0, "vanished {vanished}, torn {torn}");
    }
}
