//! log-replay: how long a restart takes when the intent log holds much (#20's restarts after a
//! store outage). While the store is away, sync writes are acknowledged from the log and nothing
//! is published, so the log grows until the store returns; an engine killed then must replay all
//! of it before it serves again. Here a writer makes `records` 4 KiB writes at random places in
//! a 64 MiB hot region, each followed by a sync request, with no txg published meanwhile (as in
//! an outage); the pool is then dropped without an export (a crash) and imported again, timed.
//!
//! Configurations, in one run: reading the log's bytes from one leg sequentially with O_DIRECT
//! 1 MiB reads (the floor for any replay: the bytes must come off the device), and the import
//! (open and scan of the mirrored log, replay, the sync of the replayed data to a store
//! `latency_ms` away). The log's legs are files on the local disk; O_DIRECT writes leave nothing
//! of them in the page cache, as after a real crash. The import row also gives how far the
//! process's resident memory rose during the import, at its peak.

use crate::stats::round3;
use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::clock::{Clock, SystemClock};
use fardisk_engine::objstore::{open_store_url, SimulateSpec, SimulatedStore, Store};
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::rng::Rng;
use fardisk_engine::root::{VdevEntry, VdevRole};
use fardisk_engine::{Env, Pool, PoolConfig};
use serde_json::json;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const WRITE_BYTES: u64 = 4096;
/// The writes land in this much of the volume (a database's hot pages and WAL).
const HOT_BYTES: u64 = 64 << 20;
const VOLUME_BYTES: u64 = 1 << 30;
const READ_CHUNK_BYTES: usize = 1 << 20;

#[derive(Debug, Clone)]
pub struct Args {
    /// Scratch directory on the local disk (store, log legs).
    pub dir: PathBuf,
    /// Log sizes to measure, in records (each a 4 KiB write and its sync request).
    pub records: Vec<u64>,
    pub latency_ms: u64,
    pub seed: u64,
}

struct Measured {
    records: u64,
    log_bytes: u64,
    write_s: f64,
    import_s: f64,
    raw_read_s: f64,
    /// How far the process's resident memory rose above where it was before the import, at
    /// its peak during it (VmHWM after resetting it through /proc/self/clear_refs).
    import_rss_peak_bytes: u64,
}

/// A field of /proc/self/status in bytes (the kernel gives kB).
fn proc_status_bytes(field: &str) -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .ok_or_else(|| anyhow!("no {field} in /proc/self/status"))?;
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("cannot parse {line:?}"))?;
    Ok(kb << 10)
}

fn log_config() -> PoolConfig {
    // No txg is published while the log grows: the store is "away".
    PoolConfig { txg_timeout: None, ..PoolConfig::default() }
}

async fn one_size(args: &Args, records: u64, clock: &Arc<dyn Clock>) -> Result<Measured> {
    let dir = args.dir.join(format!("replay-{records}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let legs = vec![dir.join("log-a"), dir.join("log-b")];
    let env = Env { clock: clock.clone(), seed: args.seed, blocking_inline: false };
    let base = open_store_url(&format!("file://{}", dir.join("store").display()), true)
        .map_err(|e| anyhow!("{e}"))?;
    let spec =
        SimulateSpec::parse(&format!("latency={}", args.latency_ms)).map_err(|e| anyhow!("{e}"))?;
    let store: Arc<dyn Store> = Arc::new(SimulatedStore::new(base, spec, clock.clone(), args.seed));
    let guid = Rng::new(args.seed).next_u128();
    let mut fo = fardisk_slog::FormatOptions::new(
        Arc::new(fardisk_slog::FileProvider::default()),
        args.seed,
    );
    // Room for every record (a 4 KiB write takes an 8 KiB block) and the ring's slack.
    fo.size_bytes = records * 2 * WRITE_BYTES * 5 / 4 + (64 << 20);
    let cfg = fardisk_slog::IntentLog::format(
        "bench",
        guid,
        &fardisk_slog::VdevSpec::Mirror(legs.clone()),
        &fo,
    )
    .map_err(|e| anyhow!("formatting the log: {e}"))?;
    let vdev = VdevEntry {
        role: VdevRole::Log,
        mirror: true,
        guid: cfg.vdev_guid,
        paths: legs.iter().map(|p| p.display().to_string()).collect(),
    };
    let create = CreateOptions { vdevs: vec![vdev], pool_guid: Some(guid), ..Default::default() };
    Pool::create(store.clone(), "bench", create, &env).await.map_err(|e| anyhow!("create: {e}"))?;
    let import = || {
        let opts = ImportOptions { force: true, config: log_config(), ..Default::default() };
        Pool::import(store.clone(), "bench", opts, env.clone(), Arc::new(NoCache))
    };
    let pool = import().await.map_err(|e| anyhow!("import: {e}"))?;
    let vol = pool.volume_create("v", VOLUME_BYTES).map_err(|e| anyhow!("{e}"))?;
    for i in 0..HOT_BYTES >> 20 {
        let chunk = Bytes::from(vec![(i % 200) as u8 + 1; 1 << 20]);
        pool.write(vol, i << 20, chunk).await.map_err(|e| anyhow!("fill: {e}"))?;
    }
    pool.sync_txg().await.map_err(|e| anyhow!("sync: {e}"))?;
    let rng = Rng::new(args.seed);
    let t0 = clock.mono_us();
    for i in 0..records {
        let at = rng.below(HOT_BYTES / WRITE_BYTES) * WRITE_BYTES;
        let data = Bytes::from(vec![(i % 251) as u8 + 1; WRITE_BYTES as usize]);
        pool.write(vol, at, data).await.map_err(|e| anyhow!("write: {e}"))?;
        pool.sync_request().await.map_err(|e| anyhow!("sync request: {e}"))?;
    }
    let write_s = (clock.mono_us() - t0) as f64 / 1e6;
    let log_bytes = pool.log().map(|l| l.space_used_bytes()).unwrap_or(0);
    drop(pool); // The crash: nothing more reaches the store or the log.
    let raw_read_s = tokio::task::block_in_place(|| read_sequentially(&legs[0], log_bytes, clock))?;
    // "5" resets the peak resident size to the current one (proc(5), clear_refs).
    std::fs::write("/proc/self/clear_refs", "5").context("resetting VmHWM")?;
    let rss_before = proc_status_bytes("VmRSS:")?;
    let t0 = clock.mono_us();
    let again = import().await.map_err(|e| anyhow!("import after the crash: {e}"))?;
    let import_s = (clock.mono_us() - t0) as f64 / 1e6;
    let import_rss_peak_bytes = proc_status_bytes("VmHWM:")?.saturating_sub(rss_before);
    let replayed = again.published_txg();
    again.export().await.map_err(|e| anyhow!("export: {e}"))?;
    drop(again);
    eprintln!(
        "fardisk-bench: log-replay {records} records ({} MiB of log): import {import_s:.2} s, resident memory +{} MiB at its peak, raw read {raw_read_s:.2} s (published txg {replayed})",
        log_bytes >> 20,
        import_rss_peak_bytes >> 20
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Measured { records, log_bytes, write_s, import_s, raw_read_s, import_rss_peak_bytes })
}

/// Reads `len` bytes of `path` from its start with O_DIRECT in 1 MiB reads; seconds taken.
fn read_sequentially(path: &Path, len: u64, clock: &Arc<dyn Clock>) -> Result<f64> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .with_context(|| format!("opening {} with O_DIRECT", path.display()))?;
    let mut buf = fardisk_slog::AlignedBuf::zeroed(READ_CHUNK_BYTES);
    let t0 = clock.mono_us();
    let mut at = 0;
    while at < len {
        f.read_exact_at(&mut buf, at)?;
        at += READ_CHUNK_BYTES as u64;
    }
    Ok((clock.mono_us() - t0) as f64 / 1e6)
}

pub async fn run(args: Args, out: &Path, note: &str) -> Result<()> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
    std::fs::create_dir_all(&args.dir)?;
    let mut measured = Vec::new();
    for &records in &args.records {
        measured.push(one_size(&args, records, &clock).await?);
    }
    let params = json!({"write_kib": WRITE_BYTES >> 10, "hot_mib": HOT_BYTES >> 20,
        "store_latency_ms": args.latency_ms, "log": "mirror of two files on the local disk",
        "seed": args.seed});
    let setups = [
        ("raw O_DIRECT sequential read of the log's bytes (1 MiB reads, the floor)", 0),
        ("fardisk import: log scan, replay and sync of the replayed data", 1),
    ];
    let mut rows = Vec::new();
    for (setup, order) in setups {
        let mut metrics = Vec::new();
        let mut total_s = 0.0;
        for m in &measured {
            let (secs, what) =
                if order == 0 { (m.raw_read_s, "read") } else { (m.import_s, "import") };
            total_s += secs;
            let mib = m.log_bytes as f64 / (1 << 20) as f64;
            metrics.push(json!([format!("{what}_s_{}", m.records), round3(secs)]));
            metrics.push(json!([format!("log_mib_{}", m.records), round3(mib)]));
            metrics.push(json!([format!("mib_per_s_{}", m.records), round3(mib / secs.max(1e-6))]));
            if order == 1 {
                metrics.push(json!([format!("write_s_{}", m.records), round3(m.write_s)]));
                let peak_mib = m.import_rss_peak_bytes as f64 / (1 << 20) as f64;
                metrics.push(json!([format!("rss_peak_mib_{}", m.records), round3(peak_mib)]));
            }
        }
        rows.push(json!({
            "setup": setup, "order": order, "durable": true, "duration_s": round3(total_s),
            "metrics": metrics, "params": params, "series": {}, "notes": note,
        }));
    }
    std::fs::write(out, serde_json::to_string_pretty(&json!({ "rows": rows }))?)
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}
