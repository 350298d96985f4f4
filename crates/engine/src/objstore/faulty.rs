//! Fault injection for tests and the simulation: fail a chosen mutation (a "crash" between the PUTs
//! of one txg), lose the response of an applied mutation (the ambiguous-PUT case), or fail
//! requests at random from a seed.

use super::{PutMode, Store, StoreError, StoreErrorKind, StoreResult};
use crate::rng::Rng;
use bytes::Bytes;
use parking_lot::Mutex;
use std::ops::Range;
use std::sync::Arc;

#[derive(Debug, Clone, Default)]
pub struct FaultPlan {
    /// After this many successful mutations (PUT/DELETE), every further mutation fails with a
    /// permanent error, as if the process had died at that instant.
    pub crash_after_mutations: Option<u64>,
    /// Probability that an applied mutation's response is lost (the caller sees a transient error).
    pub lost_response_rate: f64,
    /// Probability that any request fails transiently before being applied.
    pub error_rate: f64,
}

#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn Store>,
    plan: Mutex<FaultPlan>,
    mutations: Mutex<u64>,
    rng: Rng,
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn Store>, plan: FaultPlan, seed: u64) -> Self {
        FaultyStore { inner, plan: Mutex::new(plan), mutations: Mutex::new(0), rng: Rng::new(seed) }
    }

    pub fn set_plan(&self, plan: FaultPlan) {
        *self.plan.lock() = plan;
    }

    pub fn mutations(&self) -> u64 {
        *self.mutations.lock()
    }

    fn before(&self, op: &'static str, key: &str, mutation: bool) -> StoreResult<()> {
        let plan = self.plan.lock().clone();
        if mutation {
            if let Some(limit) = plan.crash_after_mutations {
                if *self.mutations.lock() >= limit {
                    return Err(StoreError::new(StoreErrorKind::Permanent, op, key, "injected crash"));
                }
            }
        }
        if self.rng.chance(plan.error_rate) {
            return Err(StoreError::new(StoreErrorKind::Transient, op, key, "injected error"));
        }
        Ok(())
    }

    fn after_mutation(&self, op: &'static str, key: &str) -> StoreResult<()> {
        *self.mutations.lock() += 1;
        if self.rng.chance(self.plan.lock().lost_response_rate) {
            return Err(StoreError::new(StoreErrorKind::Transient, op, key, "injected lost response"));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Store for FaultyStore {
    async fn put(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        self.before("PUT", key, true)?;
        self.inner.put(key, data, mode).await?;
        self.after_mutation("PUT", key)
    }
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        self.before("GET", key, false)?;
        self.inner.get(key).await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        self.before("GET", key, false)?;
        self.inner.get_range(key, range).await
    }
    async fn head(&self, key: &str) -> StoreResult<u64> {
        self.before("HEAD", key, false)?;
        self.inner.head(key).await
    }
    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.before("DELETE", key, true)?;
        self.inner.delete(key).await?;
        self.after_mutation("DELETE", key)
    }
    async fn list(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>> {
        self.before("LIST", prefix, false)?;
        self.inner.list(prefix).await
    }
    fn describe(&self) -> String {
        format!("{} (fault injection)", self.inner.describe())
    }
}
