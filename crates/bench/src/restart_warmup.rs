//! restart-warmup (seed 004, "the database can never go down"): the first minute after a restart.
//! A database restarted on a cold cache reads everything from far away; the seed restores its hot
//! set to get back to speed. Here `readers` read 4 KiB blocks with a skew (90 % of reads from a hot
//! set of `hot_mib`, the rest anywhere in a `volume_mib` volume) from a pool whose store is
//! `latency_ms` away, with an ARC of `arc_mib` and an L2ARC file of `l2_mib`:
//!
//! * before: the steady state after `seconds` of that workload (the reference);
//! * cold restart: export, import with an empty ARC and no L2ARC, no warm-up;
//! * warm restart: export (the hot set is saved), import with the L2ARC rebuilt from its device
//!   and the hot set read back in the background (`Pool::warm_up`).
//!
//! After each restart the workload runs for `after_seconds`, and reads per second and p99 per
//! second are recorded: the curves of the first minute.

use crate::data::xorshift64 as next;
use crate::far_store::far_file_store;
use crate::stats::round3;
use anyhow::{anyhow, Result};
use bytes::Bytes;
use fardisk_arc::{L2Arc, L2ArcConfig, MonotonicClock};
use fardisk_engine::arc_cache::ArcBlockCache;
use fardisk_engine::clock::{Clock, SystemClock};
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::{Env, Pool, PoolConfig};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const BLOCK: u64 = 4096;
const MIB: u64 = 1 << 20;
/// Reads kept per run, across readers (bounds memory on a fast machine).
const SAMPLES_MAX: usize = 20_000_000;

#[derive(Debug, Clone)]
pub struct Args {
    pub dir: PathBuf,
    pub volume_mib: u64,
    pub hot_mib: u64,
    pub arc_mib: u64,
    pub l2_mib: u64,
    pub readers: usize,
    pub seconds: u64,
    pub after_seconds: u64,
    pub latency_ms: u64,
    pub seed: u64,
}

/// Reads: (completion second since the start, latency µs).
type Samples = Vec<(u64, u64)>;

async fn workload(
    pool: &Pool,
    a: &Args,
    seconds: u64,
    seed: u64,
    clock: &Arc<dyn Clock>,
) -> Result<Samples> {
    let vol = pool.volume_id("v").ok_or_else(|| anyhow!("no volume"))?;
    let (all, hot) = (a.volume_mib * MIB / BLOCK, a.hot_mib * MIB / BLOCK);
    let t0 = clock.mono_us();
    let deadline = t0 + seconds * 1_000_000;
    let mut tasks = tokio::task::JoinSet::new();
    for r in 0..a.readers {
        let (pool, clock) = (pool.clone(), clock.clone());
        let per_reader = SAMPLES_MAX / a.readers;
        tasks.spawn(async move {
            let mut rng = (seed + r as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut out = Vec::new();
            while clock.mono_us() < deadline && out.len() < per_reader {
                let x = next(&mut rng);
                let block = if x % 10 < 9 { (x >> 8) % hot } else { (x >> 8) % all };
                let s = clock.mono_us();
                pool.read(vol, block * BLOCK, BLOCK as u32).await?;
                let e = clock.mono_us();
                out.push(((e - t0) / 1_000_000, e - s));
            }
            Ok::<_, fardisk_engine::Error>(out)
        });
    }
    let mut out = Vec::new();
    while let Some(r) = tasks.join_next().await {
        out.extend(r.map_err(|e| anyhow!("{e}"))?.map_err(|e| anyhow!("read: {e}"))?);
    }
    Ok(out)
}

/// Per second: (reads, p99 ms).
fn per_second(samples: &Samples, seconds: u64) -> Vec<(f64, f64)> {
    let mut by: BTreeMap<u64, Vec<u64>> = (0..seconds).map(|s| (s, Vec::new())).collect();
    for &(s, lat) in samples {
        by.entry(s.min(seconds - 1)).or_default().push(lat);
    }
    by.into_values()
        .map(|mut v| {
            v.sort_unstable();
            let p99 =
                v.get(((v.len().max(1) - 1) as f64 * 0.99).round() as usize).copied().unwrap_or(0);
            (v.len() as f64, round3(p99 as f64 / 1000.0))
        })
        .collect()
}

/// Seconds until a second reaches `share` of `reference` reads per second (None: never did).
fn seconds_to_reach(curve: &[(f64, f64)], reference: f64, share: f64) -> Option<f64> {
    curve.iter().position(|(r, _)| *r >= reference * share).map(|i| i as f64 + 1.0)
}

fn l2_config() -> L2ArcConfig {
    // Fed faster than the default so the setup takes seconds (as cache-reads does).
    L2ArcConfig { write_max_bytes_per_s: 512 << 20, ..L2ArcConfig::default() }
}

fn curve_row(
    setup: &str,
    order: i64,
    curve: &[(f64, f64)],
    reference: f64,
    a: &Args,
    note: &str,
    extra: Vec<(&str, f64)>,
) -> Value {
    let n = curve.len() as f64;
    let total: f64 = curve.iter().map(|c| c.0).sum();
    let first10: f64 =
        curve.iter().take(10).map(|c| c.0).sum::<f64>() / curve.len().clamp(1, 10) as f64;
    let mut metrics = vec![
        ("reads_per_s_first_10s", round3(first10)),
        ("reads_per_s_whole", round3(total / n.max(1.0))),
        ("pct_of_before_first_10s", round3(100.0 * first10 / reference.max(1e-9))),
        ("s_to_90pct_of_before", seconds_to_reach(curve, reference, 0.9).unwrap_or(-1.0)),
    ];
    metrics.extend(extra);
    let secs: Vec<f64> = (1..=curve.len()).map(|s| s as f64).collect();
    json!({
        "setup": setup, "order": order, "duration_s": a.after_seconds, "notes": note,
        "params": params(a),
        "metrics": metrics.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
        "series": {
            "reads_per_s_after_restart": {"x": secs, "y": curve.iter().map(|c| c.0).collect::<Vec<_>>(), "x_label": "seconds after import", "y_label": "reads per second"},
            "p99_ms_after_restart": {"x": secs, "y": curve.iter().map(|c| c.1).collect::<Vec<_>>(), "x_label": "seconds after import", "y_label": "p99 read latency (ms)"},
        },
    })
}

fn params(a: &Args) -> Value {
    json!({"volume_mib": a.volume_mib, "hot_mib": a.hot_mib, "hot_share_pct": 90, "arc_mib": a.arc_mib, "l2arc_mib": a.l2_mib,
        "readers": a.readers, "store_latency_ms": a.latency_ms, "seconds_after_restart": a.after_seconds, "seed": a.seed})
}

async fn open_l2(path: &Path, guid: u128, seed: u64) -> Result<L2Arc> {
    let (l2, failures) = L2Arc::open(
        l2_config(),
        guid,
        Arc::new(MonotonicClock::new()),
        seed,
        &[path.to_path_buf()],
    )
    .map_err(|e| anyhow!("{e}"))?;
    if let Some((p, e)) = failures.first() {
        return Err(anyhow!("cache device {} did not reopen: {e}", p.display()));
    }
    Ok(l2)
}

pub async fn run(a: Args, out: &Path, note: &str) -> Result<()> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
    let _ = std::fs::remove_dir_all(&a.dir);
    std::fs::create_dir_all(&a.dir)?;
    let env = Env { clock: clock.clone(), seed: a.seed, blocking_inline: false };
    let (_, store) = far_file_store(&a.dir.join("store"), a.latency_ms, clock.clone(), a.seed)?;
    let guid = fardisk_engine::rng::Rng::new(a.seed).next_u128();
    Pool::create(
        store.clone(),
        "bench",
        CreateOptions { pool_guid: Some(guid), ..Default::default() },
        &env,
    )
    .await
    .map_err(|e| anyhow!("{e}"))?;
    let l2_path = a.dir.join("cache0");
    let opts = || ImportOptions { config: PoolConfig::default(), ..Default::default() };

    // Before: write the volume (incompressible), run the workload to a steady state.
    let l2 = L2Arc::new(l2_config(), guid, Arc::new(MonotonicClock::new()), a.seed)
        .map_err(|e| anyhow!("{e}"))?;
    l2.add_device(&l2_path, Some(a.l2_mib * MIB)).map_err(|e| anyhow!("{e}"))?;
    let cache =
        Arc::new(ArcBlockCache::with_l2_config(a.arc_mib * MIB, Some(l2), l2_config(), a.seed));
    let pool = Pool::import(store.clone(), "bench", opts(), env.clone(), cache.clone())
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let vol = pool.volume_create("v", a.volume_mib * MIB).map_err(|e| anyhow!("{e}"))?;
    let mut rng = a.seed | 1;
    for i in 0..a.volume_mib {
        let chunk: Vec<u8> = (0..MIB / 8).flat_map(|_| next(&mut rng).to_le_bytes()).collect();
        pool.write(vol, i * MIB, Bytes::from(chunk)).await.map_err(|e| anyhow!("{e}"))?;
    }
    pool.sync_txg().await.map_err(|e| anyhow!("{e}"))?;
    let _ = workload(&pool, &a, a.seconds, a.seed + 1, &clock).await?;
    let before = per_second(&workload(&pool, &a, a.seconds, a.seed + 2, &clock).await?, a.seconds);
    let reference = before.iter().map(|c| c.0).sum::<f64>() / before.len().max(1) as f64;
    eprintln!("fardisk-bench: before restart: {reference:.0} reads/s");
    pool.save_hot_set(a.arc_mib * MIB).await.map_err(|e| anyhow!("{e}"))?;
    pool.export().await.map_err(|e| anyhow!("{e}"))?;
    cache.shutdown();
    drop((pool, cache));

    // Cold restart: empty ARC, no L2ARC, no warm-up.
    let cache = Arc::new(ArcBlockCache::with_l2_config(a.arc_mib * MIB, None, l2_config(), a.seed));
    let pool = Pool::import(store.clone(), "bench", opts(), env.clone(), cache.clone())
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let gets_0 = pool.store_stats().snapshot().get.requests;
    let cold = per_second(
        &workload(&pool, &a, a.after_seconds, a.seed + 3, &clock).await?,
        a.after_seconds,
    );
    let cold_gets = pool.store_stats().snapshot().get.requests - gets_0;
    eprintln!(
        "fardisk-bench: cold restart: first 10 s {:.0} reads/s, {cold_gets} GETs",
        cold.iter().take(10).map(|c| c.0).sum::<f64>() / 10.0
    );
    pool.export().await.map_err(|e| anyhow!("{e}"))?;
    drop((pool, cache));

    // Warm restart: the L2ARC rebuilt from its device, the hot set read back in the background.
    let l2 = open_l2(&l2_path, guid, a.seed).await?;
    let cache =
        Arc::new(ArcBlockCache::with_l2_config(a.arc_mib * MIB, Some(l2), l2_config(), a.seed));
    let pool = Pool::import(store, "bench", opts(), env, cache.clone())
        .await
        .map_err(|e| anyhow!("{e}"))?;
    pool.warm_up();
    let gets_0 = pool.store_stats().snapshot().get.requests;
    let warm = per_second(
        &workload(&pool, &a, a.after_seconds, a.seed + 3, &clock).await?,
        a.after_seconds,
    );
    let warm_gets = pool.store_stats().snapshot().get.requests - gets_0;
    eprintln!(
        "fardisk-bench: warm restart: first 10 s {:.0} reads/s, {warm_gets} GETs",
        warm.iter().take(10).map(|c| c.0).sum::<f64>() / 10.0
    );
    pool.export().await.map_err(|e| anyhow!("{e}"))?;
    cache.shutdown();
    drop((pool, cache));
    let _ = std::fs::remove_dir_all(&a.dir);

    let secs: Vec<f64> = (1..=before.len()).map(|s| s as f64).collect();
    let rows = vec![
        json!({"setup": "before the restart (steady state, the reference)", "order": 0, "duration_s": a.seconds, "notes": note, "params": params(&a),
            "metrics": [["reads_per_s_whole", round3(reference)]],
            "series": {"reads_per_s_after_restart": {"x": secs, "y": before.iter().map(|c| c.0).collect::<Vec<_>>(), "x_label": "seconds after import", "y_label": "reads per second"}}}),
        curve_row(
            "cold restart: empty ARC, no L2ARC, no warm-up",
            1,
            &cold,
            reference,
            &a,
            note,
            vec![("store_gets", cold_gets as f64)],
        ),
        curve_row(
            "warm restart: L2ARC rebuilt + hot set warm-up",
            2,
            &warm,
            reference,
            &a,
            note,
            vec![("store_gets", warm_gets as f64)],
        ),
    ];
    std::fs::write(out, serde_json::to_string_pretty(&json!({ "rows": rows }))?)?;
    Ok(())
}
