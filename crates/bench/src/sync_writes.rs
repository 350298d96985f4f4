//! sync-writes: what a 4 KiB sync write (write + fsync/FLUSH) costs through the pool, against the
//! physical limit (rule 7 of docs/design/0000-rules.md: a sync write cannot beat the log device's own fdatasync).
//!
//! Three configurations, each at 1, 8 and 64 concurrent writers, in one run:
//! * raw: 4 KiB O_DIRECT pwrite + fdatasync on a preallocated file in the same directory the log
//!   uses (the log does exactly this per commit);
//! * fardisk with a log device on a local file, store 40 ms away (`SimulatedStore`);
//! * fardisk without a log, same store: every sync request waits for a txg to be published.
//!
//! A writer loops { write 4 KiB at a random aligned offset; sync } for a fixed time and records
//! each loop's latency. The 1-writer run gives the latency distribution and its evolution over
//! time (seed 002); the others give sync writes per second (group commit at work).

use crate::stats::round3;
use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::clock::{Clock, SystemClock};
use fardisk_engine::objstore::{open_store_url, SimulateSpec, SimulatedStore, Store};
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::root::VdevEntry;
use fardisk_engine::{Env, Pool, PoolConfig};
use serde_json::{json, Value};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const BLOCK_BYTES: u64 = 4096;
/// Span of the random offsets (and the raw file's size).
const SPAN_BYTES: u64 = 256 << 20;
/// Latencies kept per run (a 64-writer raw run cannot exceed this in the seconds given).
const SAMPLES_MAX: usize = 2_000_000;

#[derive(Debug, Clone)]
pub struct Args {
    pub dir: PathBuf,
    pub seconds: u64,
    pub latency_ms: u64,
    pub writer_counts: Vec<usize>,
    pub seed: u64,
    /// Set on every pool when given (`log_leg_timeout_ms`).
    pub log_leg_timeout_ms: Option<u64>,
}

/// One timed run: latencies in µs with their completion time in ms since the start.
#[derive(Debug, Default)]
struct Run {
    latencies_us: Vec<(u64, u64)>,
    elapsed_us: u64,
}

impl Run {
    fn ops_per_s(&self) -> f64 {
        self.latencies_us.len() as f64 / (self.elapsed_us.max(1) as f64 / 1e6)
    }
    fn sorted(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.latencies_us.iter().map(|l| l.0).collect();
        v.sort_unstable();
        v
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p / 100.0).round() as usize;
    sorted[i.min(sorted.len() - 1)] as f64
}

fn offset(rng: &mut u64) -> u64 {
    *rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (*rng >> 33) % (SPAN_BYTES / BLOCK_BYTES) * BLOCK_BYTES
}

/// Raw: each writer is a thread doing O_DIRECT pwrite + fdatasync on one shared file.
fn raw_run(
    path: &Path,
    writers: usize,
    seconds: u64,
    seed: u64,
    clock: &Arc<dyn Clock>,
) -> Result<Run> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .or_else(|_| std::fs::OpenOptions::new().read(true).write(true).open(path))
        .with_context(|| format!("opening {}", path.display()))?;
    let file = Arc::new(file);
    let t0 = clock.mono_us();
    let deadline = t0 + seconds * 1_000_000;
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let (file, clock) = (file.clone(), clock.clone());
            std::thread::spawn(move || -> std::io::Result<Vec<(u64, u64)>> {
                let buf = fardisk_slog::AlignedBuf::copy_from(&[0x5au8; BLOCK_BYTES as usize]);
                let mut rng = seed ^ (w as u64 + 1).wrapping_mul(0x9e37_79b9);
                let mut out = Vec::new();
                while clock.mono_us() < deadline && out.len() < SAMPLES_MAX / writers {
                    let start = clock.mono_us();
                    file.write_all_at(&buf, offset(&mut rng))?;
                    file.sync_data()?;
                    let end = clock.mono_us();
                    out.push((end - start, (end - t0) / 1000));
                }
                Ok(out)
            })
        })
        .collect();
    let mut run = Run::default();
    for h in handles {
        run.latencies_us.extend(h.join().map_err(|_| anyhow!("raw writer panicked"))??);
    }
    run.elapsed_us = clock.mono_us() - t0;
    Ok(run)
}

/// A fresh pool in `dir` (store 'far away'), with `log_legs` log devices (0: none; 2: a mirror).
async fn pool(
    dir: &Path,
    log_legs: usize,
    latency_ms: u64,
    seed: u64,
    clock: Arc<dyn Clock>,
) -> Result<Pool> {
    let legs: Vec<PathBuf> = (0..log_legs).map(|i| dir.join(format!("log{i}"))).collect();
    bench_pool(
        dir,
        (log_legs > 0).then_some((legs.as_slice(), 1 << 30)),
        &format!("latency={latency_ms}"),
        SPAN_BYTES,
        seed,
        clock,
    )
    .await
}

/// A fresh pool whose store is a directory in `dir` made far away by `simulate` (a `--simulate`
/// spec), with a log of `log.1` bytes per leg at the paths `log.0` when given (more than one: a
/// mirror), no cache, and one volume "v" of `volume_bytes`.
pub(crate) async fn bench_pool(
    dir: &Path,
    log: Option<(&[PathBuf], u64)>,
    simulate: &str,
    volume_bytes: u64,
    seed: u64,
    clock: Arc<dyn Clock>,
) -> Result<Pool> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let env = Env { clock: clock.clone(), seed, blocking_inline: false };
    let base = open_store_url(&format!("file://{}", dir.join("store").display()), true)
        .map_err(|e| anyhow!("{e}"))?;
    let spec = SimulateSpec::parse(simulate).map_err(|e| anyhow!("{e}"))?;
    let store: Arc<dyn Store> = Arc::new(SimulatedStore::new(base, spec, clock, seed));
    let guid = fardisk_engine::rng::Rng::new(seed).next_u128();
    let mut vdevs = Vec::new();
    if let Some((legs, size_bytes)) = log {
        for leg in legs {
            let _ = std::fs::remove_file(leg);
        }
        let mut fo =
            fardisk_slog::FormatOptions::new(Arc::new(fardisk_slog::FileProvider::default()), seed);
        fo.size_bytes = size_bytes;
        let spec = match legs {
            [one] => fardisk_slog::VdevSpec::Single(one.clone()),
            _ => fardisk_slog::VdevSpec::Mirror(legs.to_vec()),
        };
        let cfg = fardisk_slog::IntentLog::format("bench", guid, &spec, &fo)
            .map_err(|e| anyhow!("{e}"))?;
        vdevs.push(VdevEntry {
            role: fardisk_engine::root::VdevRole::Log,
            mirror: legs.len() > 1,
            guid: cfg.vdev_guid,
            paths: legs.iter().map(|l| l.display().to_string()).collect(),
        });
    }
    Pool::create(
        store.clone(),
        "bench",
        CreateOptions { vdevs, pool_guid: Some(guid), ..Default::default() },
        &env,
    )
    .await
    .map_err(|e| anyhow!("create: {e}"))?;
    let opts = ImportOptions { config: PoolConfig::default(), ..Default::default() };
    let pool = Pool::import(store, "bench", opts, env, Arc::new(NoCache))
        .await
        .map_err(|e| anyhow!("import: {e}"))?;
    pool.volume_create("v", volume_bytes.max(1 << 20)).map_err(|e| anyhow!("{e}"))?;
    pool.sync_txg().await.map_err(|e| anyhow!("{e}"))?;
    Ok(pool)
}

async fn engine_run(
    pool: &Pool,
    writers: usize,
    seconds: u64,
    seed: u64,
    clock: &Arc<dyn Clock>,
) -> Result<Run> {
    let vol = pool.volume_id("v").ok_or_else(|| anyhow!("no volume"))?;
    let t0 = clock.mono_us();
    let deadline = t0 + seconds * 1_000_000;
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..writers {
        let (pool, clock) = (pool.clone(), clock.clone());
        tasks.spawn(async move {
            let data = Bytes::from(vec![(w as u8).wrapping_add(1); BLOCK_BYTES as usize]);
            let mut rng = seed ^ (w as u64 + 1).wrapping_mul(0x9e37_79b9);
            let mut out = Vec::new();
            while clock.mono_us() < deadline && out.len() < SAMPLES_MAX / writers {
                let start = clock.mono_us();
                pool.write(vol, offset(&mut rng), data.clone()).await?;
                pool.sync_request().await?;
                let end = clock.mono_us();
                out.push((end - start, (end - t0) / 1000));
            }
            Ok::<_, fardisk_engine::Error>(out)
        });
    }
    let mut run = Run::default();
    while let Some(r) = tasks.join_next().await {
        run.latencies_us.extend(
            r.map_err(|e| anyhow!("writer task: {e}"))?.map_err(|e| anyhow!("sync write: {e}"))?,
        );
    }
    run.elapsed_us = clock.mono_us() - t0;
    Ok(run)
}

/// Per-second p99 (ms) of a run: the latency over time.
fn p99_over_time(run: &Run) -> (Vec<f64>, Vec<f64>) {
    let mut by_s: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
    for &(lat, at_ms) in &run.latencies_us {
        by_s.entry(at_ms / 1000).or_default().push(lat);
    }
    by_s.into_iter()
        .map(|(s, mut v)| {
            v.sort_unstable();
            (s as f64 + 1.0, round3(percentile(&v, 99.0) / 1000.0))
        })
        .unzip()
}

/// Latency distribution: (latency ms, percentile) at a few hundred points.
fn cdf(sorted: &[u64]) -> (Vec<f64>, Vec<f64>) {
    let points = 200.min(sorted.len());
    (0..points)
        .map(|i| {
            let p = 100.0 * (i as f64 + 1.0) / points as f64;
            (round3(percentile(sorted, p) / 1000.0), round3(p))
        })
        .unzip()
}

fn series(xy: (Vec<f64>, Vec<f64>), x_label: &str, y_label: &str) -> Value {
    json!({"x": xy.0, "y": xy.1, "x_label": x_label, "y_label": y_label})
}

struct Config {
    setup: &'static str,
    durable: bool,
    runs: Vec<(usize, Run)>,
    group_commit: Option<f64>,
    /// Bytes the log wrote per device write in the 1-writer run: what one 4 KiB sync write
    /// costs on the log device (the log block layout, docs/format/slog.md).
    log_bytes_per_write: Option<f64>,
}

fn row(c: &Config, order: i64, raw_p99_us: f64, args: &Args, notes: &str) -> Value {
    let one = &c.runs.iter().find(|(w, _)| *w == 1).expect("a 1-writer run").1;
    let sorted = one.sorted();
    let p99 = percentile(&sorted, 99.0);
    let mut metrics: Vec<(String, f64)> = vec![
        ("p50_us".into(), round3(percentile(&sorted, 50.0))),
        ("p99_us".into(), round3(p99)),
        ("p999_us".into(), round3(percentile(&sorted, 99.9))),
        ("p99_to_raw_x".into(), round3(p99 / raw_p99_us.max(1.0))),
    ];
    let mut by_writers = (Vec::new(), Vec::new());
    for (w, run) in &c.runs {
        metrics.push((format!("writes_per_s_{w}w"), round3(run.ops_per_s())));
        by_writers.0.push(*w as f64);
        by_writers.1.push(round3(run.ops_per_s()));
    }
    if let Some(g) = c.group_commit {
        // The log's commits per device write, in the run with the most writers.
        metrics.push(("group_commit_x".into(), round3(g)));
    }
    if let Some(b) = c.log_bytes_per_write {
        metrics.push(("log_bytes_per_sync_write_1w".into(), round3(b)));
    }
    json!({
        "setup": c.setup, "order": order, "durable": c.durable,
        "duration_s": args.seconds * c.runs.len() as u64,
        "metrics": metrics.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
        "params": {"block_kib": 4, "seconds_per_run": args.seconds, "store_latency_ms": args.latency_ms,
                   "writers": args.writer_counts.iter().map(|w| w.to_string()).collect::<Vec<_>>().join("/"), "seed": args.seed},
        "series": {
            "sync_write_p99_ms_over_time": series(p99_over_time(one), "seconds (1 writer)", "p99 latency (ms)"),
            "sync_write_latency_cdf": series(cdf(&sorted), "latency (ms, 1 writer)", "percentile"),
            "sync_writes_per_s_by_writers": series(by_writers, "concurrent writers", "sync writes per second"),
        },
        "notes": notes,
    })
}

pub async fn run(args: Args, out: &Path, note: &str) -> Result<()> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
    std::fs::create_dir_all(&args.dir)?;
    let raw_file = args.dir.join("raw.dat");
    {
        // Written in full once: no write of the timed runs allocates or converts an extent, so
        // fdatasync flushes data only (the log's ring is preallocated but not pre-written, which
        // can only make the fardisk rows slower).
        let f =
            std::fs::OpenOptions::new().create(true).write(true).truncate(true).open(&raw_file)?;
        let zeros = vec![0u8; 1 << 20];
        for i in 0..SPAN_BYTES / (1 << 20) {
            f.write_all_at(&zeros, i << 20)?;
        }
        f.sync_all()?;
    }
    let mut configs = [
        Config {
            setup: "raw O_DIRECT pwrite + fdatasync (local file, the limit)",
            durable: true,
            runs: Vec::new(),
            group_commit: None,
            log_bytes_per_write: None,
        },
        Config {
            setup: "fardisk, log on a local file",
            durable: true,
            runs: Vec::new(),
            group_commit: None,
            log_bytes_per_write: None,
        },
        Config {
            setup: "fardisk, no log (txg sync per request)",
            durable: true,
            runs: Vec::new(),
            group_commit: None,
            log_bytes_per_write: None,
        },
        Config {
            setup: "fardisk, log mirrored on two local files",
            durable: true,
            runs: Vec::new(),
            group_commit: None,
            log_bytes_per_write: None,
        },
    ];
    for &w in &args.writer_counts {
        let r =
            tokio::task::block_in_place(|| raw_run(&raw_file, w, args.seconds, args.seed, &clock))?;
        eprintln!(
            "fardisk-bench: raw {w} writers: {:.0}/s, p99 {:.0} µs",
            r.ops_per_s(),
            percentile(&r.sorted(), 99.0)
        );
        configs[0].runs.push((w, r));
        for (i, log_legs) in [(1usize, 1usize), (2, 0), (3, 2)] {
            let dir = args.dir.join(format!("log-legs-{log_legs}"));
            let pool = pool(&dir, log_legs, args.latency_ms, args.seed, clock.clone()).await?;
            if let Some(ms) = args.log_leg_timeout_ms {
                pool.set_prop("log_leg_timeout_ms", &ms.to_string()).map_err(|e| anyhow!("{e}"))?;
            }
            let r = engine_run(&pool, w, args.seconds, args.seed, &clock).await?;
            eprintln!(
                "fardisk-bench: {} {w} writers: {:.0}/s, p99 {:.0} µs",
                configs[i].setup,
                r.ops_per_s(),
                percentile(&r.sorted(), 99.0)
            );
            if let Some(log) = pool.log() {
                let stats = log.stats();
                configs[i].group_commit = Some(stats.group_commit_ratio());
                if w == 1 {
                    let per_write = stats.bytes_logged as f64 / stats.device_writes.max(1) as f64;
                    eprintln!(
                        "fardisk-bench: log bytes per device write (1 writer): {per_write:.0}"
                    );
                    configs[i].log_bytes_per_write = Some(per_write);
                }
            }
            configs[i].runs.push((w, r));
            pool.export().await.map_err(|e| anyhow!("export: {e}"))?;
            drop(pool);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    let _ = std::fs::remove_file(&raw_file);
    let raw_one = configs[0]
        .runs
        .iter()
        .find(|(w, _)| *w == 1)
        .map(|(_, r)| percentile(&r.sorted(), 99.0))
        .unwrap_or(1.0);
    let rows: Vec<Value> =
        configs.iter().enumerate().map(|(i, c)| row(c, i as i64, raw_one, &args, note)).collect();
    std::fs::write(out, serde_json::to_string_pretty(&json!({ "rows": rows }))?)
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}
