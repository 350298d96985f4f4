//! The object store as the engine sees it: a narrow trait ([`Store`]) over the `object_store` crate,
//! with decorators that compose (as object_store's own `throttle.rs`/`limit.rs` do): simulated
//! distance, retries, instrumentation, fault injection and client-side encryption.

mod backend;
mod blocks;
mod body;
mod capability;
mod encrypted;
mod faulty;
mod instrumented;
mod power_cut;
mod retry;
mod settings;
mod simulate;
mod url;

pub use backend::ObjectStoreBackend;
pub use blocks::{BlockCutter, CutBlock};
pub use body::Body;
pub use capability::{
    check_store_capabilities, refusal, MissingCapability, StoreUse, RACERS, REQUESTS_MAX,
};
pub use encrypted::{is_encrypted_object, seal_with_nonces, EncryptedStore, EncryptionKey};
pub use faulty::{FaultCounts, FaultPlan, FaultyStore};
pub use instrumented::{InstrumentedStore, StoreStats, StoreStatsSnapshot, LATENCY_BUCKETS_US};
pub use power_cut::{PowerCutCounts, PowerCutStore};
pub use retry::{RetryPolicy, RetryingStore};
pub use settings::{is_store_var, StoreSettings};
pub use simulate::{SimulateSpec, SimulatedStore};
pub use url::{
    open_store_url, open_store_url_with, scheme_settings, SchemeSettings, FILE_STORE_FSYNC,
};

use bytes::Bytes;
use std::ops::Range;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutMode {
    /// Fails with `AlreadyExists` if the key exists (If-None-Match: *): segments and roots.
    Create,
    /// Plain overwrite: only for hints that are verified on read.
    Overwrite,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreErrorKind {
    NotFound,
    AlreadyExists,
    /// Worth retrying: timeouts, 5xx, connection resets, simulated outages.
    Transient,
    /// Credentials, permissions, bad configuration: retrying will not help.
    Permanent,
    /// The store cannot do what was asked (e.g. conditional writes).
    Unsupported,
    /// The object is there but its bytes fail verification below the engine (an encrypted
    /// object that does not open): retrying returns the same bytes.
    Corrupt,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("{op} {key}: {message}")]
pub struct StoreError {
    pub kind: StoreErrorKind,
    pub op: &'static str,
    pub key: String,
    pub message: String,
}

impl StoreError {
    pub fn new(
        kind: StoreErrorKind,
        op: &'static str,
        key: &str,
        message: impl Into<String>,
    ) -> Self {
        StoreError { kind, op, key: key.to_string(), message: message.into() }
    }
    pub fn is_transient(&self) -> bool {
        self.kind == StoreErrorKind::Transient
    }
    pub fn is_not_found(&self) -> bool {
        self.kind == StoreErrorKind::NotFound
    }
}

pub type StoreResult<T> = std::result::Result<T, StoreError>;

#[async_trait::async_trait]
pub trait Store: Send + Sync + std::fmt::Debug {
    async fn put(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()>;
    async fn get(&self, key: &str) -> StoreResult<Bytes>;
    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes>;
    /// The same bytes as `get_range`, in the chunks the network client received them (see
    /// [`Body`]): for readers that cut the body into blocks and would copy them out anyway.
    /// Decorators that only observe or delay a GET pass this on; those that change the bytes
    /// (encryption, fault injection) leave the default, which is their own `get_range`.
    async fn get_range_body(&self, key: &str, range: Range<u64>) -> StoreResult<Body> {
        self.get_range(key, range).await.map(Body::from)
    }
    /// The bytes of `range` cut at `ends` (offsets in the range, strictly ascending, the last the
    /// range's length; see [`BlockCutter`]), each block in a buffer of its own with its xxh3-64
    /// ([`CutBlock`]): for readers that keep what they fetch. A network backend copies the blocks out as the body streams in and
    /// drops each chunk at once; the default cuts [`Store::get_range_body`]'s body. Decorators
    /// pass it on where they pass `get_range_body` on.
    async fn get_range_blocks(
        &self,
        key: &str,
        range: Range<u64>,
        ends: &[u64],
    ) -> StoreResult<Vec<CutBlock>> {
        blocks::check_cut(key, &range, ends)?;
        let body = self.get_range_body(key, range).await?;
        let mut cutter = BlockCutter::new(ends);
        for chunk in body.chunks() {
            cutter.push(chunk).map_err(|e| e.into_error(key))?;
        }
        cutter.finish().map_err(|e| e.into_error(key))
    }
    /// Size of the object, or `NotFound`.
    async fn head(&self, key: &str) -> StoreResult<u64>;
    /// Deleting a missing key succeeds (deletes are retried and must be idempotent).
    async fn delete(&self, key: &str) -> StoreResult<()>;
    /// Keys under `prefix` with their sizes, sorted. Never used on the import path.
    async fn list(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>>;
    /// A short description for status output, with credentials removed.
    fn describe(&self) -> String;
}

pub type DynStore = std::sync::Arc<dyn Store>;
