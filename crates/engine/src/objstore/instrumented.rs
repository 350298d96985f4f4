//! Counts requests, bytes, errors and latency per kind of request: the numbers behind `iostat`,
//! metrics and the PUT/GET-per-GiB figures in BENCHMARKS.md.

use super::{Body, CutBlock, PutMode, Store, StoreResult};
use crate::clock::Clock;
use bytes::Bytes;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Latency histogram bucket upper bounds in microseconds (the last bucket is everything above).
pub const LATENCY_BUCKETS_US: [u64; 12] =
    [250, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 250_000, 1_000_000, 5_000_000];

#[derive(Debug, Default)]
pub struct OpStats {
    pub requests: AtomicU64,
    pub errors: AtomicU64,
    pub bytes: AtomicU64,
    pub latency_us_total: AtomicU64,
    pub latency_buckets: [AtomicU64; 13],
    /// Requests of this kind under way now (each attempt of a retried one counts once).
    pub in_flight: AtomicU64,
    /// The most that were ever under way at once since import.
    pub in_flight_max: AtomicU64,
    /// Bytes asked for by the ranged GETs under way now (a benchmark samples it to see how much
    /// of the store's bandwidth a reader keeps busy; other requests' sizes are not known ahead).
    pub ranged_bytes_in_flight: AtomicU64,
}

/// Counts one request as under way until dropped (also when its future is dropped unfinished),
/// with the bytes a ranged GET asks for (0 for other requests, whose size is not known ahead).
struct InFlight<'a>(&'a OpStats, u64);

impl<'a> InFlight<'a> {
    fn start(o: &'a OpStats) -> InFlight<'a> {
        InFlight::start_ranged(o, 0)
    }

    fn start_ranged(o: &'a OpStats, bytes: u64) -> InFlight<'a> {
        let now = o.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        o.in_flight_max.fetch_max(now, Ordering::Relaxed);
        if bytes > 0 {
            o.ranged_bytes_in_flight.fetch_add(bytes, Ordering::Relaxed);
        }
        InFlight(o, bytes)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        if self.1 > 0 {
            self.0.ranged_bytes_in_flight.fetch_sub(self.1, Ordering::Relaxed);
        }
    }
}

impl OpStats {
    fn record(&self, bytes: u64, latency_us: u64, ok: bool) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.latency_us_total.fetch_add(latency_us, Ordering::Relaxed);
        let i = LATENCY_BUCKETS_US
            .iter()
            .position(|&b| latency_us <= b)
            .unwrap_or(LATENCY_BUCKETS_US.len());
        self.latency_buckets[i].fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Debug, Default)]
pub struct StoreStats {
    pub put: OpStats,
    pub get: OpStats,
    pub head: OpStats,
    pub delete: OpStats,
    pub list: OpStats,
    /// Monotonic time of the first of the failures in a row that did not reach the store (0 while
    /// it answers): how long it has been away, for `status`, before any retry budget runs out.
    pub unreachable_since_us: AtomicU64,
}

impl StoreStats {
    /// Any answer (an error the store sent is one) means it is reachable.
    fn note_reach<T>(&self, r: &StoreResult<T>, now_us: u64) {
        match r {
            Err(e) if e.is_transient() => {
                let _ = self.unreachable_since_us.compare_exchange(
                    0,
                    now_us.max(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            _ => self.unreachable_since_us.store(0, Ordering::Relaxed),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct OpSnapshot {
    pub requests: u64,
    pub errors: u64,
    pub bytes: u64,
    pub latency_us_total: u64,
    pub in_flight: u64,
    pub in_flight_max: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct StoreStatsSnapshot {
    pub put: OpSnapshot,
    pub get: OpSnapshot,
    pub head: OpSnapshot,
    pub delete: OpSnapshot,
    pub list: OpSnapshot,
    pub put_latency_buckets: Vec<u64>,
    pub get_latency_buckets: Vec<u64>,
}

fn snap(o: &OpStats) -> OpSnapshot {
    OpSnapshot {
        requests: o.requests.load(Ordering::Relaxed),
        errors: o.errors.load(Ordering::Relaxed),
        bytes: o.bytes.load(Ordering::Relaxed),
        latency_us_total: o.latency_us_total.load(Ordering::Relaxed),
        in_flight: o.in_flight.load(Ordering::Relaxed),
        in_flight_max: o.in_flight_max.load(Ordering::Relaxed),
    }
}

impl StoreStats {
    pub fn snapshot(&self) -> StoreStatsSnapshot {
        let buckets =
            |o: &OpStats| o.latency_buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        StoreStatsSnapshot {
            put: snap(&self.put),
            get: snap(&self.get),
            head: snap(&self.head),
            delete: snap(&self.delete),
            list: snap(&self.list),
            put_latency_buckets: buckets(&self.put),
            get_latency_buckets: buckets(&self.get),
        }
    }
}

#[derive(Debug)]
pub struct InstrumentedStore {
    inner: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    pub stats: Arc<StoreStats>,
}

impl InstrumentedStore {
    pub fn new(inner: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        InstrumentedStore { inner, clock, stats: Arc::default() }
    }

    /// A ranged GET of either shape, counted and timed alike.
    async fn ranged<T, F>(
        &self,
        range: Range<u64>,
        get: impl FnOnce(Range<u64>) -> F,
        len: impl Fn(&T) -> u64,
    ) -> StoreResult<T>
    where
        F: std::future::Future<Output = StoreResult<T>>,
    {
        let t = self.clock.mono_us();
        let r = {
            let bytes = range.end.saturating_sub(range.start);
            let _under_way = InFlight::start_ranged(&self.stats.get, bytes);
            get(range).await
        };
        let n = r.as_ref().map(&len).unwrap_or(0);
        self.stats.get.record(n, self.clock.mono_us() - t, r.is_ok());
        self.stats.note_reach(&r, self.clock.mono_us());
        r
    }
}

#[async_trait::async_trait]
impl Store for InstrumentedStore {
    async fn put(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        let t = self.clock.mono_us();
        let n = data.len() as u64;
        let r = {
            let _under_way = InFlight::start(&self.stats.put);
            self.inner.put(key, data, mode).await
        };
        // A create-only PUT that finds the key taken is an answer, not a failure.
        let ok =
            r.is_ok() || r.as_ref().is_err_and(|e| e.kind == super::StoreErrorKind::AlreadyExists);
        self.stats.put.record(n, self.clock.mono_us() - t, ok);
        self.stats.note_reach(&r, self.clock.mono_us());
        r
    }
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        let t = self.clock.mono_us();
        let r = {
            let _under_way = InFlight::start(&self.stats.get);
            self.inner.get(key).await
        };
        let n = r.as_ref().map(|b| b.len() as u64).unwrap_or(0);
        self.stats.get.record(
            n,
            self.clock.mono_us() - t,
            r.is_ok() || r.as_ref().is_err_and(|e| e.is_not_found()),
        );
        self.stats.note_reach(&r, self.clock.mono_us());
        r
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        self.ranged(range, |r| self.inner.get_range(key, r), |b| b.len() as u64).await
    }
    async fn get_range_body(&self, key: &str, range: Range<u64>) -> StoreResult<Body> {
        self.ranged(range, |r| self.inner.get_range_body(key, r), Body::len).await
    }
    async fn get_range_blocks(
        &self,
        key: &str,
        range: Range<u64>,
        ends: &[u64],
    ) -> StoreResult<Vec<CutBlock>> {
        let len = |blocks: &Vec<CutBlock>| blocks.iter().map(|b| b.bytes.len() as u64).sum();
        self.ranged(range, |r| self.inner.get_range_blocks(key, r, ends), len).await
    }
    async fn head(&self, key: &str) -> StoreResult<u64> {
        let t = self.clock.mono_us();
        let r = {
            let _under_way = InFlight::start(&self.stats.head);
            self.inner.head(key).await
        };
        self.stats.head.record(
            0,
            self.clock.mono_us() - t,
            r.is_ok() || r.as_ref().is_err_and(|e| e.is_not_found()),
        );
        self.stats.note_reach(&r, self.clock.mono_us());
        r
    }
    async fn delete(&self, key: &str) -> StoreResult<()> {
        let t = self.clock.mono_us();
        let r = {
            let _under_way = InFlight::start(&self.stats.delete);
            self.inner.delete(key).await
        };
        self.stats.delete.record(0, self.clock.mono_us() - t, r.is_ok());
        self.stats.note_reach(&r, self.clock.mono_us());
        r
    }
    async fn list(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>> {
        let t = self.clock.mono_us();
        let r = {
            let _under_way = InFlight::start(&self.stats.list);
            self.inner.list(prefix).await
        };
        self.stats.list.record(0, self.clock.mono_us() - t, r.is_ok());
        self.stats.note_reach(&r, self.clock.mono_us());
        r
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objstore::open_store_url;
    use tokio::sync::Semaphore;

    /// A store whose ranged GETs wait for a permit, so a test can look at them under way.
    #[derive(Debug)]
    struct Held(Arc<dyn Store>, Arc<Semaphore>);

    #[async_trait::async_trait]
    impl Store for Held {
        async fn put(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
            self.0.put(key, data, mode).await
        }
        async fn get(&self, key: &str) -> StoreResult<Bytes> {
            self.0.get(key).await
        }
        async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
            let _go = self.1.acquire().await.expect("open");
            self.0.get_range(key, range).await
        }
        async fn head(&self, key: &str) -> StoreResult<u64> {
            self.0.head(key).await
        }
        async fn delete(&self, key: &str) -> StoreResult<()> {
            self.0.delete(key).await
        }
        async fn list(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>> {
            self.0.list(prefix).await
        }
        fn describe(&self) -> String {
            "held".into()
        }
    }

    #[tokio::test]
    async fn ranged_get_bytes_count_as_under_way_until_answered_or_dropped() {
        let gate = Arc::new(Semaphore::new(0));
        let inner = open_store_url("memory://ranged-in-flight", true).expect("store");
        let held: Arc<dyn Store> = Arc::new(Held(inner, gate.clone()));
        let store =
            Arc::new(InstrumentedStore::new(held, Arc::new(crate::clock::SystemClock::new())));
        store.put("k", Bytes::from(vec![7u8; 8192]), PutMode::Overwrite).await.expect("put");
        let under_way = || store.stats.get.ranged_bytes_in_flight.load(Ordering::Relaxed);
        let (s1, s2) = (store.clone(), store.clone());
        let a = tokio::spawn(async move { s1.get_range("k", 0..4096).await });
        let b = tokio::spawn(async move { s2.get_range("k", 4096..5120).await });
        for _ in 0..1_000 {
            if under_way() == 5120 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(under_way(), 5120, "both GETs' bytes");
        b.abort();
        let _ = b.await;
        assert_eq!(under_way(), 4096, "an abandoned GET counts no more");
        gate.add_permits(1);
        assert_eq!(a.await.expect("task").expect("get").len(), 4096);
        assert_eq!(under_way(), 0);
    }
}
