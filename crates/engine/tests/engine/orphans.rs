//! Segments uploaded by txgs that never published (a crash mid-txg, a writer fenced while it was
//! uploading) are collected by the next writer, and nothing a root references or a live writer
//! may still publish is ever deleted.

use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::clock::ManualClock;
use fardisk_engine::objstore::{open_store_url, FaultPlan, FaultyStore, Store};
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::{Env, Pool, PoolConfig};
use std::sync::Arc;

fn env(seed: u64) -> Env {
    Env { clock: Arc::new(ManualClock::default()), seed, blocking_inline: false }
}

async fn import(store: &Arc<dyn Store>, seed: u64) -> Pool {
    let config = PoolConfig {
        txg_timeout: None,
        sync_attempts_max: Some(1),
        roots_kept: 2,
        ..PoolConfig::default()
    };
    let pool = Pool::import(
        store.clone(),
        "tank",
        ImportOptions { force: true, config, ..Default::default() },
        env(seed),
        Arc::new(NoCache),
    )
    .await
    .expect("import");
    for _ in 0..100_000 {
        if pool.import_settled() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(pool.import_settled(), "the import-time work did not end");
    pool
}

async fn segments(store: &Arc<dyn Store>) -> Vec<String> {
    store.list("segments/").await.expect("list").into_iter().map(|(k, _)| k).collect()
}

async fn check(pool: &Pool, fills: &[(u64, u8)]) {
    let vol = pool.volume_id("v").expect("v");
    for (block, fill) in fills {
        assert_eq!(
            pool.read(vol, block * 4096, 4096).await.expect("read")[0],
            *fill,
            "block {block}"
        );
    }
    pool.audit_space().await.expect("space audit: every referenced segment is in the store");
}

#[tokio::test]
async fn segments_of_a_txg_cut_by_a_crash_are_collected_by_the_next_import() {
    let faulty = Arc::new(FaultyStore::new(
        open_store_url("memory://orphans-crash", true).expect("store"),
        FaultPlan::default(),
        1,
    ));
    let store: Arc<dyn Store> = faulty.clone();
    Pool::create(store.clone(), "tank", CreateOptions::default(), &env(1)).await.expect("create");
    let pool = import(&store, 2).await;
    pool.volume_create("v", 4 << 20).expect("volume");
    let vol = pool.volume_id("v").expect("v");
    pool.write(vol, 0, Bytes::from(vec![1u8; 4096])).await.expect("write");
    pool.sync_txg().await.expect("sync");
    let published = segments(&store).await;

    // The process dies after its next txg's segment is stored, before its root (the previous
    // root's head hint goes out beside the segment: two mutations).
    pool.write(vol, 4096, Bytes::from(vec![2u8; 64 << 10])).await.expect("write");
    faulty.set_plan(FaultPlan {
        crash_after_mutations: Some(faulty.mutations() + 2),
        ..FaultPlan::default()
    });
    assert!(pool.sync_txg().await.is_err(), "the root PUT must have been cut");
    drop(pool);
    faulty.set_plan(FaultPlan::default());
    let orphaned: Vec<String> =
        segments(&store).await.into_iter().filter(|k| !published.contains(k)).collect();
    assert!(!orphaned.is_empty(), "the cut txg left a segment behind");

    let pool = import(&store, 3).await;
    let left = segments(&store).await;
    for k in &orphaned {
        assert!(
            !left.contains(k),
            "{k} was uploaded by a txg that never published and is still in the store"
        );
    }
    assert!(pool.status().orphans_deleted >= orphaned.len() as u64);
    check(&pool, &[(0, 1)]).await;
}

#[tokio::test]
async fn a_fenced_writers_late_uploads_are_collected_and_the_live_writers_are_kept() {
    let store = open_store_url("memory://orphans-fenced", true).expect("store");
    Pool::create(store.clone(), "tank", CreateOptions::default(), &env(1)).await.expect("create");
    let old = import(&store, 2).await;
    old.volume_create("v", 4 << 20).expect("volume");
    let vol = old.volume_id("v").expect("v");
    old.write(vol, 0, Bytes::from(vec![1u8; 4096])).await.expect("write");
    old.sync_txg().await.expect("sync");

    let new = import(&store, 3).await; // --force: the old writer is fenced at its next root PUT.
    let before_late = segments(&store).await;
    old.write(vol, 8192, Bytes::from(vec![7u8; 32 << 10]))
        .await
        .expect("the old writer still takes writes");
    assert!(old.sync_txg().await.is_err(), "the old writer must be fenced");
    let late: Vec<String> =
        segments(&store).await.into_iter().filter(|k| !before_late.contains(k)).collect();
    assert!(!late.is_empty(), "the fenced writer uploaded before finding out");

    // The new writer's own txg: its segments are never an orphan to itself, even unpublished.
    new.write(vol, 4096, Bytes::from(vec![3u8; 4096])).await.expect("write");
    new.sync_txg().await.expect("sync");
    let deleted = new.collect_orphans_now().await.expect("collect");
    let left = segments(&store).await;
    for k in &late {
        assert!(!left.contains(k), "the fenced writer's {k} is still in the store");
    }
    assert_eq!(deleted, late.len() as u64, "exactly the fenced writer's uploads are collected");
    check(&new, &[(0, 1), (1, 3)]).await;
    assert_eq!(
        new.collect_orphans_now().await.expect("collect again"),
        0,
        "nothing else is an orphan"
    );
}
