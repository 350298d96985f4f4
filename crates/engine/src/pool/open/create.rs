//! `fardisk create`: txg 0 of a new pool, and reading the newest root without importing.

use super::holder::holder;
use super::{no_pool, wrap_store, CreateOptions};
use crate::blockmap::TreeRef;
use crate::error::{Error, Result};
use crate::fence::{find_latest_root, publish_root, scan_roots, write_head_hint};
use crate::objstore::{check_store_capabilities, DynStore, StoreUse};
use crate::pool::{names, Env, Pool, PoolConfig};
use crate::rng::Rng;
use crate::root::Root;
use crate::space::{SpaceTotals, SPACE_TREE_ID};

impl Pool {
    /// Writes txg 0 of a new pool. Refuses a store that already holds a pool or lacks conditional
    /// writes; nothing is written in either case.
    pub async fn create(
        store: DynStore,
        name: &str,
        opts: CreateOptions,
        env: &Env,
    ) -> Result<Root> {
        names::check_pool_name(name)?;
        // Sizes given with a suffix (`-o arc_max=16M`) are stored in bytes.
        let mut props = std::collections::BTreeMap::new();
        for (k, v) in &opts.props {
            props.insert(k.clone(), crate::props::canonical_prop(k, v, false)?);
        }
        let (store, _) = wrap_store(store, &PoolConfig::default(), env);
        let rng = Rng::new(env.seed);
        check_store_capabilities(store.as_ref(), rng.next_u128(), StoreUse::Create).await?;
        if let Some(existing) = find_latest_root(store.as_ref()).await? {
            return Err(Error::BadInput(format!(
                "store {} already holds pool '{}' (txg {}); import it, or destroy it first",
                store.describe(),
                existing.pool_name,
                existing.txg
            )));
        }
        let root = Root {
            pool_guid: opts.pool_guid.unwrap_or_else(|| rng.next_u128()),
            pool_name: name.to_string(),
            txg: 0,
            epoch: 0,
            time_ms: env.clock.wall_ms(),
            put_id: rng.next_u128(),
            holder: holder(env, &rng, false),
            next_segment_counter: 1,
            next_volume_id: 1,
            space: TreeRef::empty(SPACE_TREE_ID, u64::MAX),
            totals: SpaceTotals::default(),
            space_carry: Vec::new(),
            props,
            vdevs: opts.vdevs,
            volumes: Vec::new(),
            snapshots: Vec::new(),
            free_queue: Vec::new(),
            destroying: Vec::new(),
        };
        publish_root(store.as_ref(), &root).await.map_err(|e| match e {
            Error::Fenced(_) => Error::BadInput(format!(
                "another process created a pool in {} at the same time",
                store.describe()
            )),
            other => other,
        })?;
        write_head_hint(store.as_ref(), root.txg).await;
        Ok(root)
    }

    /// Reads the newest root without importing (for `status` of an exported pool, recovery points).
    pub async fn peek(store: DynStore, env: &Env) -> Result<Root> {
        Self::peek_rewind(store, env, false).await
    }

    /// `peek`, where `rewind` returns the newest intact root even when newer ones are damaged.
    pub async fn peek_rewind(store: DynStore, env: &Env, rewind: bool) -> Result<Root> {
        let (store, _) = wrap_store(store, &PoolConfig::default(), env);
        if !rewind {
            return find_latest_root(store.as_ref()).await?.ok_or_else(|| no_pool(store.as_ref()));
        }
        scan_roots(store.as_ref()).await?.intact.ok_or_else(|| no_pool(store.as_ref()))
    }
}
