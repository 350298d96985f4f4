//! A pool created in a fresh store and imported there without a block cache: the first half of
//! the tests that write a volume, export, and import it again cold through a store wrapper
//! (`map_fetch`, `scan_memory`, `cold_random_read`, `get_census`); `far_import` is the second
//! half for those that count the GETs of a store far away.

use crate::counting_store::CountingStore;
use fardisk_engine::arc_cache::ArcBlockCache;
use fardisk_engine::cache::NoCache;
use fardisk_engine::clock::{Clock, SystemClock};
use fardisk_engine::objstore::{open_store_url, SimulateSpec, SimulatedStore, Store};
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

/// Imports "tank" again from `base` made `latency_ms` away (on the system clock) and counted,
/// with an empty ARC of `arc_bytes`; waits `settle_ms` for the import's background work (root
/// listing, space walk, the interior map pages) and then zeroes the counts. Returns the pool,
/// volume "v" and the counts.
pub async fn far_import(
    base: Arc<dyn Store>,
    config: &PoolConfig,
    seed: u64,
    latency_ms: u64,
    arc_bytes: u64,
    settle_ms: u64,
) -> (Pool, u32, Arc<CountingStore>) {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
    let spec = SimulateSpec::parse(&format!("latency={latency_ms}")).expect("spec");
    let far: Arc<dyn Store> = Arc::new(SimulatedStore::new(base, spec, clock.clone(), seed));
    let counting = Arc::new(CountingStore::new(far));
    let cache = Arc::new(ArcBlockCache::new(arc_bytes, None));
    let env = Env { clock, seed, blocking_inline: false };
    let pool =
        Pool::import(counting.clone(), "tank", options(config), env, cache).await.expect("import");
    let vol = pool.volume_id("v").expect("v");
    // Real time: the store is far away on the system clock.
    #[allow(clippy::disallowed_methods)]
    tokio::time::sleep(std::time::Duration::from_millis(settle_ms)).await;
    counting.reset();
    (pool, vol, counting)
}
