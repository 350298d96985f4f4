//! How long freeing a large trim takes when the store is far (issue #21): the free queue's leaf
//! pages are read `read_concurrency` at a time (pool/txg/frees.rs). A benchmark, not a CI test
//! (real time on a shared machine): `cargo test -p fardisk-engine --test engine far_frees:: --
//! --ignored --nocapture` prints both configurations of one run, one page per round trip
//! (`read_concurrency` 1, what freeing did before) and the default. `big_frees.rs` checks the
//! overlap itself, deterministically, in CI.

// Real time is the point here: the store is 10 ms away on the system clock.
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::clock::{Clock, SystemClock};
use fardisk_engine::objstore::{open_store_url, SimulateSpec, SimulatedStore, Store};
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::{Env, Pool, PoolConfig};
use std::sync::Arc;
use std::time::Instant;

const VOL_BYTES: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const LATENCY_MS: u64 = 10;

/// Seconds from a whole-volume trim of a 1 GiB volume with a block in every MiB (1,024 leaf
/// pages of map) until its frees are done, with the store `LATENCY_MS` away.
async fn seconds_to_free(read_concurrency: usize) -> (f64, u64) {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
    let env = Env { clock: clock.clone(), seed: 5, blocking_inline: false };
    let base =
        open_store_url(&format!("memory://far-frees-{read_concurrency}"), true).expect("store");
    Pool::create(base.clone(), "tank", CreateOptions::default(), &env).await.expect("create");
    let config = PoolConfig { txg_timeout: None, read_concurrency, ..PoolConfig::default() };
    let options = || ImportOptions { config: config.clone(), ..Default::default() };
    let pool = Pool::import(base.clone(), "tank", options(), env.clone(), Arc::new(NoCache))
        .await
        .expect("import");
    let vol = pool.volume_create("v", VOL_BYTES).expect("volume");
    for mib in 0..VOL_BYTES / MIB {
        pool.write(vol, mib * MIB, Bytes::from(vec![mib as u8 | 1; 4096])).await.expect("write");
    }
    pool.export().await.expect("export");

    let spec = SimulateSpec::parse(&format!("latency={LATENCY_MS}")).expect("spec");
    let far: Arc<dyn Store> = Arc::new(SimulatedStore::new(base, spec, clock, 5));
    let pool =
        Pool::import(far, "tank", options(), env, Arc::new(NoCache)).await.expect("far import");
    let vol = pool.volume_id("v").expect("v");
    // Let the import's background work (root listing, space walk) finish first.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    pool.zero(vol, 0, VOL_BYTES).await.expect("whole-device discard");
    let t0 = Instant::now();
    let mut txgs = 0u64;
    pool.sync_txg().await.expect("the trim's txg");
    while pool.free_queue_entries() > 0 {
        pool.sync_step().await.expect("sync step").expect("frees queued make a txg");
        txgs += 1;
        assert!(txgs <= 1_000, "the queue does not shrink");
    }
    let secs = t0.elapsed().as_secs_f64();
    pool.audit_space().await.expect("audit after the frees");
    pool.export().await.expect("export");
    (secs, txgs + 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: real time; run with --ignored --nocapture"]
async fn freeing_a_large_trim_from_a_far_store() {
    let (one, txgs_one) = seconds_to_free(1).await;
    let concurrency = PoolConfig::default().read_concurrency;
    let (many, txgs_many) = seconds_to_free(concurrency).await;
    println!(
        "1 GiB trim (1,024 leaf pages), store {LATENCY_MS} ms away: read_concurrency 1 (one page per round trip, as before) {one:.2} s in {txgs_one} txgs; read_concurrency {concurrency} (default) {many:.2} s in {txgs_many} txgs; {:.1}x",
        one / many
    );
    assert!(many < one, "reading leaf pages together was not faster ({many:.2} s vs {one:.2} s)");
}
