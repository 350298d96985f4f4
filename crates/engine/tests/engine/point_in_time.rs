//! Point-in-time import: a pool opens read-only at any root still retained (`roots_kept`,
//! `root_retention_s`), reads exactly what that txg held even after the data was overwritten,
//! compacted and the freed segments' deletion came due; refuses every change; and once a root
//! leaves both windows it and what only it referenced are gone, with a clear error.

// Real time is the point here: background import work is polled in real time.
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::clock::{Clock, ManualClock};
use fardisk_engine::objstore::{open_store_url, Store};
use fardisk_engine::pool::{list_root_txgs, CreateOptions, ImportOptions, PointInTime};
use fardisk_engine::{Env, Pool, PoolConfig};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const VOL_BYTES: u64 = 1 << 20;

fn config() -> PoolConfig {
    PoolConfig {
        txg_timeout: None,
        segment_bytes_target: 64 << 10,
        compact_live_percent: 90,
        ..PoolConfig::default()
    }
}

async fn setup(retention_s: u64, seed: u64) -> (Arc<dyn Store>, Arc<ManualClock>, Env, Pool) {
    let clock = Arc::new(ManualClock::default());
    let env = Env { clock: clock.clone(), seed, blocking_inline: false };
    let store: Arc<dyn Store> = open_store_url(&format!("memory://pit-{seed}"), true).unwrap();
    let props = BTreeMap::from([
        ("roots_kept".to_string(), "2".to_string()),
        ("root_retention_s".to_string(), retention_s.to_string()),
    ]);
    Pool::create(store.clone(), "pit", CreateOptions { props, ..Default::default() }, &env)
        .await
        .unwrap();
    let pool = Pool::import(
        store.clone(),
        "pit",
        ImportOptions { config: config(), ..Default::default() },
        env.clone(),
        Arc::new(NoCache),
    )
    .await
    .unwrap();
    pool.volume_create("v", VOL_BYTES).unwrap();
    pool.sync_txg().await.unwrap();
    // Let the background listing of roots land before anything may be deleted.
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (store, clock, env, pool)
}

async fn fill(pool: &Pool, byte: u8) -> u64 {
    let v = pool.volume_id("v").unwrap();
    pool.write(v, 0, Bytes::from(vec![byte; VOL_BYTES as usize])).await.unwrap();
    pool.sync_txg().await.unwrap()
}

async fn read_all(pool: &Pool) -> Vec<u8> {
    let v = pool.volume_id("v").unwrap();
    pool.read(v, 0, VOL_BYTES as u32).await.unwrap().to_vec()
}

/// Many txgs later, with the old data overwritten and compacted away.
async fn churn(pool: &Pool, clock: &ManualClock, txgs: u32) {
    let v = pool.volume_id("v").unwrap();
    for i in 0..txgs {
        clock.advance(Duration::from_secs(10));
        pool.write(v, (i as u64 % 256) * 4096, Bytes::from(vec![0xEE; 4096])).await.unwrap();
        pool.sync_txg().await.unwrap();
        if i % 5 == 0 {
            pool.compact_now().await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_an_old_txg_within_retention() {
    let (store, clock, env, pool) = setup(3600, 1).await;
    let txg_a = fill(&pool, 0xAA).await;
    let time_a = clock.wall_ms();
    clock.advance(Duration::from_secs(30));
    let txg_b = fill(&pool, 0xBB).await;
    churn(&pool, &clock, 40).await; // 400 s later: well past roots_kept = 2, inside 3600 s.
    pool.audit_space().await.unwrap();

    let by_txg = Pool::import_read_only(
        store.clone(),
        "pit",
        "pit",
        PointInTime::Txg(txg_a),
        config(),
        env.clone(),
        Arc::new(NoCache),
    )
    .await
    .unwrap();
    assert_eq!(by_txg.read_only_txg(), Some(txg_a));
    assert!(read_all(&by_txg).await.iter().all(|&b| b == 0xAA), "txg {txg_a} reads as it was");
    let e = by_txg
        .write(by_txg.volume_id("v").unwrap(), 0, Bytes::from(vec![1u8; 4096]))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("read-only at txg"), "{e}");
    assert!(by_txg.volume_create("w", VOL_BYTES).is_err());
    assert!(by_txg.scrub_start().is_err());
    let roots_before = list_root_txgs(store.as_ref()).await.unwrap();
    by_txg.export().await.unwrap();
    assert_eq!(
        list_root_txgs(store.as_ref()).await.unwrap(),
        roots_before,
        "a read-only import publishes nothing"
    );

    let by_time = Pool::import_read_only(
        store.clone(),
        "pit",
        "pit",
        PointInTime::TimeMs(time_a + 1000),
        config(),
        env.clone(),
        Arc::new(NoCache),
    )
    .await
    .unwrap();
    assert_eq!(by_time.read_only_txg(), Some(txg_a), "the newest root at or before the time");
    let b = Pool::import_read_only(
        store.clone(),
        "pit",
        "pit",
        PointInTime::Txg(txg_b),
        config(),
        env.clone(),
        Arc::new(NoCache),
    )
    .await
    .unwrap();
    assert!(read_all(&b).await.iter().all(|&x| x == 0xBB));
    // The writer goes on meanwhile: a read-only import claims nothing.
    assert_eq!(read_all(&pool).await[..4096], [0xEE; 4096]);
    fill(&pool, 0xCC).await;

    // Past the retention window the old roots go, and with them what only they referenced.
    clock.advance(Duration::from_secs(3700));
    churn(&pool, &clock, 10).await;
    let e = Pool::import_read_only(
        store.clone(),
        "pit",
        "pit",
        PointInTime::Txg(txg_a),
        config(),
        env.clone(),
        Arc::new(NoCache),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("not retained"), "{e}");
    let left = list_root_txgs(store.as_ref()).await.unwrap();
    // What is left was published in the last 100 s (inside the window); everything older is gone.
    let oldest = Pool::import_read_only(
        store.clone(),
        "pit",
        "pit",
        PointInTime::Txg(left[0]),
        config(),
        env.clone(),
        Arc::new(NoCache),
    )
    .await
    .unwrap();
    let oldest_root_age_s = (clock.wall_ms() - time_of(&store, left[0]).await) / 1000;
    assert!(
        left[0] > txg_b && oldest_root_age_s <= 3600,
        "roots beyond both windows are deleted: {left:?}, oldest {oldest_root_age_s} s old"
    );
    assert!(read_all(&oldest).await[..4096] == [0xEE; 4096]);
    pool.audit_space().await.unwrap();
}

async fn time_of(store: &Arc<dyn Store>, txg: u64) -> u64 {
    let bytes = store.get(&fardisk_engine::root::root_key(txg)).await.unwrap();
    fardisk_engine::root::Root::decode(&bytes).unwrap().time_ms
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_retention_only_roots_kept() {
    let (store, clock, env, pool) = setup(0, 2).await;
    let txg_a = fill(&pool, 0xAA).await;
    churn(&pool, &clock, 10).await;
    let e = Pool::import_read_only(
        store.clone(),
        "pit",
        "pit",
        PointInTime::Txg(txg_a),
        config(),
        env.clone(),
        Arc::new(NoCache),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("not retained") && e.contains("root_retention_s"), "{e}");
    let newest = pool.published_txg();
    let ro = Pool::import_read_only(
        store.clone(),
        "pit",
        "pit",
        PointInTime::Txg(newest - 1),
        config(),
        env,
        Arc::new(NoCache),
    )
    .await
    .unwrap();
    assert_eq!(read_all(&ro).await[..4096], [0xEE; 4096]);
}
