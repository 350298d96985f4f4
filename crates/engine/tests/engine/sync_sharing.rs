//! Without a log, a sync request waits for the txg that holds its writes. Requests that arrive
//! while a txg is being committed share the next one: a waiter whose writes are published by
//! the time it gets the sync lock returns, instead of committing whatever another client wrote
//! since (issue #21: before the fix each of 8 clients' requests cost a txg of its own). And a
//! request returns once its root is in the store: the DELETEs of what that root made
//! unreachable (the old root, freed segments) follow in the syncer, not on the request's path.

// Real time is the point here: the store is 5 ms away on the system clock so requests overlap.
#![allow(clippy::disallowed_methods)]

use crate::counting_store::CountingStore;
use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::clock::{Clock, SystemClock};
use fardisk_engine::objstore::{open_store_url, SimulateSpec, SimulatedStore, Store};
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::{Env, Pool, PoolConfig};
use std::sync::Arc;

const CLIENTS: u64 = 8;
const ROUNDS: u64 = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sync_requests_without_a_log_share_txgs() {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
    let env = Env { clock: clock.clone(), seed: 21, blocking_inline: false };
    let base = open_store_url("memory://sync-sharing", true).expect("store");
    let far: Arc<dyn Store> = Arc::new(SimulatedStore::new(
        base,
        SimulateSpec::parse("latency=5").expect("spec"),
        clock,
        21,
    ));
    Pool::create(far.clone(), "tank", CreateOptions::default(), &env).await.expect("create");
    // No txg timer: only the sync requests make txgs.
    let config = PoolConfig {
        txg_timeout: Some(std::time::Duration::from_secs(3600)),
        ..PoolConfig::default()
    };
    let options = ImportOptions { config, ..Default::default() };
    let pool = Pool::import(far, "tank", options, env, Arc::new(NoCache)).await.expect("import");
    let vol = pool.volume_create("v", 64 << 20).expect("volume");
    pool.sync_txg().await.expect("sync");
    let txg0 = pool.published_txg();

    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let pool = pool.clone();
        clients.push(tokio::spawn(async move {
            for r in 0..ROUNDS {
                let at = (c * ROUNDS + r) * 4096;
                pool.write(vol, at, Bytes::from(vec![(c * 16 + r) as u8 + 1; 4096]))
                    .await
                    .expect("write");
                pool.sync_request().await.expect("sync request");
            }
        }));
    }
    for client in clients {
        client.await.expect("client");
    }
    let requests = CLIENTS * ROUNDS;
    let txgs = pool.published_txg() - txg0;
    println!("{requests} sync requests from {CLIENTS} clients: {txgs} txgs");
    // Each client's next request waits for the txg after the one in flight, which the 7 others'
    // requests of that moment share: well under one txg per request.
    assert!(txgs * 2 <= requests, "{requests} sync requests made {txgs} txgs");
    for c in 0..CLIENTS {
        for r in 0..ROUNDS {
            let at = (c * ROUNDS + r) * 4096;
            let got = pool.read(vol, at, 4096).await.expect("read");
            assert!(got.iter().all(|b| *b == (c * 16 + r) as u8 + 1), "client {c} round {r}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_request_without_a_log_does_not_wait_for_the_deletes_after_its_root() {
    let env = Env::system();
    let counting =
        Arc::new(CountingStore::new(open_store_url("memory://sync-deletes", true).expect("store")));
    let store: Arc<dyn Store> = counting.clone();
    Pool::create(store.clone(), "tank", CreateOptions::default(), &env).await.expect("create");
    // roots_kept 0: each publish makes the previous root deletable at once. No txg timer: the
    // syncer runs only when kicked.
    let config = PoolConfig {
        txg_timeout: Some(std::time::Duration::from_secs(3600)),
        roots_kept: 0,
        ..PoolConfig::default()
    };
    let options = ImportOptions { config, ..Default::default() };
    let pool = Pool::import(store, "tank", options, env, Arc::new(NoCache)).await.expect("import");
    let vol = pool.volume_create("v", 64 << 20).expect("volume");
    pool.sync_txg().await.expect("sync");
    // Import-time reclaim must have settled, or nothing is deleted at all (bounded: 10 s).
    for _ in 0..1000 {
        if pool.status().pending_deletes == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }

    counting.hold_deletes(true);
    let txg0 = pool.published_txg();
    pool.write(vol, 0, Bytes::from(vec![9u8; 4096])).await.expect("write");
    tokio::time::timeout(std::time::Duration::from_secs(10), pool.sync_request())
        .await
        .expect("the request returns while the DELETE after its root is held")
        .expect("sync request");
    assert!(pool.published_txg() > txg0, "its txg is published");
    // The deferred reclaim runs in the syncer and waits there (bounded: 10 s).
    for _ in 0..1000 {
        if counting.deletes_waiting.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        counting.deletes_waiting.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "the old root's DELETE went out after the request returned"
    );
    counting.hold_deletes(false);
    pool.write(vol, 4096, Bytes::from(vec![8u8; 4096])).await.expect("write");
    pool.sync_request().await.expect("the next request");
    let got = pool.read(vol, 0, 8192).await.expect("read");
    assert!(got[..4096].iter().all(|&b| b == 9) && got[4096..].iter().all(|&b| b == 8));
    pool.export().await.expect("export");
}
