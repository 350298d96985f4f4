//! Rollback, snapshot destroy and whole-device discard of a 256 GiB thin volume with data in
//! every MiB (issue #21): the resident memory each adds over the pool's before it began, how long
//! it takes, how many txgs it spreads over, and the sync latency another writer sees meanwhile.
//! A benchmark, not a CI test (real time and RSS on a shared machine):
//! `cargo test -p fardisk-engine --test engine big_volume:: -- --ignored --nocapture`
//! (`BIG_VOLUME_GIB=N` for another size). The store is a local directory: what is measured is
//! the engine's own work and memory, not the store's distance (`far_frees.rs` has that).

// Real time and the process's RSS are the point here.
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::clock::{Clock, SystemClock};
use fardisk_engine::objstore::open_store_url;
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::{Env, Pool, PoolConfig};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// Writes between two syncs while filling (bounds the dirty data).
const WRITES_PER_SYNC: u64 = 8192;

/// Resident set size of this process, bytes.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib * 1024
}

/// The highest RSS seen by a thread sampling every 10 ms, from `reset` on.
struct RssPeak {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl RssPeak {
    fn start() -> RssPeak {
        let (peak, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let (p, s) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            // Bounded: the benchmark runs for minutes, not days.
            for _ in 0..(24 * 3600 * 100) {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                p.fetch_max(rss_bytes(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        RssPeak { peak, stop }
    }
    fn reset(&self) {
        self.peak.store(rss_bytes(), Ordering::Relaxed);
    }
    fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed).max(rss_bytes())
    }
}

impl Drop for RssPeak {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A writer on another volume: a 4 KiB write and a sync request (a txg in the store: no log),
/// in a loop until stopped; returns each sync's latency in microseconds.
fn probe_writer(pool: Pool, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Vec<u64>> {
    tokio::spawn(async move {
        let vol = pool.volume_id("probe").expect("probe volume");
        let mut lat = Vec::new();
        for i in 0..1_000_000u64 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let t = Instant::now();
            pool.write(vol, (i % 256) * 4096, Bytes::from(vec![i as u8; 4096]))
                .await
                .expect("probe write");
            pool.sync_request().await.expect("probe sync");
            lat.push(t.elapsed().as_micros() as u64);
        }
        lat
    })
}

fn pct(v: &mut [u64], p: f64) -> f64 {
    v.sort_unstable();
    if v.is_empty() {
        return 0.0;
    }
    v[((v.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0
}

/// Runs `op`, then syncs until the free queue is empty and no destroy walk is under way; prints
/// what it cost.
async fn measure<F, Fut>(name: &str, pool: &Pool, rss: &RssPeak, op: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let base = rss_bytes();
    rss.reset();
    let stop = Arc::new(AtomicBool::new(false));
    let probe = probe_writer(pool.clone(), stop.clone());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t0 = Instant::now();
    let published0 = pool.published_txg();
    op().await;
    pool.sync_txg().await.expect("the op's txg");
    let freeing = || pool.free_queue_entries() > 0 || !pool.trees_being_destroyed().is_empty();
    for _ in 0..100_000 {
        if !freeing() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!freeing(), "{name}: the free queue drains and every destroy walk ends");
    let secs = t0.elapsed().as_secs_f64();
    let txgs = pool.published_txg() - published0;
    stop.store(true, Ordering::Relaxed);
    let mut lat = probe.await.expect("probe");
    let peak = rss.peak();
    println!(
        "BIG_VOLUME {name}: {secs:.2} s over {txgs} txgs; RSS {} MiB before, peak +{} MiB; other writer's sync ({} syncs) p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        base >> 20,
        peak.saturating_sub(base) >> 20,
        lat.len(),
        pct(&mut lat, 0.5),
        pct(&mut lat, 0.99),
        pct(&mut lat, 1.0),
    );
}

/// One 4 KiB block in every MiB of the volume, `fill` its first byte.
async fn write_every_mib(pool: &Pool, vol: u32, vol_bytes: u64, fill: u8, every_nth: u64) {
    for (n, mib) in (0..vol_bytes / MIB).step_by(every_nth as usize).enumerate() {
        pool.write(vol, mib * MIB, Bytes::from(vec![fill; 4096])).await.expect("write");
        if (n as u64 + 1).is_multiple_of(WRITES_PER_SYNC) {
            pool.sync_txg().await.expect("sync");
        }
    }
    pool.sync_txg().await.expect("sync");
}

/// Both configurations in one run: pages read one at a time (`read_concurrency` 1: how a
/// snapshot destroy walked before) and the default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: minutes of real time and RSS; run with --ignored --nocapture"]
async fn trims_destroys_and_rollbacks_of_a_big_volume() {
    let gib: u64 = std::env::var("BIG_VOLUME_GIB").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    // `BIG_VOLUME_READ_CONCURRENCY=N` runs one configuration only.
    let only: Option<usize> =
        std::env::var("BIG_VOLUME_READ_CONCURRENCY").ok().and_then(|v| v.parse().ok());
    let all = [1, PoolConfig::default().read_concurrency];
    for read_concurrency in only.map(|n| vec![n]).unwrap_or(all.to_vec()) {
        println!("BIG_VOLUME read_concurrency {read_concurrency}");
        run(gib, read_concurrency).await;
    }
}

async fn run(gib: u64, read_concurrency: usize) {
    let vol_bytes = gib * GIB;
    let dir = std::env::temp_dir()
        .join(format!("fardisk-big-volume-{}-{read_concurrency}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("store dir");
    let store = open_store_url(&format!("file://{}", dir.display()), true).expect("store");
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
    let env = Env { clock, seed: 21, blocking_inline: false };
    Pool::create(store.clone(), "tank", CreateOptions::default(), &env).await.expect("create");
    let config = PoolConfig {
        txg_timeout: Some(Duration::from_millis(200)),
        read_concurrency,
        ..PoolConfig::default()
    };
    let opts = ImportOptions { config: config.clone(), ..Default::default() };
    let pool = Pool::import(store, "tank", opts, env, Arc::new(NoCache)).await.expect("import");
    let vol = pool.volume_create("big", vol_bytes).expect("volume");
    pool.volume_create("probe", 16 * MIB).expect("probe volume");
    let rss = RssPeak::start();

    let t = Instant::now();
    write_every_mib(&pool, vol, vol_bytes, 1, 1).await;
    pool.snapshot_create("big", "s1").await.expect("s1");
    write_every_mib(&pool, vol, vol_bytes, 2, 1).await;
    pool.snapshot_create("big", "s2").await.expect("s2");
    write_every_mib(&pool, vol, vol_bytes, 3, 2).await;
    let blocks = vol_bytes / MIB;
    println!(
        "BIG_VOLUME setup: {gib} GiB volume, {blocks} blocks written twice and {} a third time, snapshots s1 and s2, in {:.1} s; RSS {} MiB; map cache {} MiB",
        blocks / 2,
        t.elapsed().as_secs_f64(),
        rss_bytes() >> 20,
        pool.status().map_cache_bytes >> 20
    );

    // Frees the third writes (half the blocks) through the free queue.
    measure("rollback to s2", &pool, &rss, || async {
        pool.rollback("big", "s2", false).await.expect("rollback");
    })
    .await;
    // s1 alone holds the first writes: every block.
    measure("destroy s1", &pool, &rss, || async {
        pool.snapshot_destroy("big", "s1").await.expect("destroy s1");
    })
    .await;
    // The volume shares everything with s2: nothing to free, only the walk.
    measure("destroy s2", &pool, &rss, || async {
        pool.snapshot_destroy("big", "s2").await.expect("destroy s2");
    })
    .await;
    // Frees the second writes, every block.
    measure("whole-device discard", &pool, &rss, || async {
        pool.zero(vol, 0, vol_bytes).await.expect("discard");
    })
    .await;
    pool.audit_space().await.expect("space audit");
    pool.export().await.expect("export");
    std::fs::remove_dir_all(&dir).expect("remove the store");
}
