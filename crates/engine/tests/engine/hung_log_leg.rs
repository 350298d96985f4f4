//! A mirrored log leg that stops answering (a hung device: its flush never returns): sync
//! requests wait for it once, `log_leg_timeout_ms`, then go on with the other leg; `status`
//! says so; nothing acknowledged is lost, through a power cut while it still hangs. Before,
//! every sync request waited for as long as the device hung.

// Real time is the point: the bound on a wait for a device that does not answer.
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::clock::ManualClock;
use fardisk_engine::objstore::open_store_url;
use fardisk_engine::pool::{CreateOptions, ImportOptions, LogDevices, PoolHealth};
use fardisk_engine::root::{VdevEntry, VdevRole};
use fardisk_engine::{Env, Pool, PoolConfig};
use fardisk_slog::{CrashDevice, FormatOptions, IntentLog, MemProvider, VdevSpec};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

async fn import(
    store: &Arc<dyn fardisk_engine::objstore::Store>,
    log: &MemProvider,
    env: &Env,
) -> Pool {
    let opts = ImportOptions {
        force: true,
        config: PoolConfig { txg_timeout: None, ..PoolConfig::default() },
        log_devices: LogDevices(Arc::new(log.clone())),
        ..Default::default()
    };
    Pool::import(store.clone(), "tank", opts, env.clone(), Arc::new(NoCache)).await.expect("import")
}

/// A bounded wait for a task that must end without the hung device. Polled from this thread
/// with real sleeps: a sync request waiting on a device blocks a runtime worker, and with both
/// blocked nothing would drive a tokio timer. On failure the device is let go first, or the
/// runtime's shutdown would wait for the blocked worker forever.
async fn within_30_s<T>(what: &str, task: JoinHandle<T>, hung: &CrashDevice) -> T {
    for _ in 0..3_000 {
        if task.is_finished() {
            return task.await.expect("task");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    hung.release_flushes();
    panic!("{what} waited for the hung log leg");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_log_leg_stalls_sync_requests_once_then_they_go_on_without_it() {
    let log = MemProvider::new();
    let legs = vec![PathBuf::from("/log/a"), PathBuf::from("/log/b")];
    for leg in &legs {
        log.add(leg.clone(), 16 << 20);
    }
    let guid = 0x4a11_u128;
    let mut fo = FormatOptions::new(Arc::new(log.clone()), 1);
    fo.size_bytes = 16 << 20;
    let cfg = IntentLog::format("tank", guid, &VdevSpec::Mirror(legs.clone()), &fo)
        .expect("format the log");
    let vdev = VdevEntry {
        role: VdevRole::Log,
        mirror: true,
        guid: cfg.vdev_guid,
        paths: legs.iter().map(|p| p.display().to_string()).collect(),
    };
    let clock = Arc::new(ManualClock::default());
    let env = Env { clock: clock.clone(), seed: 1, blocking_inline: false };
    let store = open_store_url("memory://hung-log-leg", true).expect("store");
    let create = CreateOptions { vdevs: vec![vdev], pool_guid: Some(guid), ..Default::default() };
    Pool::create(store.clone(), "tank", create, &env).await.expect("create");
    let pool = import(&store, &log, &env).await;
    // Set at run time: the log in service takes it at once.
    pool.set_prop("log_leg_timeout_ms", "500").expect("set");
    pool.volume_create("v", 1 << 20).expect("volume");
    let vol = pool.volume_id("v").expect("v");
    pool.write(vol, 0, Bytes::from(vec![1u8; 4096])).await.expect("write");
    pool.sync_txg().await.expect("the volume and its first block published");

    let hung = log.device(&legs[1]).expect("leg b");
    hung.hold_flushes();
    pool.write(vol, 4096, Bytes::from(vec![2u8; 4096])).await.expect("write");
    let p = pool.clone();
    let stalled = tokio::spawn(async move { p.sync_request().await });
    let held = hung.clone();
    let blocked = tokio::task::spawn_blocking(move || {
        held.wait_for_blocked_flushes(1, Duration::from_secs(30))
    });
    assert!(blocked.await.expect("task"), "leg b's flush is held");
    clock.advance(Duration::from_millis(500));
    within_30_s("the sync request under way", stalled, &hung).await.expect("acknowledged on leg a");

    let status = pool.status();
    let leg_b = &status.log["vdevs"][0]["legs"][1];
    assert_eq!((leg_b["state"].as_str(), leg_b["timeouts"].as_u64()), (Some("FAULTED"), Some(1)));
    assert!(matches!(pool.health(), PoolHealth::Degraded(_)), "{:?}", pool.health());
    // Leg b still hangs; the next sync requests do not wait for it, nor for the clock.
    for i in 2..6u64 {
        pool.write(vol, i * 4096, Bytes::from(vec![i as u8 + 1; 4096])).await.expect("write");
        let p = pool.clone();
        within_30_s(
            "a later sync request",
            tokio::spawn(async move { p.sync_request().await }),
            &hung,
        )
        .await
        .expect("acknowledged on leg a");
    }

    // Power cut while leg b hangs: no txg was published since the first block, so the
    // acknowledged writes after it live only in the log, on leg a.
    let crashed = log.crash(3);
    hung.release_flushes();
    drop(pool);
    let again = import(&store, &crashed, &env).await;
    let vol = again.volume_id("v").expect("v");
    let got = again.read(vol, 0, 6 * 4096).await.expect("read");
    for i in 0..6usize {
        assert!(got[i * 4096..(i + 1) * 4096].iter().all(|&b| b == i as u8 + 1), "block {i}");
    }
}
