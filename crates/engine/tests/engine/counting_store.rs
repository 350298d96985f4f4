//! A store wrapper for tests that count the requests a pool makes: ranged GETs (block and page
//! reads), how many of them were in flight at once (`big_frees`, `map_fetch`), and the keys of
//! PUTs and ranged GETs in the order they were issued (`behaviour`, `map_fetch`); it can hold
//! every DELETE until released (`sync_sharing`).

use async_trait::async_trait;
use bytes::Bytes;
use fardisk_engine::objstore::{PutMode, Store, StoreResult};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Counts ranged GETs and the most under way at once, from `new` or the last `reset` on.
#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<dyn Store>,
    pub gets: AtomicU64,
    in_flight: AtomicU64,
    pub in_flight_max: AtomicU64,
    /// Keys of the PUTs issued, in order.
    pub puts: Mutex<Vec<String>>,
    /// Keys and byte ranges of the ranged GETs issued, in order.
    pub get_ranges: Mutex<Vec<(String, Range<u64>)>>,
    /// While set, a DELETE waits (counted in `deletes_waiting`) until it is cleared.
    deletes_held: std::sync::atomic::AtomicBool,
    pub deletes_waiting: AtomicU64,
    deletes_released: tokio::sync::Notify,
}

impl CountingStore {
    pub fn new(inner: Arc<dyn Store>) -> Self {
        let zero = || AtomicU64::new(0);
        CountingStore {
            inner,
            gets: zero(),
            in_flight: zero(),
            in_flight_max: zero(),
            puts: Mutex::default(),
            get_ranges: Mutex::default(),
            deletes_held: Default::default(),
            deletes_waiting: zero(),
            deletes_released: tokio::sync::Notify::new(),
        }
    }

    /// Holds every DELETE from now on (true) or releases them (false).
    pub fn hold_deletes(&self, held: bool) {
        self.deletes_held.store(held, Ordering::SeqCst);
        if !held {
            self.deletes_released.notify_waiters();
        }
    }

    pub fn reset(&self) {
        self.in_flight_max.store(0, Ordering::SeqCst);
        self.gets.store(0, Ordering::SeqCst);
        self.puts.lock().expect("puts").clear();
        self.get_ranges.lock().expect("get ranges").clear();
    }

    pub fn put_keys(&self) -> Vec<String> {
        self.puts.lock().expect("puts").clone()
    }
}

/// One GET under way in `in_flight`, until dropped.
struct InFlight<'a>(&'a AtomicU64);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl Store for CountingStore {
    async fn put(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        self.puts.lock().expect("puts").push(key.to_string());
        self.inner.put(key, data, mode).await
    }
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        self.inner.get(key).await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        self.get_ranges.lock().expect("get ranges").push((key.to_string(), range.clone()));
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.in_flight_max.fetch_max(now, Ordering::SeqCst);
        // No longer under way once it ends or its reader drops it (a guess not needed).
        let _under_way = InFlight(&self.in_flight);
        // A store far away: the other reads of the same round trip start before this one ends.
        tokio::task::yield_now().await;
        self.inner.get_range(key, range).await
    }
    async fn head(&self, key: &str) -> StoreResult<u64> {
        self.inner.head(key).await
    }
    async fn delete(&self, key: &str) -> StoreResult<()> {
        if self.deletes_held.load(Ordering::SeqCst) {
            self.deletes_waiting.fetch_add(1, Ordering::SeqCst);
            loop {
                let released = self.deletes_released.notified();
                if !self.deletes_held.load(Ordering::SeqCst) {
                    break;
                }
                released.await;
            }
            self.deletes_waiting.fetch_sub(1, Ordering::SeqCst);
        }
        self.inner.delete(key).await
    }
    async fn list(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>> {
        self.inner.list(prefix).await
    }
    fn describe(&self) -> String {
        format!("counting({})", self.inner.describe())
    }
}
