//! Point-in-time: every txg publishes a root, so a pool can be opened read-only as it was at any
//! root still in the store. Which roots stay is the writer's choice: the newest `roots_kept`, and
//! every root younger than `root_retention_s`; a freed segment is deleted only once no retained
//! root can reference it (one freed in txg F is referenced by no root from F on).

use super::open::{new_inner, no_pool, wrap_store, InnerParts};
use super::{Inner, Pool};
use crate::cache::BlockCache;
use crate::error::{Error, Result};
pub use crate::fence::list_root_txgs;
use crate::fence::{find_latest_root, read_root};
use crate::objstore::{DynStore, Store};
use crate::rng::Rng;
use crate::root::{root_key, Root};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Which root a read-only import opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointInTime {
    /// The newest root (a read-only look at the pool as it is).
    Latest,
    Txg(u64),
    /// The newest root published at or before this wall-clock time (Unix ms).
    TimeMs(u64),
}

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
    let mut r = inner.roots.lock();
    for t in txgs {
        r.roots.entry(t).or_insert(None);
    }
    r.loaded = true;
    Ok(())
}

/// After txg `published`: forgets roots out of both windows (deleting them) and returns the
/// oldest root still kept, or None while the listing is not in yet.
pub(crate) async fn prune_roots(inner: &Arc<Inner>, published: u64, time_ms: u64) -> Option<u64> {
    let (kept, retention_ms) = {
        let c = inner.config.read();
        (c.roots_kept, c.root_retention_s * 1000)
    };
    inner.roots.lock().roots.insert(published, Some(time_ms));
    let cutoff_ms = inner.env.clock.wall_ms().saturating_sub(retention_ms);
    for _ in 0..ROOT_DELETES_PER_TXG_MAX {
        let (oldest, known_ms, count, loaded) = {
            let r = inner.roots.lock();
            let (t, ms) = r.roots.iter().next()?;
            (*t, *ms, r.roots.len() as u64, r.loaded)
        };
        if !loaded {
            return None;
        }
        if count <= kept + 1 || oldest >= published {
            break;
        }
        let old_enough = if retention_ms == 0 {
            true
        } else {
            let ms = match known_ms {
                Some(ms) => ms,
                None => match read_root(inner.store.as_ref(), oldest).await {
                    Ok(Some(root)) => {
                        inner.roots.lock().roots.insert(oldest, Some(root.time_ms));
                        root.time_ms
                    }
                    Ok(None) => 0, // Already gone: forget it.
                    Err(e) => {
                        tracing::warn!(error = %e, "could not read root {oldest} to check its age; will retry");
                        break;
                    }
                },
            };
            ms < cutoff_ms
        };
        if !old_enough {
            break;
        }
        match inner.store.delete(&root_key(oldest)).await {
            Ok(()) => {
                inner.roots.lock().roots.remove(&oldest);
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not delete root {oldest}; will retry");
                if e.is_transient() {
                    inner.health.lock().suspend(format!("deleting old roots: {e}"));
                }
                break;
            }
        }
    }
    let r = inner.roots.lock();
    r.roots.keys().next().copied()
}

/// The root a read-only import opens.
async fn find_root(store: &dyn Store, at: PointInTime) -> Result<Root> {
    let missing = |what: String, txgs: &[u64]| {
        match (txgs.first(), txgs.last()) {
        (Some(a), Some(b)) => Error::BadInput(format!(
            "{what} is not retained in the store; roots from txg {a} to {b} are (raise root_retention_s to keep more)"
        )),
        _ => no_pool(store),
    }
    };
    match at {
        PointInTime::Latest => find_latest_root(store).await?.ok_or_else(|| no_pool(store)),
        PointInTime::Txg(t) => match read_root(store, t).await? {
            Some(r) => Ok(r),
            None => Err(missing(format!("txg {t}"), &list_root_txgs(store).await?)),
        },
        PointInTime::TimeMs(ms) => {
            // Publish times grow with txgs: a binary search reads a handful of roots.
            let txgs = list_root_txgs(store).await?;
            let (mut lo, mut hi) = (0usize, txgs.len());
            let mut best: Option<Root> = None;
            while lo < hi {
                let mid = (lo + hi) / 2;
                match read_root(store, txgs[mid]).await? {
                    Some(r) if r.time_ms <= ms => {
                        best = Some(r);
                        lo = mid + 1;
                    }
                    Some(_) => hi = mid,
                    None => {
                        return Err(Error::Unavailable(
                            "a root vanished while searching; retry".into(),
                        ))
                    }
                }
            }
            best.ok_or_else(|| missing(format!("a root published at or before {ms} ms"), &txgs))
        }
    }
}

impl Pool {
    /// Opens the pool read-only as root `at` left it: no claim (the writer, if any, goes on),
    /// no log, no background work, nothing written to the store. Volumes and snapshots read as
    /// they were; every change is refused. The root and what it references stay readable while
    /// the writer retains it (`roots_kept`, `root_retention_s`).
    /// `local_name` names it on this host (the writer may serve `name` here at the same time).
    pub async fn import_read_only(
        store: DynStore,
        name: &str,
        local_name: &str,
        at: PointInTime,
        config: super::PoolConfig,
        env: super::Env,
        blocks: Arc<dyn BlockCache>,
    ) -> Result<Pool> {
        let (store, store_stats) = wrap_store(store, &config, &env);
        let root = find_root(store.as_ref(), at).await?;
        if root.pool_name != name {
            return Err(Error::BadInput(format!(
                "store {} holds pool '{}', not '{name}'",
                store.describe(),
                root.pool_name
            )));
        }
        let mut config = config;
        config.apply_props(&root.props)?;
        let rng = Rng::new(env.seed);
        let import_id = rng.next_u128();
        let inner = new_inner(InnerParts {
            store,
            store_stats,
            rng,
            config,
            name: local_name,
            root: &root,
            import_id,
            log: None,
            log_devices: Default::default(),
            env,
            blocks,
        });
        inner.health.lock().read_only_txg = Some(root.txg);
        Ok(Pool::from_inner(inner))
    }

    /// Some(txg) when imported read-only at that txg.
    pub fn read_only_txg(&self) -> Option<u64> {
        self.inner.health.lock().read_only_txg
    }
}
