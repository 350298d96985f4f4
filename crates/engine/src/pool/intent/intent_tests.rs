//! Sync requests and the order of the log: two requests that race between taking their records
//! and queueing them must not invert the order of two writes of one block (claim 3 of #17); a
//! request whose records could not be made durable fails every later request until their txg is
//! in the store (claim 4).

use super::super::{CreateOptions, ImportOptions, LogDevices};
use crate::cache::NoCache;
use crate::clock::ManualClock;
use crate::objstore::{open_store_url, DynStore, FaultPlan, FaultyStore};
use crate::rng::Rng;
use crate::root::VdevEntry;
use crate::{Env, Pool, PoolConfig};
use bytes::Bytes;
use fardisk_slog::{FormatOptions, IntentLog, MemProvider, VdevSpec};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

struct Fixture {
    /// In-memory log legs that outlive a "crash" of the pool and can be made to fail.
    devices: MemProvider,
    legs: Vec<PathBuf>,
    store: DynStore,
    env: Env,
}

async fn fixture(store: DynStore) -> Fixture {
    let legs = vec![PathBuf::from("/test/log-a"), PathBuf::from("/test/log-b")];
    let devices = MemProvider::new();
    for leg in &legs {
        devices.add(leg.clone(), 16 << 20);
    }
    let guid = Rng::new(9).next_u128();
    let mut fo = FormatOptions::new(Arc::new(devices.clone()), 9);
    fo.size_bytes = 16 << 20;
    let cfg = IntentLog::format("tank", guid, &VdevSpec::Mirror(legs.clone()), &fo)
        .expect("format the log");
    let vdev = VdevEntry {
        role: crate::root::VdevRole::Log,
        mirror: true,
        guid: cfg.vdev_guid,
        paths: legs.iter().map(|p| p.display().to_string()).collect(),
    };
    let env = Env { clock: Arc::new(ManualClock::default()), seed: 9, blocking_inline: false };
    Pool::create(
        store.clone(),
        "tank",
        CreateOptions { vdevs: vec![vdev], pool_guid: Some(guid), ..Default::default() },
        &env,
    )
    .await
    .expect("create");
    Fixture { devices, legs, store, env }
}

async fn import(f: &Fixture) -> Pool {
    let config =
        PoolConfig { txg_timeout: None, sync_attempts_max: Some(1), ..PoolConfig::default() };
    let log_devices = LogDevices(Arc::new(f.devices.clone()));
    Pool::import(
        f.store.clone(),
        "tank",
        ImportOptions { force: true, config, log_devices, ..Default::default() },
        f.env.clone(),
        Arc::new(NoCache),
    )
    .await
    .expect("import")
}

async fn block0(pool: &Pool) -> u8 {
    let vol = pool.volume_id("v").expect("v");
    pool.read(vol, 0, 4096).await.expect("read")[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_enter_the_log_in_write_order_whatever_the_sync_requests_race() {
    let f = fixture(open_store_url("memory://intent-order-race", true).expect("store")).await;
    let pool = import(&f).await;
    pool.volume_create("v", 1 << 20).expect("volume");
    pool.sync_txg().await.expect("volume in the store");
    let vol = pool.volume_id("v").expect("v");

    // Request A takes the first write's record and is held before queueing it.
    pool.write(vol, 0, Bytes::from(vec![0x11; 4096])).await.expect("first write");
    let go = Arc::new(tokio::sync::Semaphore::new(0));
    *pool.inner.intent.pause_after_take.lock() = Some(go.clone());
    let a = tokio::spawn({
        let pool = pool.clone();
        async move { pool.sync_request().await }
    });
    for _ in 0..10_000 {
        if pool.inner.intent.state.lock().pending.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(pool.inner.intent.state.lock().pending.is_empty(), "request A never took its record");

    // A newer write of the same block, and request B for it, while A is held.
    pool.write(vol, 0, Bytes::from(vec![0x22; 4096])).await.expect("second write");
    let b = tokio::spawn({
        let pool = pool.clone();
        async move { pool.sync_request().await }
    });
    // Give B every chance to overtake A (before the fix it queued and returned here).
    for _ in 0..200 {
        if b.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    go.add_permits(1);
    a.await.expect("task A").expect("sync request A");
    b.await.expect("task B").expect("sync request B");
    assert_eq!(block0(&pool).await, 0x22);

    // Crash: nothing reached the store but the volume; the log replays both records by sequence.
    drop(pool);
    let pool = import(&f).await;
    assert_eq!(
        block0(&pool).await,
        0x22,
        "replay put the older write over the newer one a flush acknowledged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_request_never_succeeds_while_an_earlier_write_is_not_durable() {
    let faulty = Arc::new(FaultyStore::new(
        open_store_url("memory://intent-order-failed", true).expect("store"),
        FaultPlan::default(),
        3,
    ));
    let f = fixture(faulty.clone()).await;
    let pool = import(&f).await;
    pool.volume_create("v", 1 << 20).expect("volume");
    pool.sync_txg().await.expect("volume in the store");
    let vol = pool.volume_id("v").expect("v");

    // The log is gone (both legs) and the store is away: the first request cannot make its write
    // durable either way and fails.
    pool.write(vol, 0, Bytes::from(vec![0x33; 4096])).await.expect("write");
    for leg in &f.legs {
        f.devices.device(leg).expect("leg").set_fail_writes(true);
    }
    faulty.set_plan(FaultPlan { outage: true, ..FaultPlan::default() });
    let first = pool.sync_request().await;
    assert!(first.is_err(), "nothing is durable, yet the first sync request returned Ok");

    // A second request with no records of its own covers the same write: it must not return Ok
    // while the store is still away.
    let second = pool.sync_request().await;
    assert!(
        second.is_err(),
        "a later sync request returned Ok while an acknowledged write was durable nowhere"
    );

    // (The test config gives up after one attempt, so the pool is faulted now; with the default
    // budget the next request waits through the outage instead.)
    assert!(pool.sync_request().await.is_err(), "a faulted pool acknowledged a flush");
}
