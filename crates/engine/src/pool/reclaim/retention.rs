//! Retained roots: every txg publishes a root, and the writer keeps the newest `roots_kept` and
//! every root younger than `root_retention_s` (so the pool can be opened read-only as any of them
//! left it, open/read_only.rs); older ones are deleted, oldest first. A freed segment is deleted
//! only once no retained root can reference it (delete.rs).

use crate::error::Result;
use crate::fence::{list_root_txgs, read_root};
use crate::pool::Inner;
use crate::root::root_key;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Root deletions per txg at most (bounded work after every publish).
const ROOT_DELETES_PER_TXG_MAX: usize = 64;

/// The roots in the store, oldest first, with their publish times where known.
#[derive(Debug, Default)]
pub(crate) struct RetainedRoots {
    roots: BTreeMap<u64, Option<u64>>,
    /// Set once the import-time listing is in: until then nothing is deleted, since an older
    /// retained root might reference what would go.
    loaded: bool,
    /// Set when the import-time work (this listing and the space catalog) has ended, whether
    /// or not it succeeded.
    pub(crate) settled: bool,
}

/// Learns the roots in the store (at import, before anything is deleted).
pub(crate) async fn load_retained(inner: &Arc<Inner>) -> Result<()> {
    let txgs = list_root_txgs(inner.store.as_ref()).await?;
    let mut r = inner.reclaim.roots.lock();
    for t in txgs {
        r.roots.entry(t).or_insert(None);
    }
    r.loaded = true;
    Ok(())
}

/// After txg `published`: forgets roots out of both windows (deleting them) and returns the
/// oldest root still kept, or None while the listing is not in yet.
pub(super) async fn prune_roots(inner: &Arc<Inner>, published: u64, time_ms: u64) -> Option<u64> {
    let (kept, retention_ms) = {
        let c = inner.config.read();
        (c.roots_kept, c.root_retention_s * 1000)
    };
    inner.reclaim.roots.lock().roots.insert(published, Some(time_ms));
    let cutoff_ms = inner.env.clock.wall_ms().saturating_sub(retention_ms);
    for _ in 0..ROOT_DELETES_PER_TXG_MAX {
        let (oldest, known_ms, count, loaded) = {
            let r = inner.reclaim.roots.lock();
            let (t, ms) = r.roots.iter().next()?;
            (*t, *ms, r.roots.len() as u64, r.loaded)
        };
        if !loaded {
            return None;
        }
        if count <= kept + 1 || oldest >= published {
            break;
        }
        let old_enough = match retention_ms {
            0 => true,
            _ => match published_ms(inner, oldest, known_ms).await {
                Some(ms) => ms < cutoff_ms,
                None => break,
            },
        };
        if !old_enough || !delete_root(inner, oldest).await {
            break;
        }
    }
    let r = inner.reclaim.roots.lock();
    r.roots.keys().next().copied()
}

/// When root `txg` was published: known, or read from the root (0 when it is gone already, so
/// it is forgotten). None when it cannot be read now.
async fn published_ms(inner: &Inner, txg: u64, known_ms: Option<u64>) -> Option<u64> {
    if let Some(ms) = known_ms {
        return Some(ms);
    }
    match read_root(inner.store.as_ref(), txg).await {
        Ok(Some(root)) => {
            inner.reclaim.roots.lock().roots.insert(txg, Some(root.time_ms));
            Some(root.time_ms)
        }
        Ok(None) => Some(0), // Already gone: forget it.
        Err(e) => {
            tracing::warn!(error = %e, "could not read root {txg} to check its age; will retry");
            None
        }
    }
}

/// Deletes root `txg` from the store; false when it could not (retried after the next txg).
async fn delete_root(inner: &Inner, txg: u64) -> bool {
    match inner.store.delete(&root_key(txg)).await {
        Ok(()) => {
            inner.reclaim.roots.lock().roots.remove(&txg);
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not delete root {txg}; will retry");
            if e.is_transient() {
                inner.health.lock().suspend(format!("deleting old roots: {e}"));
            }
            false
        }
    }
}
