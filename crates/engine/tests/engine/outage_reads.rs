//! Reads of blocks only the store holds, while the store is away for longer than a request's
//! retry budget (`failmode`, pool/read.rs). In the chaos run under PostgreSQL (e2e 54) an engine
//! restarted just before a 60 s outage had an empty ARC; its reads gave up after the 30 s budget,
//! PostgreSQL got EIO on a data file and pgbench aborted its clients. With `failmode=wait` (the
//! default) such a read waits until the store answers, as a commit does, and status counts it.

// The outage is waited out in real time (the pool runs on the system clock).
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::objstore::{open_store_url, SimulateSpec, SimulatedStore, Store};
use fardisk_engine::pool::{CreateOptions, ImportOptions, PoolHealth};
use fardisk_engine::{Env, Pool, PoolConfig};
use std::sync::Arc;
use std::time::Duration;

/// A pool whose volume `v` holds 1 MiB of 7s in the store only: written, published, exported
/// and imported again, so no cache holds a block or a map page. Store requests give up after
/// `budget_ms` (the production budget is 30 s).
async fn cold_pool(url: &str, budget_ms: u64) -> (Pool, Arc<SimulatedStore>, u32) {
    let e = Env {
        clock: Arc::new(fardisk_engine::clock::SystemClock::default()),
        seed: 11,
        blocking_inline: false,
    };
    let base = open_store_url(url, true).expect("store");
    let sim = Arc::new(SimulatedStore::new(base, SimulateSpec::default(), e.clock.clone(), 11));
    let store: Arc<dyn Store> = sim.clone();
    Pool::create(store.clone(), "tank", CreateOptions::default(), &e).await.expect("create");
    let mut cfg =
        PoolConfig { txg_timeout: None, sync_attempts_max: None, ..PoolConfig::default() };
    cfg.retry.budget_ms = budget_ms;
    cfg.retry.backoff_max_ms = 20;
    let opts = || ImportOptions { config: cfg.clone(), ..Default::default() };
    let pool = Pool::import(store.clone(), "tank", opts(), e.clone(), Arc::new(NoCache))
        .await
        .expect("import");
    let vol = pool.volume_create("v", 16 << 20).expect("volume");
    pool.write(vol, 0, Bytes::from(vec![7u8; 1 << 20])).await.expect("write");
    pool.sync_txg().await.expect("sync");
    pool.export().await.expect("export");
    let pool =
        Pool::import(store, "tank", opts(), e, Arc::new(NoCache)).await.expect("import again");
    (pool, sim, vol)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_waits_through_an_outage_longer_than_its_retry_budget() {
    let (pool, sim, vol) = cold_pool("memory://outage-reads-wait", 200).await;
    sim.set_outage(true);
    let reader = {
        let p = pool.clone();
        tokio::spawn(async move { p.read(vol, 8192, 4096).await })
    };
    // Ten budgets: before failmode, the read had failed (EIO at the front ends) after one.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert!(!reader.is_finished(), "the read waits for the store: {:?}", {
        if reader.is_finished() {
            Some(reader.await)
        } else {
            None
        }
    });
    let st = pool.status();
    assert_eq!((st.reads_waiting_for_store, st.reads_waited_for_store), (1, 1), "status counts it");
    let PoolHealth::Suspended(why) = pool.health() else {
        panic!("SUSPENDED while the store is silent: {:?}", pool.health())
    };
    assert!(
        why.contains(
            "reads of blocks no cache holds wait for the store (1 waiting; failmode=wait)"
        ),
        "{why}"
    );
    sim.set_outage(false);
    let got = tokio::time::timeout(Duration::from_secs(30), reader)
        .await
        .expect("the read ends once the store answers")
        .expect("join")
        .expect("the read succeeds");
    assert!(got.len() == 4096 && got.iter().all(|&b| b == 7), "the stored bytes");
    assert_eq!(pool.status().reads_waiting_for_store, 0, "no read waits any more");
    pool.export().await.expect("export");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_failmode_continue_a_read_fails_after_its_retry_budget() {
    let (pool, sim, vol) = cold_pool("memory://outage-reads-continue", 200).await;
    pool.set_prop("failmode", "continue").expect("set failmode");
    sim.set_outage(true);
    let got = tokio::time::timeout(Duration::from_secs(30), pool.read(vol, 8192, 4096))
        .await
        .expect("the read ends within its budget");
    let e = got.expect_err("the store is away");
    assert_eq!(e.errno(), libc::EIO, "{e}");
    assert_eq!(pool.status().reads_waited_for_store, 0, "it did not wait");
    sim.set_outage(false);
    let got = pool.read(vol, 8192, 4096).await.expect("read after the outage");
    assert!(got.iter().all(|&b| b == 7));
}
