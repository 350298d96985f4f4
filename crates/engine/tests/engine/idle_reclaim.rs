//! Space comes back on a pool that goes idle: segments freed by the last txgs with work are
//! deleted without further writes. Deletion waits until no retained root can reference them,
//! that is `roots_kept` more roots; an idle pool made none, so before the fix they stayed in
//! the store until the next write (issue #21).

// Real time is the point here: the pool's own syncer loop runs on the system clock.
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::objstore::open_store_url;
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::{Env, Pool, PoolConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_freed_before_the_pool_goes_idle_are_deleted() {
    let env = Env::system();
    let store = open_store_url("memory://idle-reclaim", true).expect("store");
    Pool::create(store.clone(), "tank", CreateOptions::default(), &env).await.expect("create");
    let config = PoolConfig {
        txg_timeout: Some(Duration::from_millis(200)),
        roots_kept: 4,
        ..PoolConfig::default()
    };
    let options = ImportOptions { config, ..Default::default() };
    let pool =
        Pool::import(store, "tank", options, env.clone(), Arc::new(NoCache)).await.expect("import");
    let vol = pool.volume_create("v", 64 << 20).expect("volume");
    for round in 0..3u8 {
        for i in 0..4u64 {
            let data = Bytes::from(vec![round * 16 + i as u8 + 1; 1 << 20]);
            pool.write(vol, i << 20, data).await.expect("write");
        }
        pool.sync_txg().await.expect("sync");
    }
    // The overwrites freed earlier rounds' data segments.
    let freed = pool.status().pending_deletes;
    assert!(freed >= 1, "overwritten data segments wait for deletion: {freed}");
    let deleted_before = pool.status().deleted_segments;

    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let deleted = pool.status().deleted_segments - deleted_before;
        if deleted >= freed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "idle for 15 s ({} syncer wake-ups): {deleted} of {freed} freed segments deleted, \
             txg {}",
            15_000 / 200,
            pool.published_txg()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The catch-up is bounded: once done, the idle pool publishes nothing more.
    let txg = pool.published_txg();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(pool.published_txg(), txg, "no txg after the catch-up (10 idle wake-ups)");

    // Every block reads back as last written.
    for i in 0..4u64 {
        let got = pool.read(vol, i << 20, 1 << 20).await.expect("read");
        assert!(got.iter().all(|b| *b == 2 * 16 + i as u8 + 1), "block {i}");
    }
}
