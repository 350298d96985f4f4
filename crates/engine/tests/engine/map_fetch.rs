//! Cold map reads: the leaf pages a long read needs (one per MiB of volume) are fetched together,
//! not one after the other before any data (issue #21). Counted on the store: how many GETs were
//! in flight at once while a fresh import resolved 16 MiB of volume, and how many GETs it took.

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
async fn the_leaf_pages_of_a_long_read_are_fetched_together() {
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
    assert!(gets <= 16 + 2, "each page fetched once: {gets} GETs");
    assert!(together >= 4, "leaf pages fetched one after the other ({together} at once)");
    // And the data reads back.
    for i in 0..16u64 {
        let got = pool.read(vol, i << 20, 1 << 20).await.expect("read");
        assert!(got.iter().all(|b| *b == i as u8 + 1), "MiB {i}");
    }
}
