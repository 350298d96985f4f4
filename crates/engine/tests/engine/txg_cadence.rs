//! With a log, a pool commits a txg per `txg_timeout` (or sooner for the dirty threshold): sync
//! requests are answered from the log, and nothing else should start a txg. 448a605 broke this:
//! each of the syncer's own txgs left its reclaim to the syncer and woke it with the txg kick, so
//! the next txg started at once, back to back for as long as anything was dirty. Under TPC-B with
//! the store on loopback that was 8,658 PUTs in a 70 s row against 50 before, and 625 tps with 8
//! clients against 859 (`bench/run.sh pgbench-latency`, 0 ms one-way).

// Real time is the point here: the syncer's timer against a stream of writes.
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::clock::{Clock, SystemClock};
use fardisk_engine::objstore::{open_store_url, SimulateSpec, SimulatedStore, Store};
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::rng::Rng;
use fardisk_engine::root::VdevEntry;
use fardisk_engine::{Env, Pool, PoolConfig};
use fardisk_slog::{FormatOptions, IntentLog, VdevSpec};
use std::sync::Arc;
use std::time::Duration;

const TXG_TIMEOUT: Duration = Duration::from_secs(1);
/// 4 KiB write + sync request rounds, one every `ROUND_PAUSE` or so: about 2.5 s of steady
/// writes, several during each txg's commit (the store is 5 ms away), so a syncer that starts a
/// txg right after the last one always finds something dirty (as under fio or TPC-B).
const ROUNDS: u64 = 1000;
const ROUND_PAUSE: Duration = Duration::from_millis(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_log_steady_sync_writes_commit_a_txg_per_timeout_not_back_to_back() {
    let dir = std::env::temp_dir().join(format!("fardisk-txg-cadence-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let leg = dir.join("log");
    let guid = Rng::new(7).next_u128();
    let mut format = FormatOptions::new(Arc::new(fardisk_slog::FileProvider::default()), 7);
    format.size_bytes = 64 << 20;
    let log = IntentLog::format("tank", guid, &VdevSpec::Single(leg.clone()), &format)
        .expect("format the log");
    let vdev = VdevEntry {
        role: fardisk_engine::root::VdevRole::Log,
        mirror: false,
        guid: log.vdev_guid,
        paths: vec![leg.display().to_string()],
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
    let env = Env { clock: clock.clone(), seed: 7, blocking_inline: false };
    let base = open_store_url("memory://txg-cadence", true).expect("store");
    let spec = SimulateSpec::parse("latency=5").expect("spec");
    let store: Arc<dyn Store> = Arc::new(SimulatedStore::new(base, spec, clock, 7));
    let create = CreateOptions { vdevs: vec![vdev], pool_guid: Some(guid), ..Default::default() };
    Pool::create(store.clone(), "tank", create, &env).await.expect("create");
    let config = PoolConfig { txg_timeout: Some(TXG_TIMEOUT), ..PoolConfig::default() };
    let options = ImportOptions { config, ..Default::default() };
    let pool = Pool::import(store, "tank", options, env, Arc::new(NoCache)).await.expect("import");
    let vol = pool.volume_create("v", 64 << 20).expect("volume");
    pool.sync_txg().await.expect("sync");
    let txg0 = pool.published_txg();

    let started = std::time::Instant::now();
    for round in 0..ROUNDS {
        let at = (round % 4096) * 4096;
        pool.write(vol, at, Bytes::from(vec![round as u8 | 1; 4096])).await.expect("write");
        pool.sync_request().await.expect("sync request");
        tokio::time::sleep(ROUND_PAUSE).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let txgs = pool.published_txg() - txg0;
    println!("{ROUNDS} sync writes in {seconds:.1} s, txg_timeout {TXG_TIMEOUT:?}: {txgs} txgs");
    // One per elapsed timeout, and one more for a timer that fired just before the first write.
    let allowed = seconds / TXG_TIMEOUT.as_secs_f64() + 2.0;
    assert!(
        (txgs as f64) <= allowed,
        "{txgs} txgs in {seconds:.1} s with a log and txg_timeout {TXG_TIMEOUT:?}: txgs ran back to back"
    );
    let got = pool.read(vol, 0, 4096).await.expect("read");
    assert!(got.iter().all(|b| *b == 1), "the first round's write reads back");
    pool.export().await.expect("export");
    let _ = std::fs::remove_dir_all(&dir);
}
