//! Warm-up after a restart: the regions read most before an export are read back into a fresh
//! ARC in the background after the next import, so reading them again costs no store request;
//! a region read only once (a scan) is not part of it.

// Real time is the point here: background warm-up runs on real tasks; the test polls it in real time.
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use fardisk_engine::arc_cache::ArcBlockCache;
use fardisk_engine::clock::ManualClock;
use fardisk_engine::objstore::open_store_url;
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::{Env, Pool, PoolConfig};
use std::sync::Arc;

const MIB: u64 = 1 << 20;

fn config() -> PoolConfig {
    PoolConfig { txg_timeout: None, ..PoolConfig::default() }
}

async fn import(
    store: &Arc<dyn fardisk_engine::objstore::Store>,
    env: &Env,
) -> (Pool, Arc<ArcBlockCache>) {
    let cache = Arc::new(ArcBlockCache::new(64 * MIB, None));
    let opts = ImportOptions { force: true, config: config(), ..Default::default() };
    let pool = Pool::import(store.clone(), "tank", opts, env.clone(), cache.clone())
        .await
        .expect("import");
    (pool, cache)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hot_set_saved_at_export_is_warm_after_import() {
    let env = Env { clock: Arc::new(ManualClock::default()), seed: 5, blocking_inline: false };
    let store = open_store_url("memory://warmup", true).expect("store");
    Pool::create(store.clone(), "tank", CreateOptions::default(), &env).await.expect("create");
    let (pool, _) = import(&store, &env).await;
    let vol = pool.volume_create("v", 16 * MIB).expect("volume");
    for i in 0..16u64 {
        let data: Vec<u8> = (0..MIB).map(|j| ((i * 31 + j * 7) % 251) as u8).collect();
        pool.write(vol, i * MIB, Bytes::from(data)).await.expect("write");
    }
    pool.sync_txg().await.expect("sync");
    // Hot: the first 2 MiB, read three times. Cold: the rest, read once (a scan).
    for _ in 0..3 {
        for off in (0..2 * MIB).step_by(64 << 10) {
            pool.read(vol, off, 64 << 10).await.expect("hot read");
        }
    }
    pool.read(vol, 2 * MIB, (14 * MIB) as u32).await.expect("scan");
    let saved = pool.save_hot_set(64 * MIB).await.expect("save");
    assert_eq!(saved, 32, "2 MiB of hot data is 32 regions of 64 KiB");
    pool.export().await.expect("export");
    drop(pool);

    let (pool, _cache) = import(&store, &env).await;
    pool.warm_up();
    for _ in 0..200 {
        let w = pool.status().warmup;
        if w["regions_total"] == 32
            && w["regions_done"].as_u64().unwrap_or(0) + w["regions_skipped"].as_u64().unwrap_or(0)
                == 32
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let w = pool.status().warmup;
    assert_eq!(w["regions_done"], 32, "every saved region was warmed: {w}");
    let gets_before = pool.store_stats().snapshot().get.requests;
    let vol = pool.volume_id("v").expect("v");
    let hot = pool.read(vol, 0, (2 * MIB) as u32).await.expect("hot read after import");
    assert!(
        hot.iter().enumerate().all(|(j, b)| *b == ((j as u64 * 7) % 251) as u8 || j as u64 >= MIB),
        "warm data is the data"
    );
    assert_eq!(
        pool.store_stats().snapshot().get.requests,
        gets_before,
        "the hot set was served from the ARC"
    );
    let cold_gets = pool.store_stats().snapshot().get.requests;
    pool.read(vol, 8 * MIB, 64 << 10).await.expect("cold read");
    assert!(
        pool.store_stats().snapshot().get.requests > cold_gets,
        "a region read once before was not warmed"
    );
}

/// Written blocks stay in the ARC after their txg reaches the store (as ZFS keeps written
/// buffers): reading back what was just written costs no store request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_written_by_a_txg_are_read_back_from_the_arc() {
    let env = Env { clock: Arc::new(ManualClock::default()), seed: 6, blocking_inline: false };
    let store = open_store_url("memory://written-in-arc", true).expect("store");
    Pool::create(store.clone(), "tank", CreateOptions::default(), &env).await.expect("create");
    let (pool, _cache) = import(&store, &env).await;
    let vol = pool.volume_create("v", 32 * MIB).expect("volume");
    let data: Vec<u8> = (0..20 * MIB).map(|j| (j % 253) as u8).collect();
    pool.write(vol, 0, Bytes::from(data.clone())).await.expect("write");
    pool.sync_txg().await.expect("sync");
    let gets = pool.store_stats().snapshot().get.requests;
    let back = pool.read(vol, 0, (20 * MIB) as u32).await.expect("read back");
    assert!(back[..] == data[..], "the data read back is the data written");
    assert_eq!(
        pool.store_stats().snapshot().get.requests,
        gets,
        "no GET for data the pool just wrote"
    );
}
