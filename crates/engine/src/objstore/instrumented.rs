//! Counts requests, bytes, errors and latency per kind of request: the numbers behind `iostat`,
//! metrics and the PUT/GET-per-GiB figures in BENCHMARKS.md.

use super::{PutMode, Store, StoreResult};
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
}

/// Counts one request as under way until dropped (also when its future is dropped unfinished).
struct InFlight<'a>(&'a OpStats);

impl<'a> InFlight<'a> {
    fn start(o: &'a OpStats) -> InFlight<'a> {
        let now = o.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        o.in_flight_max.fetch_max(now, Ordering::Relaxed);
        InFlight(o)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
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
        let t = self.clock.mono_us();
        let r = {
            let _under_way = InFlight::start(&self.stats.get);
            self.inner.get_range(key, range).await
        };
        let n = r.as_ref().map(|b| b.len() as u64).unwrap_or(0);
        self.stats.get.record(n, self.clock.mono_us() - t, r.is_ok());
        self.stats.note_reach(&r, self.clock.mono_us());
        r
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
