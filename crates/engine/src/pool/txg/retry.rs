//! A commit waits through store outages instead of failing: its uploads, its root publish and
//! the reads it depends on (map pages it updates, the space table, pages it moves) are retried
//! with backoff while the pool is SUSPENDED, and it resumes by itself when the store returns.
//! A step that gave up after the per-request retry budget would fail the txg, and a failed txg
//! faults the pool (its in-memory maps already point at the txg's segments), which only a
//! restart clears: exactly what a transient outage must never cause.

use crate::blkptr::BlockPtr;
use crate::blockmap::BlockSource;
use crate::error::{Error, ErrorKind, Result};
use crate::fence::publish_root;
use crate::pool::{fetch, Inner};
use crate::root::Root;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;

/// Longest wait between two attempts while the store is away.
const WAIT_MS_MAX: u64 = 5_000;

/// The pool's blocks as a commit reads them: through `fetch`, waiting out store outages.
pub(crate) struct CommitReads<'a>(pub &'a Arc<Inner>);

#[async_trait::async_trait]
impl BlockSource for CommitReads<'_> {
    async fn read_block(&self, ptr: &BlockPtr) -> Result<Bytes> {
        let inner = self.0;
        let mut attempt: u64 = 0;
        let mut wait_ms = 100;
        loop {
            match fetch::read_verified(inner, ptr).await {
                Ok(b) => {
                    if attempt > 0 {
                        inner.health.lock().resume();
                        tracing::info!("a read of the commit succeeded after the store came back");
                    }
                    return Ok(b);
                }
                // Damaged bytes, a missing object, a bug: waiting does not help.
                Err(e) if e.kind() != ErrorKind::RetryLater => return Err(e),
                Err(e) => {
                    attempt += 1;
                    if inner.config.read().sync_attempts_max.is_some_and(|m| attempt >= m) {
                        return Err(e);
                    }
                    tracing::warn!(error = %e, attempt, "a read of the commit failed; pool suspended, retrying");
                    inner.health.lock().suspend(format!("reading for the commit: {e}"));
                    inner.env.clock.sleep(Duration::from_millis(wait_ms)).await;
                    wait_ms = (wait_ms * 2).min(WAIT_MS_MAX);
                }
            }
        }
    }
}

/// Publishes `root`, retrying through store outages.
pub(super) async fn publish_until_done(inner: &Arc<Inner>, root: &Root) -> Result<()> {
    retry_forever(inner, "root publish", || publish_root(inner.store.as_ref(), root)).await
}

/// Retries a commit step through store outages: the pool is SUSPENDED meanwhile and resumes by
/// itself. Fencing and bugs end it; `sync_attempts_max` bounds it in tests.
pub(super) async fn retry_forever<F, Fut>(inner: &Arc<Inner>, what: &str, mut step: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let mut attempt: u64 = 0;
    let mut wait_ms = 100;
    loop {
        match step().await {
            Ok(()) => {
                // Also when the first attempt worked: a failed best-effort delete may have
                // reported the store unreachable meanwhile.
                inner.health.lock().resume();
                if attempt > 0 {
                    tracing::info!("{what} succeeded after the store came back");
                }
                return Ok(());
            }
            Err(e @ (Error::Fenced(_) | Error::Bug(_))) => return Err(e),
            Err(e) => {
                attempt += 1;
                if inner.config.read().sync_attempts_max.is_some_and(|m| attempt >= m) {
                    return Err(e);
                }
                tracing::warn!(error = %e, attempt, "{what} failed; pool suspended, retrying");
                inner.health.lock().suspend(format!("{what}: {e}"));
                inner.env.clock.sleep(Duration::from_millis(wait_ms)).await;
                wait_ms = (wait_ms * 2).min(WAIT_MS_MAX);
            }
        }
    }
}
