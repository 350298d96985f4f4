//! Simulated distance for any store: latency with jitter, bandwidth per byte, an error rate and
//! outage windows. Lets a new user see "far away" behaviour on the embedded default, and tests
//! reproduce it from a seed.

use super::{PutMode, Store, StoreError, StoreErrorKind, StoreResult};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::rng::Rng;
use bytes::Bytes;
use parking_lot::Mutex;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimulateSpec {
    /// Added to every request (a round trip).
    pub latency_ms: f64,
    /// Uniform jitter of up to this much on top of the latency.
    pub jitter_ms: f64,
    /// Transfer time per byte: 0 means unlimited.
    pub bandwidth_bytes_per_s: u64,
    /// Probability that a request fails with a transient error (before it is applied).
    pub error_rate: f64,
}

impl SimulateSpec {
    /// Parses `latency=MS[,jitter=MS][,bandwidth=BYTES_PER_S][,errors=RATE]`.
    pub fn parse(s: &str) -> Result<SimulateSpec> {
        let mut spec = SimulateSpec::default();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| {
                Error::BadInput(format!("--simulate '{s}': expected KEY=VALUE, e.g. latency=40,jitter=5"))
            })?;
            let num: f64 = v.parse().map_err(|_| {
                Error::BadInput(format!("--simulate '{s}': '{v}' is not a number"))
            })?;
            if num < 0.0 || !num.is_finite() {
                return Err(Error::BadInput(format!("--simulate '{s}': '{v}' must be a positive number")));
            }
            match k {
                "latency" => spec.latency_ms = num,
                "jitter" => spec.jitter_ms = num,
                "bandwidth" => spec.bandwidth_bytes_per_s = num as u64,
                "errors" if num <= 1.0 => spec.error_rate = num,
                _ => {
                    return Err(Error::BadInput(format!(
                        "--simulate '{s}': unknown or out-of-range key '{k}' (latency, jitter, bandwidth, errors<=1)"
                    )))
                }
            }
        }
        Ok(spec)
    }
}

#[derive(Debug)]
pub struct SimulatedStore {
    inner: Arc<dyn Store>,
    spec: Mutex<SimulateSpec>,
    /// While true, every request fails as if the network were down.
    outage: std::sync::atomic::AtomicBool,
    clock: Arc<dyn Clock>,
    rng: Rng,
}

impl SimulatedStore {
    pub fn new(inner: Arc<dyn Store>, spec: SimulateSpec, clock: Arc<dyn Clock>, seed: u64) -> Self {
        SimulatedStore {
            inner,
            spec: Mutex::new(spec),
            outage: Default::default(),
            clock,
            rng: Rng::new(seed),
        }
    }

    pub fn set_outage(&self, on: bool) {
        self.outage.store(on, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn set_spec(&self, spec: SimulateSpec) {
        *self.spec.lock() = spec;
    }

    async fn delay(&self, op: &'static str, key: &str, bytes: u64) -> StoreResult<()> {
        let spec = self.spec.lock().clone();
        let jitter = if spec.jitter_ms > 0.0 {
            spec.jitter_ms * (self.rng.below(1_000_000) as f64 / 1_000_000.0)
        } else {
            0.0
        };
        let transfer_ms = if spec.bandwidth_bytes_per_s > 0 {
            bytes as f64 * 1000.0 / spec.bandwidth_bytes_per_s as f64
        } else {
            0.0
        };
        let total_ms = spec.latency_ms + jitter + transfer_ms;
        if total_ms > 0.0 {
            self.clock.sleep(Duration::from_micros((total_ms * 1000.0) as u64)).await;
        }
        if self.outage.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::new(StoreErrorKind::Transient, op, key, "simulated outage"));
        }
        if self.rng.chance(spec.error_rate) {
            return Err(StoreError::new(StoreErrorKind::Transient, op, key, "simulated error"));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Store for SimulatedStore {
    async fn put(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        self.delay("PUT", key, data.len() as u64).await?;
        self.inner.put(key, data, mode).await
    }
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        self.delay("GET", key, 0).await?;
        self.inner.get(key).await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        self.delay("GET", key, range.end - range.start).await?;
        self.inner.get_range(key, range).await
    }
    async fn head(&self, key: &str) -> StoreResult<u64> {
        self.delay("HEAD", key, 0).await?;
        self.inner.head(key).await
    }
    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.delay("DELETE", key, 0).await?;
        self.inner.delete(key).await
    }
    async fn list(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>> {
        self.delay("LIST", prefix, 0).await?;
        self.inner.list(prefix).await
    }
    fn describe(&self) -> String {
        let s = self.spec.lock().clone();
        format!("{} (simulated {} ms ±{} ms)", self.inner.describe(), s.latency_ms, s.jitter_ms)
    }
}
