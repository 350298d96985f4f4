//! Request cost when idle: an imported pool with no writes asks the store nothing beyond its
//! fixed schedule. The pool's loops run at fixed periods (the txg syncer every `txg_timeout`, the
//! orphan pass hourly, the daemon's hot-set save every 5 minutes), so requests per idle hour are
//! what each loop asks per run times its runs per hour; these tests measure each part exactly.

// Real time is the point here: the pool's own loops run on the system clock while the test idles.
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::objstore::{open_store_url, StoreStatsSnapshot};
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::{Env, Pool, PoolConfig};
use std::sync::Arc;
use std::time::Duration;

fn requests(s: &StoreStatsSnapshot) -> [u64; 5] {
    [s.put.requests, s.get.requests, s.head.requests, s.delete.requests, s.list.requests]
}

fn delta(a: [u64; 5], b: [u64; 5]) -> [u64; 5] {
    [b[0] - a[0], b[1] - a[1], b[2] - a[2], b[3] - a[3], b[4] - a[4]]
}

async fn busy_pool(url: &str, env: &Env, txg_timeout: Duration) -> (Pool, u32) {
    let store = open_store_url(url, true).expect("store");
    Pool::create(store.clone(), "tank", CreateOptions::default(), env).await.expect("create");
    let config = PoolConfig { txg_timeout: Some(txg_timeout), ..PoolConfig::default() };
    let pool = Pool::import(
        store,
        "tank",
        ImportOptions { config, ..Default::default() },
        env.clone(),
        Arc::new(NoCache),
    )
    .await
    .expect("import");
    let vol = pool.volume_create("v", 64 << 20).expect("volume");
    for i in 0..8u64 {
        pool.write(vol, i << 20, Bytes::from(vec![i as u8 + 1; 1 << 20])).await.expect("write");
    }
    pool.sync_txg().await.expect("sync");
    for _ in 0..3 {
        for i in 0..8u64 {
            pool.read(vol, i << 20, 1 << 20).await.expect("read");
        }
    }
    (pool, vol)
}

/// The daemon saves the hot set every 5 minutes: an idle pool's list does not change, and saving
/// it again is a PUT of the same bytes. Before the fix, 12 saves in an idle hour were 12 PUTs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_hot_set_is_not_stored_again() {
    let env = Env::system();
    let (pool, vol) = busy_pool("memory://idle-hotset", &env, Duration::from_secs(3600)).await;
    let s0 = requests(&pool.status().store_requests);
    assert!(pool.save_hot_set(64 << 20).await.expect("save") > 0, "a hot set to save");
    let s1 = requests(&pool.status().store_requests);
    assert_eq!(delta(s0, s1), [1, 0, 0, 0, 0], "the first save is one PUT");
    for _ in 0..11 {
        pool.save_hot_set(64 << 20).await.expect("save");
    }
    let s2 = requests(&pool.status().store_requests);
    assert_eq!(delta(s1, s2), [0; 5], "an idle hour's 11 more saves ask nothing");
    pool.read(vol, 0, 1 << 20).await.expect("read");
    pool.save_hot_set(64 << 20).await.expect("save");
    let s3 = requests(&pool.status().store_requests);
    assert_eq!(delta(s2, s3)[0], 1, "a changed hot set is stored");
}

/// An idle window on the real clock: the syncer wakes every second (txg_timeout 1 s) and asks the
/// store nothing; the hourly orphan pass is measured on its own. Prints the figures that
/// BENCHMARKS.md quotes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_pool_asks_nothing_but_its_hourly_orphan_pass() {
    let env = Env::system();
    let (pool, _) = busy_pool("memory://idle-window", &env, Duration::from_secs(1)).await;
    pool.save_hot_set(64 << 20).await.expect("save");
    // Let import's background work (root listing, space walk, first orphan pass) finish.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_s = 6;
    let s0 = requests(&pool.status().store_requests);
    let txg0 = pool.published_txg();
    tokio::time::sleep(Duration::from_secs(idle_s)).await;
    let s1 = requests(&pool.status().store_requests);
    assert_eq!(pool.published_txg(), txg0, "no txg while idle");
    let idle = delta(s0, s1);
    assert_eq!(idle, [0; 5], "{idle_s} s idle ({idle_s} syncer wake-ups): requests {idle:?}");
    let orphan = {
        let a = requests(&pool.status().store_requests);
        pool.collect_orphans_now().await.expect("orphan pass");
        delta(a, requests(&pool.status().store_requests))
    };
    println!(
        "idle: {idle_s} s, {} syncer wake-ups: {idle:?} requests (PUT, GET, HEAD, DELETE, LIST); \
         one orphan pass: {orphan:?}; hot set saved again unchanged: 0",
        idle_s
    );
    assert!(orphan[0] == 0 && orphan[3] == 0, "an orphan pass with no orphans writes nothing");
    assert!(orphan.iter().sum::<u64>() <= 4, "one LIST (and a few page reads): {orphan:?}");
}
