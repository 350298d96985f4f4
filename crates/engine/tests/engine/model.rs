//! Model-based randomized test of the pool engine: writes, reads, trims, syncs, compaction and
//! crashes at any point (including between the PUTs of one txg), checked against an in-memory
//! model. A fixed set of seeds runs in CI; `FARDISK_SOAK_SEEDS=N` runs N more.

use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::clock::ManualClock;
use fardisk_engine::objstore::{open_store_url, FaultPlan, FaultyStore, Store};
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::rng::Rng;
use fardisk_engine::{Env, Pool, PoolConfig};
use std::sync::Arc;

const VOL_BYTES: u64 = 6 << 20;
/// A second, huge thin volume: its writes land far apart and exercise a deep map.
const BIG_VOL_BYTES: u64 = 16 << 40;

struct Model {
    current: Vec<u8>,
    durable: Vec<u8>,
    big_current: std::collections::BTreeMap<u64, u8>,
    big_durable: std::collections::BTreeMap<u64, u8>,
}

fn config() -> PoolConfig {
    PoolConfig {
        txg_timeout: None,
        segment_bytes_target: 96 << 10,
        map_cache_bytes: 0, // The cache keeps its floor of 64 pages: evictions happen constantly.
        sync_attempts_max: Some(1),
        roots_kept: 2,
        compact_live_percent: 60,
        ..PoolConfig::default()
    }
}

async fn import(store: Arc<dyn Store>, env: &Env) -> Pool {
    let opts =
        ImportOptions { force: true, config: config(), missing_log: false, ..Default::default() };
    Pool::import(store, "model", opts, env.clone(), Arc::new(NoCache)).await.expect("import")
}

async fn matches(pool: &Pool, model: &Model, durable: bool) -> Result<(), String> {
    let vol = pool.volume_id("vol").expect("vol exists");
    let got = pool.read(vol, 0, VOL_BYTES as u32).await.expect("full read");
    let want = if durable { &model.durable } else { &model.current };
    if let Some(pos) = got.iter().zip(want.iter()).position(|(a, b)| a != b) {
        return Err(format!("byte {pos} is {} but the model says {}", got[pos], want[pos]));
    }
    // Ranges that start and end inside blocks, read as parts (as the FUSE front end reads).
    let vol_bytes = VOL_BYTES as usize;
    for (offset, len) in [(1, 4095), (4095, 2), (777, 3 * 4096 + 5), (vol_bytes - 4097, 4097)] {
        let parts = pool.read_parts(vol, offset as u64, len as u32).await.expect("read in parts");
        let joined: Vec<u8> = parts.concat();
        if joined[..] != want[offset..offset + len] || parts.iter().any(|p| p.is_empty()) {
            return Err(format!("{len} bytes at {offset} read in parts differ from the model"));
        }
    }
    let big = pool.volume_id("big").expect("big exists");
    let map = if durable { &model.big_durable } else { &model.big_current };
    for (&block, &fill) in map {
        let b = pool.read(big, block * 4096, 4096).await.expect("big read");
        if !b.iter().all(|&x| x == fill) {
            return Err(format!("big block {block} expected fill {fill}"));
        }
    }
    Ok(())
}

async fn check_all(pool: &Pool, model: &Model, durable: bool, what: &str) {
    if let Err(e) = matches(pool, model, durable).await {
        panic!("{what}: {e}");
    }
}

/// After a crash the pool holds either the last state known durable or, if the interrupted sync
/// published its root before failing later, everything written: never a mix of the two.
async fn check_crash_outcome(pool: &Pool, model: &mut Model, what: &str) {
    if matches(pool, model, true).await.is_ok() {
        return;
    }
    if let Err(e) = matches(pool, model, false).await {
        panic!("{what}: the pool is neither the durable nor the current state: {e}");
    }
    model.durable = model.current.clone();
    model.big_durable = model.big_current.clone();
}

async fn run_seed(seed: u64, ops: usize) {
    let rng = Rng::new(seed);
    let clock = Arc::new(ManualClock::default());
    let env = Env { clock: clock.clone(), seed, blocking_inline: false };
    let base = open_store_url(&format!("memory://model-{seed}"), true).expect("memory store");
    let faulty = Arc::new(FaultyStore::new(base, FaultPlan::default(), seed));
    let store: Arc<dyn Store> = faulty.clone();
    Pool::create(store.clone(), "model", CreateOptions::default(), &env).await.expect("create");
    let mut pool = import(store.clone(), &env).await;
    pool.volume_create("vol", VOL_BYTES).expect("volume");
    pool.volume_create("big", BIG_VOL_BYTES).expect("big volume");
    pool.sync_txg().await.expect("first sync");
    let mut model = Model {
        current: vec![0; VOL_BYTES as usize],
        durable: vec![0; VOL_BYTES as usize],
        big_current: Default::default(),
        big_durable: Default::default(),
    };
    let mut crashes = 0;
    for step in 0..ops {
        let vol = pool.volume_id("vol").expect("vol");
        match rng.below(100) {
            0..=44 => {
                // Unaligned writes of up to 40 KiB, with a bias towards a hot region.
                let len = 1 + rng.below(40 << 10);
                let span = if rng.chance(0.5) { 512 << 10 } else { VOL_BYTES - len };
                let off = rng.below(span.min(VOL_BYTES - len));
                let fill = (rng.below(255) + 1) as u8;
                let data = if rng.chance(0.15) {
                    vec![0u8; len as usize]
                } else {
                    vec![fill; len as usize]
                };
                pool.write(vol, off, Bytes::from(data.clone())).await.expect("write");
                model.current[off as usize..(off + len) as usize].copy_from_slice(&data);
            }
            45..=52 => {
                let len = 1 + rng.below(128 << 10);
                let off = rng.below(VOL_BYTES - len);
                pool.zero(vol, off, len).await.expect("trim");
                model.current[off as usize..(off + len) as usize].fill(0);
            }
            53..=57 => {
                let big = pool.volume_id("big").expect("big");
                let block = rng.below(BIG_VOL_BYTES / 4096);
                let fill = (rng.below(255) + 1) as u8;
                pool.write(big, block * 4096, Bytes::from(vec![fill; 4096]))
                    .await
                    .expect("big write");
                model.big_current.insert(block, fill);
            }
            58..=72 => {
                let len = 1 + rng.below(64 << 10);
                let off = rng.below(VOL_BYTES - len);
                let got = pool.read(vol, off, len as u32).await.expect("read");
                assert_eq!(
                    &got[..],
                    &model.current[off as usize..(off + len) as usize],
                    "seed {seed} step {step}: read at {off}+{len}"
                );
            }
            73..=86 => {
                pool.sync_txg().await.expect("sync");
                model.durable = model.current.clone();
                model.big_durable = model.big_current.clone();
            }
            87..=91 => {
                pool.compact_now().await.expect("compaction");
                model.durable = model.current.clone();
                model.big_durable = model.big_current.clone();
                check_all(
                    &pool,
                    &model,
                    false,
                    &format!("seed {seed} step {step} after compaction"),
                )
                .await;
            }
            _ => {
                // Crash somewhere inside the next sync: after 0..6 more mutations the process "dies".
                let budget = faulty.mutations() + rng.below(7);
                faulty.set_plan(FaultPlan {
                    crash_after_mutations: Some(budget),
                    ..FaultPlan::default()
                });
                let synced = pool.sync_txg().await.is_ok();
                if synced {
                    model.durable = model.current.clone();
                    model.big_durable = model.big_current.clone();
                }
                drop(pool);
                faulty.set_plan(FaultPlan::default());
                pool = import(store.clone(), &env).await;
                if synced {
                    check_all(
                        &pool,
                        &model,
                        true,
                        &format!("seed {seed} step {step} after crash (synced)"),
                    )
                    .await;
                } else {
                    check_crash_outcome(
                        &pool,
                        &mut model,
                        &format!("seed {seed} step {step} after crash"),
                    )
                    .await;
                }
                model.current = model.durable.clone();
                model.big_current = model.big_durable.clone();
                crashes += 1;
            }
        }
    }
    pool.sync_txg().await.expect("final sync");
    model.durable = model.current.clone();
    model.big_durable = model.big_current.clone();
    pool.compact_now().await.expect("final compaction");
    pool.export().await.expect("export");
    let pool = Pool::import(
        store.clone(),
        "model",
        ImportOptions { force: false, config: config(), missing_log: false, ..Default::default() },
        env.clone(),
        Arc::new(NoCache),
    )
    .await
    .expect("import after export needs no force");
    check_all(&pool, &model, true, &format!("seed {seed} after export/import")).await;
    pool.audit_space().await.unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let st = pool.status();
    assert!(
        st.space.live_bytes <= st.space.physical_bytes + (1 << 20),
        "seed {seed}: live {} > physical {}",
        st.space.live_bytes,
        st.space.physical_bytes
    );
    let allocated: u64 = st.volumes.iter().map(|v| v.allocated_bytes).sum();
    assert_eq!(allocated, st.space.logical_bytes, "seed {seed}: logical accounting");
    let nonzero_blocks =
        model.current.chunks(4096).filter(|c| c.iter().any(|&b| b != 0)).count() as u64;
    assert_eq!(
        st.volumes.iter().find(|v| v.name == "vol").map(|v| v.allocated_bytes),
        Some(nonzero_blocks * 4096),
        "seed {seed}: holes are not stored"
    );
    eprintln!(
        "seed {seed}: {ops} ops, {crashes} crashes, txg {}, live {} B, physical {} B",
        st.published_txg, st.space.live_bytes, st.space.physical_bytes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_fixed_seeds() {
    for seed in 1..=6u64 {
        run_seed(seed, 250).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_soak() {
    let n: u64 = std::env::var("FARDISK_SOAK_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    let start: u64 =
        std::env::var("FARDISK_SOAK_START").ok().and_then(|s| s.parse().ok()).unwrap_or(1000);
    for seed in start..start + n {
        run_seed(seed, 1500).await;
    }
}
