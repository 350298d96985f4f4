//! A pool created in a fresh store and imported there without a block cache: the first half of
//! the tests that write a volume, export, and import it again cold through a store wrapper
//! (`map_fetch`, `scan_memory`, `cold_random_read`).

use fardisk_engine::cache::NoCache;
use fardisk_engine::objstore::{open_store_url, Store};
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::{Env, Pool, PoolConfig};
use std::sync::Arc;

/// Pool "tank" created at `url` (a fresh `memory://` store) and imported with `config`; also
/// returns the store, for the import after the export.
pub async fn created(url: &str, config: &PoolConfig, env: &Env) -> (Pool, Arc<dyn Store>) {
    let store = open_store_url(url, true).expect("store");
    Pool::create(store.clone(), "tank", CreateOptions::default(), env).await.expect("create");
    let pool = Pool::import(store.clone(), "tank", options(config), env.clone(), Arc::new(NoCache))
        .await
        .expect("import");
    (pool, store)
}

/// Import options with `config` and nothing else.
pub fn options(config: &PoolConfig) -> ImportOptions {
    ImportOptions { config: config.clone(), ..Default::default() }
}
