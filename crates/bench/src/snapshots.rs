//! snapshots: how long `snapshot` and `clone` take on volumes of different sizes, and what each
//! snapshot adds to the store. For each size, a volume is filled with incompressible data
//! (through a pool on the bare local store, so filling is quick), then the pool is imported
//! through a store `latency_ms` away and, `rounds` times: a snapshot of the clean volume, a
//! snapshot right after 16 MiB of new writes (its txg must upload them first), and a clone.
//! Objects and bytes in the store are counted before and after each clean snapshot. The page
//! cache's writeback of the fill is drained (`sync`) before anything is timed.

use crate::data::Rng;
use crate::far_store::far_file_store;
use crate::stats::{self, round3};
use anyhow::{anyhow, Result};
use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::clock::{Clock, SystemClock};
use fardisk_engine::objstore::Store;
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::{Env, Pool, PoolConfig};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const DIRTY_BYTES: u64 = 16 * MIB;

#[derive(Debug, Clone)]
pub struct Args {
    pub dir: PathBuf,
    pub sizes_gib: Vec<u64>,
    pub rounds: usize,
    pub latency_ms: u64,
    pub seed: u64,
}

fn chunk(rng: &Rng, bytes: u64) -> Bytes {
    let mut buf = vec![0u8; bytes as usize];
    rng.fill(&mut buf);
    Bytes::from(buf)
}

fn e(x: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("{x}")
}

async fn store_usage(store: &Arc<dyn Store>) -> Result<(u64, u64)> {
    let mut objects = 0u64;
    let mut bytes = 0u64;
    for prefix in ["segments/", "roots/", "head"] {
        for (_, b) in store.list(prefix).await.map_err(e)? {
            objects += 1;
            bytes += b;
        }
    }
    Ok((objects, bytes))
}

fn median(v: &[f64]) -> f64 {
    stats::median(v).unwrap_or(0.0)
}

async fn one_size(a: &Args, size_gib: u64, order: i64, note: &str) -> Result<Value> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
    let dir = a.dir.join(format!("{size_gib}g"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let env = Env { clock: clock.clone(), seed: a.seed, blocking_inline: false };
    let (base, far) = far_file_store(&dir.join("store"), a.latency_ms, clock.clone(), a.seed)?;
    Pool::create(base.clone(), "bench", CreateOptions::default(), &env).await.map_err(e)?;
    let config = PoolConfig {
        compression: fardisk_engine::compress::Compression::Off,
        ..PoolConfig::default()
    };
    let opts = || ImportOptions { config: config.clone(), ..Default::default() };

    let t0 = clock.mono_us();
    let pool = Pool::import(base.clone(), "bench", opts(), env.clone(), Arc::new(NoCache))
        .await
        .map_err(e)?;
    let vol = pool.volume_create("v", size_gib * GIB).map_err(e)?;
    let rng = Rng::new(a.seed);
    for i in 0..size_gib * GIB / (4 * MIB) {
        pool.write(vol, i * 4 * MIB, chunk(&rng, 4 * MIB)).await.map_err(e)?;
    }
    pool.export().await.map_err(e)?;
    drop(pool);
    let fill_s = (clock.mono_us() - t0) as f64 / 1e6;
    eprintln!("fardisk-bench: {size_gib} GiB volume filled in {fill_s:.1} s");
    // The fill leaves gigabytes of dirty page cache; the kernel's writeback of them would land in
    // the middle of the measurement (the file store fsyncs every object), so drain it first.
    let s = clock.mono_us();
    let _ = std::process::Command::new("sync").status();
    eprintln!("fardisk-bench: writeback drained in {:.1} s", (clock.mono_us() - s) as f64 / 1e6);

    let pool = Pool::import(far, "bench", opts(), env, Arc::new(NoCache)).await.map_err(e)?;
    let (mut clean_ms, mut dirty_ms, mut clone_ms) = (Vec::new(), Vec::new(), Vec::new());
    let (mut objects_added, mut bytes_added) = (Vec::new(), Vec::new());
    for r in 0..a.rounds {
        let before = store_usage(&base).await?;
        let s = clock.mono_us();
        pool.snapshot_create("v", &format!("clean{r}")).await.map_err(e)?;
        clean_ms.push((clock.mono_us() - s) as f64 / 1e3);
        let after = store_usage(&base).await?;
        objects_added.push(after.0 as f64 - before.0 as f64);
        bytes_added.push(after.1 as f64 - before.1 as f64);

        let off = rng.next_u64() % (size_gib * GIB / DIRTY_BYTES) * DIRTY_BYTES;
        pool.write(vol, off, chunk(&rng, DIRTY_BYTES)).await.map_err(e)?;
        let s = clock.mono_us();
        pool.snapshot_create("v", &format!("dirty{r}")).await.map_err(e)?;
        dirty_ms.push((clock.mono_us() - s) as f64 / 1e3);

        let s = clock.mono_us();
        pool.clone_volume("v", &format!("clean{r}"), &format!("c{r}")).await.map_err(e)?;
        clone_ms.push((clock.mono_us() - s) as f64 / 1e3);
    }
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    eprintln!("fardisk-bench: {size_gib} GiB: snapshot {:.0} ms, after 16 MiB of writes {:.0} ms, clone {:.0} ms (medians)",
        median(&clean_ms), median(&dirty_ms), median(&clone_ms));
    pool.export().await.map_err(e)?;
    drop(pool);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(json!({
        "setup": format!("{size_gib} GiB volume, full of incompressible data"),
        "order": order,
        "duration_s": round3(fill_s),
        "notes": note,
        "params": {"volume_gib": size_gib, "rounds": a.rounds, "latency_ms_round_trip": a.latency_ms, "dirty_mib_before_second_snapshot": DIRTY_BYTES / MIB},
        "metrics": [
            ["snapshot_ms_median", round3(median(&clean_ms))],
            ["snapshot_ms_max", round3(max(&clean_ms))],
            ["snapshot_after_16mib_writes_ms_median", round3(median(&dirty_ms))],
            ["clone_ms_median", round3(median(&clone_ms))],
            ["clone_ms_max", round3(max(&clone_ms))],
            ["objects_added_per_snapshot", round3(median(&objects_added))],
            ["bytes_added_per_snapshot", round3(median(&bytes_added))],
            ["fill_s", round3(fill_s)]
        ],
        "series": {}
    }))
}

pub async fn run(a: Args, out: &Path, note: &str) -> Result<()> {
    let mut rows = Vec::new();
    for (i, size) in a.sizes_gib.iter().enumerate() {
        rows.push(one_size(&a, *size, i as i64, note).await?);
    }
    std::fs::write(out, serde_json::to_string_pretty(&json!({ "rows": rows }))?)?;
    Ok(())
}
