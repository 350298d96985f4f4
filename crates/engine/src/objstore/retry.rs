//! Retries transient store errors with exponential backoff and full jitter, within a budget of
//! attempts and time. A create-only PUT retried after an ambiguous failure may answer
//! `AlreadyExists` for its own earlier attempt: callers verify (roots carry a put id, segment ids
//! are unique per writer epoch).

use super::{Body, CutBlock, PutMode, Store, StoreError, StoreResult};
use crate::clock::Clock;
use crate::rng::Rng;
use bytes::Bytes;
use std::future::Future;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct RetryPolicy {
    pub attempts_max: u32,
    pub backoff_initial_ms: u64,
    pub backoff_max_ms: u64,
    /// No new attempt starts after this much time since the first.
    pub budget_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts_max: 12,
            backoff_initial_ms: 50,
            backoff_max_ms: 5_000,
            budget_ms: 30_000,
        }
    }
}

#[derive(Debug)]
pub struct RetryingStore {
    inner: Arc<dyn Store>,
    policy: RetryPolicy,
    clock: Arc<dyn Clock>,
    rng: Rng,
    /// Retries performed (for status and metrics).
    pub retries: AtomicU64,
    /// Operations that failed after exhausting the budget.
    pub exhausted: AtomicU64,
}

impl RetryingStore {
    pub fn new(
        inner: Arc<dyn Store>,
        policy: RetryPolicy,
        clock: Arc<dyn Clock>,
        seed: u64,
    ) -> Self {
        RetryingStore {
            inner,
            policy,
            clock,
            rng: Rng::new(seed),
            retries: AtomicU64::new(0),
            exhausted: AtomicU64::new(0),
        }
    }

    async fn run<T, F, Fut>(&self, mut op: F) -> StoreResult<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = StoreResult<T>>,
    {
        let start_us = self.clock.mono_us();
        let mut backoff_ms = self.policy.backoff_initial_ms;
        let mut attempt = 1;
        loop {
            match op().await {
                Err(e) if e.is_transient() => {
                    let elapsed_ms = (self.clock.mono_us() - start_us) / 1000;
                    if attempt >= self.policy.attempts_max || elapsed_ms >= self.policy.budget_ms {
                        self.exhausted.fetch_add(1, Ordering::Relaxed);
                        return Err(retry_exhausted(e, attempt));
                    }
                    // Full jitter: a uniform wait in [0, backoff] spreads retries of many clients.
                    let wait_ms = self.rng.below(backoff_ms + 1);
                    self.retries.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %e, attempt, wait_ms, "store request failed; retrying");
                    self.clock.sleep(Duration::from_millis(wait_ms)).await;
                    backoff_ms = (backoff_ms * 2).min(self.policy.backoff_max_ms);
                    attempt += 1;
                }
                other => return other,
            }
        }
    }
}

fn retry_exhausted(mut e: StoreError, attempts: u32) -> StoreError {
    e.message = format!("{} (gave up after {attempts} attempts)", e.message);
    e
}

#[async_trait::async_trait]
impl Store for RetryingStore {
    async fn put(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        self.run(|| self.inner.put(key, data.clone(), mode)).await
    }
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        self.run(|| self.inner.get(key)).await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        self.run(|| self.inner.get_range(key, range.clone())).await
    }
    async fn get_range_body(&self, key: &str, range: Range<u64>) -> StoreResult<Body> {
        self.run(|| self.inner.get_range_body(key, range.clone())).await
    }
    async fn get_range_blocks(
        &self,
        key: &str,
        range: Range<u64>,
        ends: &[u64],
    ) -> StoreResult<Vec<CutBlock>> {
        self.run(|| self.inner.get_range_blocks(key, range.clone(), ends)).await
    }
    async fn head(&self, key: &str) -> StoreResult<u64> {
        self.run(|| self.inner.head(key)).await
    }
    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.run(|| self.inner.delete(key)).await
    }
    async fn list(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>> {
        self.run(|| self.inner.list(prefix)).await
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}
