//! log-bursts (seed 003, "ZIL on a RAM disk"): what happens when a burst of sync writes is larger
//! than the log. The seed wrote files of 60 %, 95 % and 270 % of its ZIL's size and saw the gain
//! shrink as the burst approached the log's size. Here a writer streams `write_kib` writes, each
//! followed by a sync request (a database's WAL pattern), for bursts of 60, 95 and 270 % of a
//! `log_mib` log; the store is `latency_ms` away with `bandwidth_mib_s` of bandwidth, so once the
//! log is full a commit waits for the store to take a txg.
//!
//! Configurations, in one run: the same writes with O_DIRECT + fdatasync on a local file (the
//! limit), fardisk with its log on tmpfs (RAM: the seed's RAM disk, volatile), and fardisk with its
//! log on a file on the local disk.

use crate::stats::round3;
use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use fardisk_engine::clock::{Clock, SystemClock};
use fardisk_engine::Pool;
use serde_json::{json, Value};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Burst sizes, in percent of the log's size (the seed's 100m, 180m and 500m files on a 190 MB ZIL
/// were about 60, 95 and 270 %).
pub const BURST_PERCENTS: [u64; 3] = [60, 95, 270];

#[derive(Debug, Clone)]
pub struct Args {
    /// Scratch directory on the local disk (raw file, disk log, store).
    pub dir: PathBuf,
    /// Directory on tmpfs for the RAM log.
    pub ram_dir: PathBuf,
    pub log_mib: u64,
    pub latency_ms: u64,
    pub bandwidth_mib_s: u64,
    pub write_kib: u64,
    pub seed: u64,
}

/// One burst: per-write latency (µs) with its completion time (ms since the start).
#[derive(Debug, Default)]
struct Burst {
    ops: Vec<(u64, u64)>,
    elapsed_us: u64,
    log_full_events: u64,
    txg_fallbacks: u64,
}

impl Burst {
    fn p99_ms(&self) -> f64 {
        let mut v: Vec<u64> = self.ops.iter().map(|o| o.0).collect();
        v.sort_unstable();
        if v.is_empty() {
            return 0.0;
        }
        v[((v.len() - 1) as f64 * 0.99).round() as usize] as f64 / 1000.0
    }
}

fn raw_burst(path: &Path, bytes: u64, write_bytes: u64, clock: &Arc<dyn Clock>) -> Result<Burst> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .with_context(|| format!("opening {} with O_DIRECT", path.display()))?;
    let buf = fardisk_slog::AlignedBuf::copy_from(&vec![0x5au8; write_bytes as usize]);
    let t0 = clock.mono_us();
    let mut b = Burst::default();
    let mut at = 0;
    while at < bytes {
        let start = clock.mono_us();
        f.write_all_at(&buf, at)?;
        f.sync_data()?;
        let end = clock.mono_us();
        b.ops.push((end - start, (end - t0) / 1000));
        at += write_bytes;
    }
    b.elapsed_us = clock.mono_us() - t0;
    drop(f);
    let _ = std::fs::remove_file(path);
    Ok(b)
}

async fn pool_burst(
    pool: &Pool,
    bytes: u64,
    write_bytes: u64,
    clock: &Arc<dyn Clock>,
) -> Result<Burst> {
    let vol = pool.volume_id("v").ok_or_else(|| anyhow!("no volume"))?;
    let data = Bytes::from(vec![0x5au8; write_bytes as usize]);
    let t0 = clock.mono_us();
    let mut b = Burst::default();
    let mut at = 0;
    while at < bytes {
        let start = clock.mono_us();
        pool.write(vol, at, data.clone()).await.map_err(|e| anyhow!("write: {e}"))?;
        pool.sync_request().await.map_err(|e| anyhow!("sync: {e}"))?;
        let end = clock.mono_us();
        b.ops.push((end - start, (end - t0) / 1000));
        at += write_bytes;
    }
    b.elapsed_us = clock.mono_us() - t0;
    if let Some(log) = pool.log() {
        b.log_full_events = log.stats().log_full_events;
    }
    b.txg_fallbacks = pool.status().log["txg_fallbacks"].as_u64().unwrap_or(0);
    Ok(b)
}

/// Cumulative MiB written over time (one point per write), thinned to at most 400 points.
fn written_over_time(b: &Burst, write_bytes: u64) -> Value {
    let step = (b.ops.len() / 400).max(1);
    let (x, y): (Vec<f64>, Vec<f64>) = b
        .ops
        .iter()
        .enumerate()
        .filter(|(i, _)| i % step == 0 || *i + 1 == b.ops.len())
        .map(|(i, o)| {
            (o.1 as f64 / 1000.0, round3(((i as u64 + 1) * write_bytes) as f64 / (1 << 20) as f64))
        })
        .unzip();
    json!({"x": x, "y": y, "x_label": "seconds (270 % burst)", "y_label": "MiB written and synced"})
}

pub async fn run(args: Args, out: &Path, note: &str) -> Result<()> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
    let log_bytes = args.log_mib << 20;
    let write_bytes = args.write_kib << 10;
    std::fs::create_dir_all(&args.dir)?;
    std::fs::create_dir_all(&args.ram_dir)?;
    let simulate = format!("latency={},bandwidth={}", args.latency_ms, args.bandwidth_mib_s << 20);
    let setups: [(&str, Option<PathBuf>, bool); 3] = [
        ("raw O_DIRECT write + fdatasync (local file, the limit)", None, true),
        ("fardisk, log on tmpfs (RAM, volatile)", Some(args.ram_dir.join("log-ram")), false),
        ("fardisk, log on a local file", Some(args.dir.join("log-disk")), true),
    ];
    let mut rows = Vec::new();
    for (order, (setup, log_path, durable)) in setups.iter().enumerate() {
        let mut metrics: Vec<(String, f64)> = Vec::new();
        let mut series = json!({});
        let mut total_s = 0.0;
        for pct in BURST_PERCENTS {
            let bytes = (log_bytes * pct / 100).div_ceil(write_bytes) * write_bytes;
            let b = match log_path {
                None => tokio::task::block_in_place(|| {
                    raw_burst(&args.dir.join("raw.dat"), bytes, write_bytes, &clock)
                })?,
                Some(log) => {
                    let dir = args.dir.join(format!("pool-{order}"));
                    let pool = crate::sync_writes::bench_pool(
                        &dir,
                        Some((std::slice::from_ref(log), log_bytes)),
                        &simulate,
                        bytes,
                        args.seed,
                        clock.clone(),
                    )
                    .await?;
                    let b = pool_burst(&pool, bytes, write_bytes, &clock).await?;
                    pool.export().await.map_err(|e| anyhow!("export: {e}"))?;
                    drop(pool);
                    let _ = std::fs::remove_dir_all(&dir);
                    let _ = std::fs::remove_file(log);
                    b
                }
            };
            let secs = b.elapsed_us as f64 / 1e6;
            total_s += secs;
            eprintln!("fardisk-bench: {setup}, {pct} % burst ({} MiB): {:.2} s, {:.1} MiB/s, p99 {:.2} ms, log full {}x", bytes >> 20, secs, (bytes >> 20) as f64 / secs, b.p99_ms(), b.log_full_events);
            metrics.push((format!("s_{pct}pct"), round3(secs)));
            metrics.push((
                format!("mib_per_s_{pct}pct"),
                round3((bytes as f64 / (1 << 20) as f64) / secs),
            ));
            metrics.push((format!("p99_ms_{pct}pct"), round3(b.p99_ms())));
            if log_path.is_some() {
                metrics.push((format!("log_full_{pct}pct"), b.log_full_events as f64));
            }
            if pct == 270 {
                series["written_mib_over_time_270pct"] = written_over_time(&b, write_bytes);
            }
        }
        rows.push(json!({
            "setup": setup, "order": order, "durable": durable, "duration_s": round3(total_s),
            "metrics": metrics.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
            "params": {"log_mib": args.log_mib, "write_kib": args.write_kib, "store_latency_ms": args.latency_ms,
                       "store_bandwidth_mib_s": args.bandwidth_mib_s, "bursts_pct_of_log": "60/95/270", "seed": args.seed},
            "series": series,
            "notes": note,
        }));
    }
    std::fs::write(out, serde_json::to_string_pretty(&json!({ "rows": rows }))?)
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}
