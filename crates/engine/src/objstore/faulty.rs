//! Fault injection for tests and the simulation: fail a chosen mutation (a "crash" between the PUTs
//! of one txg), lose the response of an applied mutation (the ambiguous-PUT case), fail requests
//! at random, take the whole store away (an outage) and add latency on the injected clock.
//!
//! Every random decision is a hash of (seed, operation, key, how many times that operation was
//! asked of that key), not a draw from one shared stream: concurrent requests may reach the store
//! in either order, and a seed must still fail the same requests when it is replayed.

use super::{PutMode, Store, StoreError, StoreErrorKind, StoreResult};
use crate::clock::Clock;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Mutations remembered by `recent_mutations`.
const RECENT_MAX: usize = 4096;

#[derive(Debug, Clone, Default)]
pub struct FaultPlan {
    /// After this many successful mutations (PUT/DELETE), every further mutation fails with a
    /// permanent error, as if the process had died at that instant.
    pub crash_after_mutations: Option<u64>,
    /// Probability that an applied mutation's response is lost (the caller sees a transient error).
    pub lost_response_rate: f64,
    /// Probability that any request fails transiently before being applied.
    pub error_rate: f64,
    /// While true every request fails transiently before reaching the store (the network is down).
    pub outage: bool,
    /// Every request fails transiently until the injected clock (`with_clock`) reaches this
    /// monotonic time: an outage that ends by itself while the engine retries.
    pub outage_until_us: u64,
    /// Round-trip time added to every request, plus up to `jitter` more; needs `with_clock`.
    pub latency: Duration,
    pub jitter: Duration,
    /// Probability that a create-only PUT is answered "already exists" without being applied, as
    /// S3 answers 409 ConditionalRequestConflict to a conditional write that races an earlier
    /// attempt of its own still in flight (which object_store reports as AlreadyExists). Here the
    /// earlier attempt never lands: the caller must find out by reading back, then retry.
    pub conflict_rate: f64,
}

/// What the store did to its callers, for reports and for checking that a replay matched.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub mutations: u64,
    pub injected_errors: u64,
    pub lost_responses: u64,
    pub outage_refusals: u64,
    pub crash_refusals: u64,
    pub conflicts: u64,
    /// A running hash of every mutation that reached the store (operation, key, size) in order.
    pub mutation_trace: u64,
}

#[derive(Debug, Default)]
struct Counters {
    injected_errors: AtomicU64,
    lost_responses: AtomicU64,
    outage_refusals: AtomicU64,
    crash_refusals: AtomicU64,
    conflicts: AtomicU64,
}

#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn Store>,
    plan: Mutex<FaultPlan>,
    /// (mutations applied, trace hash), updated together.
    applied: Mutex<(u64, u64)>,
    /// How often each (operation, key) was asked: the per-request decision's input. Grows with
    /// the keys a test touches; only tests and the simulation use this store.
    asked: Mutex<HashMap<(&'static str, String), u32>>,
    counters: Counters,
    /// The newest mutations as "OP key len" lines, for finding where two replays diverged.
    recent: Mutex<std::collections::VecDeque<String>>,
    /// Every request with its clock time and outcome, and the notes, when asked for
    /// (`with_request_trace`): the first line two replays of a seed differ on.
    requests: Mutex<Option<RequestTrace>>,
    clock: Option<Arc<dyn Clock>>,
    seed: u64,
}

/// The first `max` lines of a request trace, and how many more there were.
#[derive(Debug, Default)]
struct RequestTrace {
    lines: Vec<String>,
    max: usize,
    dropped: u64,
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn Store>, plan: FaultPlan, seed: u64) -> Self {
        FaultyStore {
            inner,
            plan: Mutex::new(plan),
            applied: Mutex::new((0, 0)),
            asked: Default::default(),
            counters: Counters::default(),
            recent: Default::default(),
            requests: Mutex::new(None),
            clock: None,
            seed,
        }
    }

    /// Records the first `max` requests (operation, key, injected-clock time, outcome) and
    /// notes, for comparing two replays of a seed (`request_trace`).
    pub fn with_request_trace(self, max: usize) -> Self {
        *self.requests.lock() = Some(RequestTrace { lines: Vec::new(), max, dropped: 0 });
        self
    }

    /// The recorded requests and notes in order, and how many more were left out (see
    /// `with_request_trace`; empty without it).
    pub fn request_trace(&self) -> (Vec<String>, u64) {
        match &*self.requests.lock() {
            Some(t) => (t.lines.clone(), t.dropped),
            None => (Vec::new(), 0),
        }
    }

    fn trace(&self, line: impl FnOnce() -> String) {
        if let Some(t) = &mut *self.requests.lock() {
            if t.lines.len() < t.max {
                t.lines.push(line());
            } else {
                t.dropped += 1;
            }
        }
    }

    fn now_us(&self) -> u64 {
        self.clock.as_ref().map_or(0, |c| c.mono_us())
    }

    /// Latency in the plan is slept on this clock (a `ManualClock` makes it cost no real time).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    pub fn set_plan(&self, plan: FaultPlan) {
        *self.plan.lock() = plan;
    }

    pub fn plan(&self) -> FaultPlan {
        self.plan.lock().clone()
    }

    pub fn mutations(&self) -> u64 {
        self.applied.lock().0
    }

    pub fn counts(&self) -> FaultCounts {
        let (mutations, mutation_trace) = *self.applied.lock();
        let c = &self.counters;
        FaultCounts {
            mutations,
            injected_errors: c.injected_errors.load(Ordering::Relaxed),
            lost_responses: c.lost_responses.load(Ordering::Relaxed),
            outage_refusals: c.outage_refusals.load(Ordering::Relaxed),
            crash_refusals: c.crash_refusals.load(Ordering::Relaxed),
            conflicts: c.conflicts.load(Ordering::Relaxed),
            mutation_trace,
        }
    }

    /// Adds a marker line to the recent mutations (a simulation step), outside the trace hash.
    pub fn note(&self, line: String) {
        self.trace(|| format!("# {line}"));
        let mut recent = self.recent.lock();
        if recent.len() == RECENT_MAX {
            recent.pop_front();
        }
        recent.push_back(line);
    }

    /// The newest mutations (at most `RECENT_MAX`), oldest first.
    pub fn recent_mutations(&self) -> Vec<String> {
        self.recent.lock().iter().cloned().collect()
    }

    /// A number in [0, 1) fixed by the seed, the request and how often it was asked before.
    fn roll(&self, op: &'static str, key: &str, salt: u64) -> f64 {
        let nth = {
            let mut asked = self.asked.lock();
            let n = asked.entry((op, key.to_string())).or_insert(0);
            *n += 1;
            *n
        };
        let mut h = xxhash_rust::xxh3::xxh3_64_with_seed(key.as_bytes(), self.seed ^ salt);
        h = xxhash_rust::xxh3::xxh3_64_with_seed(&[op.as_bytes(), &nth.to_le_bytes()].concat(), h);
        (h >> 11) as f64 / (1u64 << 53) as f64
    }

    async fn before(&self, op: &'static str, key: &str, mutation: bool) -> StoreResult<()> {
        let r = self.decide(op, key, mutation).await;
        self.trace(|| {
            let outcome = match &r {
                Ok(()) => "ok".to_string(),
                Err(e) => e.message.clone(),
            };
            format!("{op} {key} @{} {outcome}", self.now_us())
        });
        r
    }

    async fn decide(&self, op: &'static str, key: &str, mutation: bool) -> StoreResult<()> {
        let plan = self.plan.lock().clone();
        if let Some(clock) = &self.clock {
            let jitter_us = (plan.jitter.as_micros() as f64 * self.roll(op, key, 0x7177)) as u64;
            let delay = plan.latency + Duration::from_micros(jitter_us);
            if !delay.is_zero() {
                clock.sleep(delay).await;
            }
        }
        if mutation {
            if let Some(limit) = plan.crash_after_mutations {
                if self.applied.lock().0 >= limit {
                    self.counters.crash_refusals.fetch_add(1, Ordering::Relaxed);
                    return Err(StoreError::new(
                        StoreErrorKind::Permanent,
                        op,
                        key,
                        "injected crash",
                    ));
                }
            }
        }
        let in_window = self.clock.as_ref().is_some_and(|c| c.mono_us() < plan.outage_until_us);
        if plan.outage || in_window {
            self.counters.outage_refusals.fetch_add(1, Ordering::Relaxed);
            return Err(StoreError::new(StoreErrorKind::Transient, op, key, "injected outage"));
        }
        if plan.error_rate > 0.0 && self.roll(op, key, 0xe770) < plan.error_rate {
            self.counters.injected_errors.fetch_add(1, Ordering::Relaxed);
            return Err(StoreError::new(StoreErrorKind::Transient, op, key, "injected error"));
        }
        Ok(())
    }

    fn after_mutation(&self, op: &'static str, key: &str, len: u64) -> StoreResult<()> {
        {
            let mut applied = self.applied.lock();
            applied.0 += 1;
            let step = xxhash_rust::xxh3::xxh3_64(
                &[op.as_bytes(), key.as_bytes(), &len.to_le_bytes()].concat(),
            );
            applied.1 = xxhash_rust::xxh3::xxh3_64_with_seed(&step.to_le_bytes(), applied.1);
            let mut recent = self.recent.lock();
            if recent.len() == RECENT_MAX {
                recent.pop_front();
            }
            recent.push_back(format!("{op} {key} {len}"));
        }
        let rate = self.plan.lock().lost_response_rate;
        if rate > 0.0 && self.roll(op, key, 0x1055) < rate {
            self.trace(|| format!("{op} {key} applied, response lost"));
            self.counters.lost_responses.fetch_add(1, Ordering::Relaxed);
            return Err(StoreError::new(
                StoreErrorKind::Transient,
                op,
                key,
                "injected lost response",
            ));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Store for FaultyStore {
    async fn put(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        self.before("PUT", key, true).await?;
        let rate = self.plan.lock().conflict_rate;
        if mode == PutMode::Create && rate > 0.0 && self.roll("PUT", key, 0xc0f1) < rate {
            self.counters.conflicts.fetch_add(1, Ordering::Relaxed);
            return Err(StoreError::new(
                StoreErrorKind::AlreadyExists,
                "PUT",
                key,
                "injected 409 ConditionalRequestConflict",
            ));
        }
        let len = data.len() as u64;
        self.inner.put(key, data, mode).await?;
        self.after_mutation("PUT", key, len)
    }
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        self.before("GET", key, false).await?;
        self.inner.get(key).await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        self.before("GET", key, false).await?;
        self.inner.get_range(key, range).await
    }
    async fn head(&self, key: &str) -> StoreResult<u64> {
        self.before("HEAD", key, false).await?;
        self.inner.head(key).await
    }
    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.before("DELETE", key, true).await?;
        self.inner.delete(key).await?;
        self.after_mutation("DELETE", key, 0)
    }
    async fn list(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>> {
        self.before("LIST", prefix, false).await?;
        self.inner.list(prefix).await
    }
    fn describe(&self) -> String {
        format!("{} (fault injection)", self.inner.describe())
    }
}
