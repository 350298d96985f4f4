//! Simulated distance for any store: latency with jitter, bandwidth per byte, an error rate and
//! outage windows. Lets a new user see "far away" behaviour on the embedded default, and tests
//! reproduce it from a seed.

use super::{Body, CutBlock, PutMode, Store, StoreError, StoreErrorKind, StoreResult};
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
    /// Outage windows as (start, duration) in milliseconds after the store was opened: every
    /// request inside one fails as if the network were down.
    pub outages_ms: Vec<(u64, u64)>,
}

impl SimulateSpec {
    /// Parses `latency=MS[,jitter=MS][,bandwidth=BYTES_PER_S][,errors=RATE][,outage=START_S+FOR_S]...`.
    pub fn parse(s: &str) -> Result<SimulateSpec> {
        let mut spec = SimulateSpec::default();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| {
                Error::BadInput(format!(
                    "--simulate '{s}': expected KEY=VALUE, e.g. latency=40,jitter=5"
                ))
            })?;
            if k == "outage" {
                let (start, dur) = v
                    .split_once('+')
                    .and_then(|(a, b)| Some((a.parse::<f64>().ok()?, b.parse::<f64>().ok()?)))
                    .filter(|(a, b)| *a >= 0.0 && *b > 0.0)
                    .ok_or_else(|| {
                        Error::BadInput(format!(
                            "--simulate '{s}': outage=START_S+FOR_S, e.g. outage=60+30"
                        ))
                    })?;
                spec.outages_ms.push(((start * 1000.0) as u64, (dur * 1000.0) as u64));
                continue;
            }
            let num: f64 = v
                .parse()
                .map_err(|_| Error::BadInput(format!("--simulate '{s}': '{v}' is not a number")))?;
            if num < 0.0 || !num.is_finite() {
                return Err(Error::BadInput(format!(
                    "--simulate '{s}': '{v}' must be a positive number"
                )));
            }
            match k {
                "latency" => spec.latency_ms = num,
                "jitter" => spec.jitter_ms = num,
                "bandwidth" => spec.bandwidth_bytes_per_s = num as u64,
                "errors" if num <= 1.0 => spec.error_rate = num,
                _ => {
                    return Err(Error::BadInput(format!(
                        "--simulate '{s}': unknown or out-of-range key '{k}' (latency, jitter, bandwidth, errors<=1, outage)"
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
    opened_us: u64,
}

impl SimulatedStore {
    pub fn new(
        inner: Arc<dyn Store>,
        spec: SimulateSpec,
        clock: Arc<dyn Clock>,
        seed: u64,
    ) -> Self {
        SimulatedStore {
            inner,
            spec: Mutex::new(spec),
            outage: Default::default(),
            opened_us: clock.mono_us(),
            clock,
            rng: Rng::new(seed),
        }
    }

    fn in_outage_window(&self, spec: &SimulateSpec) -> bool {
        let since_ms = (self.clock.mono_us() - self.opened_us) / 1000;
        spec.outages_ms.iter().any(|(start, dur)| since_ms >= *start && since_ms < start + dur)
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
        if self.outage.load(std::sync::atomic::Ordering::SeqCst) || self.in_outage_window(&spec) {
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
    async fn get_range_body(&self, key: &str, range: Range<u64>) -> StoreResult<Body> {
        self.delay("GET", key, range.end - range.start).await?;
        self.inner.get_range_body(key, range).await
    }
    async fn get_range_blocks(
        &self,
        key: &str,
        range: Range<u64>,
        ends: &[u64],
    ) -> StoreResult<Vec<CutBlock>> {
        self.delay("GET", key, range.end - range.start).await?;
        self.inner.get_range_blocks(key, range, ends).await
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn parses_every_key_and_rejects_nonsense() {
        let s =
            SimulateSpec::parse("latency=40,jitter=5,bandwidth=1000000,errors=0.01,outage=60+30")
                .expect("valid");
        assert_eq!((s.latency_ms, s.jitter_ms, s.bandwidth_bytes_per_s), (40.0, 5.0, 1_000_000));
        assert_eq!(s.outages_ms, vec![(60_000, 30_000)]);
        for bad in ["latency", "latency=x", "speed=3", "errors=2", "outage=5", "latency=-1"] {
            assert!(SimulateSpec::parse(bad).is_err(), "{bad} must be refused");
        }
    }

    #[tokio::test]
    async fn latency_and_outage_windows_follow_the_injected_clock() {
        let clock = Arc::new(ManualClock::default());
        let inner =
            crate::objstore::open_store_url("memory://simulate-test", true).expect("memory");
        let spec = SimulateSpec::parse("latency=40,outage=1+2").expect("valid");
        let s = SimulatedStore::new(inner, spec, clock.clone(), 1);
        s.put("k", Bytes::from_static(b"v"), PutMode::Overwrite).await.expect("before the window");
        assert_eq!(clock.mono_us(), 40_000, "one request costs the latency");
        clock.advance(Duration::from_millis(1000));
        assert!(s.get("k").await.is_err(), "inside the outage window");
        clock.advance(Duration::from_millis(2000));
        assert_eq!(&s.get("k").await.expect("after the window")[..], b"v");
    }
}
