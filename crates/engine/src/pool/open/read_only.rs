//! Point-in-time: every txg publishes a root, so a pool can be opened read-only as it was at any
//! root still in the store (which ones stay is the writer's choice: reclaim/retention.rs). No
//! claim, no log, no background work, nothing written.

use super::{no_pool, wrap_store};
use crate::cache::BlockCache;
use crate::error::{Error, Result};
use crate::fence::{find_latest_root, list_root_txgs, read_root};
use crate::objstore::{DynStore, Store};
use crate::pool::{Env, Inner, InnerParts, Pool, PoolConfig};
use crate::rng::Rng;
use crate::root::Root;
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
        config: PoolConfig,
        env: Env,
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
        let inner = Inner::new(InnerParts {
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
