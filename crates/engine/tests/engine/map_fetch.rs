//! Cold map reads (issue #21): the leaf pages a long read needs (one per MiB of volume) come in
//! one batch, coalesced into ranged GETs where they sit back to back, not one GET after the
//! other before any data; and a sequential reader's next leaf pages ride along in that GET, so
//! it asks for about one map GET per `map_readahead_pages_max` MiB, not one per MiB. Counted on
//! the store after a fresh import.

// Real time is the point here: the store is 10 ms away on the system clock so GETs overlap.
#![allow(clippy::disallowed_methods)]

use crate::counting_store::CountingStore;
use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::clock::{Clock, SystemClock};
use fardisk_engine::objstore::{open_store_url, SimulateSpec, SimulatedStore, Store};
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::{Env, Pool, PoolConfig};
use std::sync::atomic::Ordering;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaf_pages_of_a_long_read_are_fetched_together_in_one_get() {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
    let env = Env { clock: clock.clone(), seed: 3, blocking_inline: false };
    let base = open_store_url("memory://map-fetch", true).expect("store");
    Pool::create(base.clone(), "tank", CreateOptions::default(), &env).await.expect("create");
    let config = PoolConfig { txg_timeout: None, ..PoolConfig::default() };
    let options = || ImportOptions { config: config.clone(), ..Default::default() };
    let pool = Pool::import(base.clone(), "tank", options(), env.clone(), Arc::new(NoCache))
        .await
        .expect("import");
    let vol = pool.volume_create("v", 64 << 20).expect("volume");
    for i in 0..16u64 {
        pool.write(vol, i << 20, Bytes::from(vec![i as u8 + 1; 1 << 20])).await.expect("write");
    }
    pool.export().await.expect("export");

    let far: Arc<dyn Store> = Arc::new(SimulatedStore::new(
        base,
        SimulateSpec::parse("latency=10").expect("spec"),
        clock,
        3,
    ));
    let counting = Arc::new(CountingStore::new(far));
    let pool = Pool::import(counting.clone(), "tank", options(), env, Arc::new(NoCache))
        .await
        .expect("import");
    let vol = pool.volume_id("v").expect("v");
    // Let the import's background work (root listing, space walk) finish first.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    counting.reset();
    // The map alone: 16 leaf pages below the root's top page.
    let runs = pool.extents(vol, 0, 16 << 20).await.expect("extents");
    assert_eq!(runs, vec![(16 << 20, true)]);
    let (gets, together) =
        (counting.gets.load(Ordering::SeqCst), counting.in_flight_max.load(Ordering::SeqCst));
    println!("16 MiB of map resolved cold: {gets} GETs, at most {together} at once");
    // The 16 leaves were written by one txg, back to back: one ranged GET (and the top page,
    // if the import's own work did not leave it cached). Before the batching: 16 GETs, at most
    // 15 at once; before that, one at a time.
    assert!(gets <= 2, "the leaf pages came in {gets} GETs, not one");
    // And the data reads back.
    for i in 0..16u64 {
        let got = pool.read(vol, i << 20, 1 << 20).await.expect("read");
        assert!(got.iter().all(|b| *b == i as u8 + 1), "MiB {i}");
    }
}

/// Writes `mib` MiB (one txg per `mib_per_txg` MiB), exports, and imports again through a
/// counting store with `config` and no block cache: every read goes to the store.
async fn cold_pool(
    mib: u64,
    mib_per_txg: u64,
    config: PoolConfig,
) -> (Pool, u32, Arc<CountingStore>) {
    let env = Env { clock: Arc::new(SystemClock::default()), seed: 5, blocking_inline: false };
    let base = open_store_url(
        &format!("memory://map-ahead-{mib}-{mib_per_txg}-{}", config.map_readahead_pages_max),
        true,
    )
    .expect("store");
    Pool::create(base.clone(), "tank", CreateOptions::default(), &env).await.expect("create");
    let options = || ImportOptions { config: config.clone(), ..Default::default() };
    let pool = Pool::import(base.clone(), "tank", options(), env.clone(), Arc::new(NoCache))
        .await
        .expect("import");
    let vol = pool.volume_create("v", mib << 20).expect("volume");
    for i in 0..mib {
        pool.write(vol, i << 20, Bytes::from(vec![i as u8 + 1; 1 << 20])).await.expect("write");
        if (i + 1) % mib_per_txg == 0 {
            pool.sync_txg().await.expect("sync");
        }
    }
    pool.export().await.expect("export");
    let counting = Arc::new(CountingStore::new(base));
    let pool = Pool::import(counting.clone(), "tank", options(), env, Arc::new(NoCache))
        .await
        .expect("import");
    let vol = pool.volume_id("v").expect("v");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    counting.reset();
    (pool, vol, counting)
}

/// A sequential reader in 1 MiB reads: GETs for `mib` MiB, every byte checked.
async fn read_sequentially(pool: &Pool, vol: u32, mib: u64, counting: &CountingStore) -> u64 {
    for i in 0..mib {
        let got = pool.read(vol, i << 20, 1 << 20).await.expect("read");
        assert!(got.iter().all(|b| *b == i as u8 + 1), "MiB {i} reads back wrong bytes");
    }
    counting.gets.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequential_reader_asks_for_about_one_map_get_per_readahead_pages() {
    let config = PoolConfig { txg_timeout: None, ..PoolConfig::default() };
    assert_eq!(config.map_readahead_pages_max, 32);
    // 96 MiB over 3 txgs: three runs of leaf pages, each back to back in its own segment.
    let (pool, vol, counting) = cold_pool(96, 32, config.clone()).await;
    let gets = read_sequentially(&pool, vol, 96, &counting).await;
    println!("96 MiB read cold in 1 MiB reads: {gets} GETs");
    // One data GET per read; map GETs: one per batch of up to 33 leaves, at most one more per
    // txg boundary, and the top page. Before the ride-along: 96 + 96 + 1 = 193.
    assert!(gets <= 96 + 6 + 1, "{gets} GETs for 96 data GETs: the map costs more than 7");
    assert!(gets * 10 <= 96 * 11, "{gets} GETs is more than 1.1x the 96 the data needs");

    // With the ride-along off, each leaf page is a GET of its own again.
    let config = PoolConfig { map_readahead_pages_max: 0, ..config };
    let (pool, vol, counting) = cold_pool(96, 32, config).await;
    let gets = read_sequentially(&pool, vol, 96, &counting).await;
    println!("with map_readahead_pages_max=0: {gets} GETs");
    assert!(gets >= 96 + 96, "{gets} GETs with the ride-along off: fewer than one per leaf");
}
