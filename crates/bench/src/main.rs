//! fardisk-bench: measurements of the engine against a real object store, for
//! `bench/scenarios/*.sh`. Each subcommand writes its result rows as JSON; the scenario script
//! turns every row into one result file through bench/lib/result.py.
//!
//!   fardisk-bench engine-store --bucket B --out rows.json [--total-mib 2048] [--rounds 3] ...
//!
//! engine-store: sustained sequential write through the pool engine vs raw PUTs of the same bytes,
//! alternating raw and engine runs; PUTs and GETs per GiB written and read (cold read back).

// Benchmarks measure real time: the system clock and real sleeps are the point here.
#![allow(clippy::disallowed_methods)]

mod cache_reads;
mod cold_reads;
mod data;
mod engine;
mod far_store;
mod l2arc_memory;
mod log_bursts;
mod log_replay;
mod progress;
mod raw;
mod restart_warmup;
mod rows;
mod snapshots;
mod stats;
mod sync_writes;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use data::{DataKind, Dataset};
use fardisk_engine::clock::{Clock, SystemClock};
use fardisk_engine::PoolConfig;
use rows::{Knobs, Runs};
use serde_json::Value;
use stats::{Sample, MIB};
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Parser, Debug)]
#[command(name = "fardisk-bench", about = "fardisk benchmarks against a real object store")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Engine sequential write and cold read vs raw PUT/GET of the same bytes (S3 env: AWS_*).
    EngineStore(EngineStoreArgs),
    /// 4 KiB sync writes: raw fdatasync vs the pool with a log vs without (store made far away).
    SyncWrites(SyncWritesArgs),
    /// Random reads: local O_DIRECT vs the pool's ARC + L2ARC; first pass after re-import; scan resistance.
    CacheReads(CacheReadsArgs),
    /// Sync-write bursts of 60/95/270 % of the log: local fdatasync vs log on tmpfs vs log on disk.
    LogBursts(LogBurstsArgs),
    /// Restart after a long log: import (scan, replay, sync) vs reading the log's bytes.
    LogReplay(LogReplayArgs),
    /// The first minute after a restart: cold cache vs persistent L2ARC + hot-set warm-up.
    RestartWarmup(RestartWarmupArgs),
    /// Time to snapshot and to clone volumes of several sizes; objects and bytes per snapshot.
    Snapshots(SnapshotsArgs),
    /// L2ARC index memory per byte of cache device: devices filled past capacity, a large sparse one.
    L2arcMemory(L2arcMemoryArgs),
}

#[derive(clap::Args, Debug, Clone)]
struct L2arcMemoryArgs {
    /// Scratch directory on the local disk (sparse cache-device files).
    #[arg(long)]
    dir: std::path::PathBuf,
    /// Sizes of the cache devices filled past capacity, MiB.
    #[arg(long, value_delimiter = ',', default_values_t = vec![256u64, 1024, 2048])]
    full_mib: Vec<u64>,
    /// Size of the large sparse cache device, GiB.
    #[arg(long, default_value_t = 256)]
    large_gib: u64,
    /// How much of the large device to write, MiB.
    #[arg(long, default_value_t = 1024)]
    large_fill_mib: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    out: std::path::PathBuf,
    #[arg(long, default_value = "")]
    note: String,
}

#[derive(clap::Args, Debug, Clone)]
struct SnapshotsArgs {
    /// Scratch directory on the local disk (the store).
    #[arg(long)]
    dir: std::path::PathBuf,
    /// Volume sizes, GiB (each filled with incompressible data).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1u64, 10])]
    sizes_gib: Vec<u64>,
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Simulated store round trip, ms.
    #[arg(long, default_value_t = 40)]
    latency_ms: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    out: std::path::PathBuf,
    #[arg(long, default_value = "")]
    note: String,
}

#[derive(clap::Args, Debug, Clone)]
struct RestartWarmupArgs {
    /// Scratch directory on the local disk (store, cache device).
    #[arg(long)]
    dir: std::path::PathBuf,
    #[arg(long, default_value_t = 256)]
    volume_mib: u64,
    /// The hot set that 90 % of reads go to.
    #[arg(long, default_value_t = 48)]
    hot_mib: u64,
    #[arg(long, default_value_t = 64)]
    arc_mib: u64,
    #[arg(long, default_value_t = 512)]
    l2_mib: u64,
    #[arg(long, default_value_t = 16)]
    readers: usize,
    /// Seconds of the workload before the restart (twice: warming, then measured).
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Seconds measured after each restart.
    #[arg(long, default_value_t = 60)]
    after_seconds: u64,
    /// Simulated store round trip, ms.
    #[arg(long, default_value_t = 40)]
    latency_ms: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    out: std::path::PathBuf,
    #[arg(long, default_value = "")]
    note: String,
}

#[derive(clap::Args, Debug, Clone)]
struct LogReplayArgs {
    /// Scratch directory on the local disk (store, log legs).
    #[arg(long)]
    dir: std::path::PathBuf,
    /// Log sizes to measure, in records (each a 4 KiB write and its sync request).
    #[arg(long, value_delimiter = ',', default_values_t = vec![20_000u64, 80_000])]
    records: Vec<u64>,
    /// Simulated store round trip, ms.
    #[arg(long, default_value_t = 10)]
    latency_ms: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    out: std::path::PathBuf,
    #[arg(long, default_value = "")]
    note: String,
}

#[derive(clap::Args, Debug, Clone)]
struct LogBurstsArgs {
    /// Scratch directory on the local disk (raw file, disk log, store).
    #[arg(long)]
    dir: std::path::PathBuf,
    /// Directory on tmpfs for the RAM log.
    #[arg(long, default_value = "/dev/shm/fardisk-bench")]
    ram_dir: std::path::PathBuf,
    #[arg(long, default_value_t = 64)]
    log_mib: u64,
    /// Simulated store round trip, ms.
    #[arg(long, default_value_t = 40)]
    latency_ms: u64,
    /// Simulated store bandwidth, MiB/s (what drains the log once it is full).
    #[arg(long, default_value_t = 32)]
    bandwidth_mib_s: u64,
    /// Size of each write (each followed by a sync request), KiB.
    #[arg(long, default_value_t = 128)]
    write_kib: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    out: std::path::PathBuf,
    #[arg(long, default_value = "")]
    note: String,
}

#[derive(clap::Args, Debug, Clone)]
struct CacheReadsArgs {
    /// Scratch directory on the local disk (local file, cache device, store).
    #[arg(long)]
    dir: std::path::PathBuf,
    #[arg(long, default_value_t = 64)]
    arc_mib: u64,
    #[arg(long, default_value_t = 192)]
    working_set_mib: u64,
    #[arg(long, default_value_t = 512)]
    l2_mib: u64,
    #[arg(long, default_value_t = 16)]
    readers: usize,
    /// Seconds of the timed random-read runs.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Simulated store round trip, ms.
    #[arg(long, default_value_t = 40)]
    latency_ms: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    out: std::path::PathBuf,
    #[arg(long, default_value = "")]
    note: String,
}

#[derive(clap::Args, Debug, Clone)]
struct SyncWritesArgs {
    /// Scratch directory on the local disk under test (raw file, log device, store).
    #[arg(long)]
    dir: std::path::PathBuf,
    /// Seconds per (configuration, writer count).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Simulated store round trip, ms.
    #[arg(long, default_value_t = 40)]
    latency_ms: u64,
    /// Concurrent writer counts, comma-separated (1 must be among them).
    #[arg(long, default_value = "1,8,64", value_delimiter = ',')]
    writers: Vec<usize>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The pools' `log_leg_timeout_ms` (default: the property's default).
    #[arg(long)]
    log_leg_timeout_ms: Option<u64>,
    #[arg(long)]
    out: std::path::PathBuf,
    #[arg(long, default_value = "")]
    note: String,
}

#[derive(clap::Args, Debug, Clone)]
struct EngineStoreArgs {
    /// Bucket of the S3 store (endpoint and credentials from AWS_* variables).
    #[arg(long)]
    bucket: String,
    /// Key prefix for this invocation; each run gets its own sub-prefix, deleted afterwards.
    #[arg(long, default_value_t = format!("bench-{}", std::process::id()))]
    prefix: String,
    /// Bytes written per run, in MiB (a multiple of the object size).
    #[arg(long, default_value_t = 2048)]
    total_mib: u64,
    /// Raw object size in MiB; default: the engine's segment size (PoolConfig).
    #[arg(long)]
    object_mib: Option<u64>,
    /// Raw PUTs in flight; default: the engine's upload_concurrency (PoolConfig).
    #[arg(long)]
    concurrency: Option<usize>,
    /// Size of each engine write and read, in KiB.
    #[arg(long, default_value_t = 1024)]
    chunk_kib: u64,
    /// Parallel writers feeding the engine (they share one sequential stream).
    #[arg(long, default_value_t = 4)]
    writers: usize,
    /// Rounds of (raw, engine); medians are over rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Seed of the data generator and the engine's randomness.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Cold random 4 KiB reads per side and round (cold_reads.rs; one per 64 MiB of volume at
    /// most); 0 skips them.
    #[arg(long, default_value_t = 48)]
    cold_reads: usize,
    /// Zero share of each 4 KiB block in the extra compressible-data engine run; 0 skips that run.
    #[arg(long, default_value_t = 50)]
    compressible_zero_percent: u8,
    /// Where the result rows go (JSON).
    #[arg(long)]
    out: std::path::PathBuf,
    /// Free text appended to every row's notes (machine load, what else ran).
    #[arg(long, default_value = "")]
    note: String,
    /// Appended to every row's setup, so runs against a store put far away (toxiproxy) are rows
    /// of their own, e.g. " (store 20 ms one-way)".
    #[arg(long, default_value = "")]
    setup_suffix: String,
}

/// Rounds are bounded: each one moves the full data set four times.
const ROUNDS_MAX: usize = 20;

impl EngineStoreArgs {
    fn object_bytes(&self) -> usize {
        self.object_mib
            .map(|m| (m << 20) as usize)
            .unwrap_or(PoolConfig::default().segment_bytes_target)
    }
    fn concurrency(&self) -> usize {
        self.concurrency.unwrap_or(PoolConfig::default().upload_concurrency)
    }
    fn total_bytes(&self) -> u64 {
        self.total_mib << 20
    }
    fn chunk_bytes(&self) -> usize {
        (self.chunk_kib << 10) as usize
    }

    fn check(&self) -> Result<()> {
        let (object, chunk) = (self.object_bytes() as u64, self.chunk_bytes() as u64);
        if object == 0
            || chunk == 0
            || chunk > object
            || !object.is_multiple_of(chunk)
            || !chunk.is_multiple_of(4096)
        {
            bail!(
                "--chunk-kib must be a multiple of 4 that divides the object size ({} KiB)",
                object >> 10
            );
        }
        if self.total_bytes() == 0 || !self.total_bytes().is_multiple_of(object) {
            bail!(
                "--total-mib must be a positive multiple of the object size ({} MiB)",
                object >> 20
            );
        }
        if self.rounds == 0 || self.rounds > ROUNDS_MAX {
            bail!("--rounds must be 1 to {ROUNDS_MAX}");
        }
        if self.compressible_zero_percent > 95 {
            bail!("--compressible-zero-percent must be 0 to 95");
        }
        Ok(())
    }

    fn url(&self, run: &str) -> String {
        format!("s3://{}/{}/{run}", self.bucket, self.prefix)
    }

    fn params(&self) -> BTreeMap<String, Value> {
        let c = PoolConfig::default();
        let mut p = BTreeMap::new();
        p.insert("total_mib".into(), Value::from(self.total_mib));
        p.insert("object_mib".into(), Value::from(self.object_bytes() as u64 >> 20));
        p.insert("upload_concurrency".into(), Value::from(self.concurrency() as u64));
        p.insert("chunk_kib".into(), Value::from(self.chunk_kib));
        p.insert("writers".into(), Value::from(self.writers as u64));
        p.insert("rounds".into(), Value::from(self.rounds as u64));
        p.insert("seed".into(), Value::from(self.seed));
        p.insert(
            "txg_timeout_s".into(),
            Value::from(c.txg_timeout.map(|t| t.as_secs()).unwrap_or(0)),
        );
        p.insert("dirty_sync_mib".into(), Value::from(c.dirty_sync_bytes >> 20));
        p.insert("dirty_max_mib".into(), Value::from(c.dirty_bytes_max >> 20));
        p.insert("compression".into(), Value::from(c.compression.name()));
        p.insert("data".into(), Value::from(DataKind::Random.label()));
        p
    }
}

fn log(msg: impl AsRef<str>) {
    eprintln!("fardisk-bench: {}", msg.as_ref());
}

fn say(what: &str, s: &Sample, write: bool) {
    let r = &s.requests;
    let (n, b, other) =
        if write { (r.puts, r.put_bytes, r.gets) } else { (r.gets, r.get_bytes, r.puts) };
    let verb = if write { "PUT" } else { "GET" };
    log(format!("{what}: {:.0} MiB in {:.2} s = {:.1} MiB/s; {n} {verb}s ({:.0} MiB), {} other requests, {} errors",
        s.logical_bytes as f64 / MIB, s.elapsed_s(), s.mib_per_s(), b as f64 / MIB, r.heads + r.lists + r.deletes + other, r.errors));
    if let Some(f) = s.in_flight {
        log(format!(
            "{what}: ranged GETs under way {:.0} MiB on average, under {:.0} MiB {:.0} % of the time",
            f.mean_mib,
            crate::progress::IN_FLIGHT_LOW_MIB,
            f.low_pct
        ));
    }
}

/// The ARC size a pool gets by default (the `arc_max` property), as the daemon would use.
fn arc_max_bytes() -> u64 {
    fardisk_engine::props::ARC_MAX.default_number()
}

async fn cleanup(url: &str) -> Result<()> {
    let store =
        fardisk_engine::objstore::open_store_url(url, false).map_err(|e| anyhow::anyhow!("{e}"))?;
    let n = raw::delete_all(&store).await?;
    log(format!("deleted {n} objects under {url}"));
    Ok(())
}

async fn engine_store(args: EngineStoreArgs) -> Result<()> {
    args.check()?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
    let t = clock.mono_us();
    let data = Arc::new(Dataset::generate(
        args.seed,
        args.total_bytes(),
        args.object_bytes(),
        DataKind::Random,
    ));
    log(format!(
        "generated {} MiB of pseudo-random data in {:.2} s (not timed)",
        args.total_mib,
        (clock.mono_us() - t) as f64 / 1e6
    ));
    let drive = engine::Drive {
        writers: args.writers,
        chunk_bytes: args.chunk_bytes(),
        seed: args.seed,
        clock: clock.clone(),
    };
    let mut runs = Runs::default();
    for round in 1..=args.rounds {
        let url = args.url(&format!("r{round}-raw"));
        let store = raw::open_counted(&url, clock.clone())?;
        let w = raw::write(&store, &data, args.concurrency(), &clock).await?;
        say(&format!("round {round} raw write"), &w, true);
        let r = raw::read(&store, &data, args.concurrency(), &clock).await?;
        say(&format!("round {round} raw read"), &r, false);
        let cold_at =
            cold_reads::offsets(data.total_bytes(), args.cold_reads, args.seed + round as u64);
        if !cold_at.is_empty() {
            let c = cold_reads::raw(&store, &data, &cold_at, &clock).await?;
            cold_reads::say(&format!("round {round} raw ranged 4 KiB GETs"), &c);
            runs.cold_raw.push(c);
        }
        cleanup(&url).await?;
        runs.raw_writes.push(w);
        runs.raw_reads.push(r);

        let url = args.url(&format!("r{round}-engine"));
        let (w, facts) = engine::write(&url, &data, &drive).await?;
        say(&format!("round {round} engine write"), &w, true);
        log(format!("round {round} engine: {facts:?}"));
        let r = engine::read(&url, &data, &drive, engine::ReadCache::None).await?;
        say(&format!("round {round} engine read (cold, no cache)"), &r, false);
        let arc = engine::read(
            &url,
            &data,
            &drive,
            engine::ReadCache::Arc { max_bytes: arc_max_bytes() },
        )
        .await?;
        say(&format!("round {round} engine read (cold, empty ARC)"), &arc, false);
        if !cold_at.is_empty() {
            let (hinted, plain) =
                cold_reads::engine_both(&url, &data, &drive, arc_max_bytes(), &cold_at, round)
                    .await?;
            runs.cold_hinted.push(hinted);
            runs.cold_plain.push(plain);
        }
        cleanup(&url).await?;
        runs.engine_writes.push((w, facts));
        runs.engine_reads.push(r);
        runs.engine_reads_arc.push(arc);
    }
    drop(data); // Only one data set in memory at a time.
    if args.compressible_zero_percent > 0 {
        let kind = DataKind::Compressible { zero_percent: args.compressible_zero_percent };
        let data =
            Arc::new(Dataset::generate(args.seed, args.total_bytes(), args.object_bytes(), kind));
        let url = args.url("compressible-engine");
        let (w, facts) = engine::write(&url, &data, &drive).await?;
        say("compressible engine write", &w, true);
        log(format!("compressible engine: {facts:?}"));
        cleanup(&url).await?;
        runs.compressible = Some((w, facts, kind));
    }
    let knobs = Knobs {
        object_bytes: args.object_bytes(),
        upload_concurrency: args.concurrency(),
        read_concurrency: args.concurrency(),
        writers: args.writers,
        arc_max_bytes: arc_max_bytes(),
        params: args.params(),
        notes: args.note.clone(),
    };
    let mut rows = rows::build(&runs, &knobs);
    for r in &mut rows {
        r.setup.push_str(&args.setup_suffix);
    }
    let text = serde_json::to_string_pretty(&serde_json::json!({ "rows": rows }))?;
    std::fs::write(&args.out, text).with_context(|| format!("writing {}", args.out.display()))?;
    log(format!("{} rows -> {}", rows.len(), args.out.display()));
    Ok(())
}

/// The engine in this process runs with the daemon's allocator settings, so its rows are what the
/// daemon does (fardisk_common::malloc; the raw rows share them).
fn main() -> Result<()> {
    match fardisk_common::malloc::reexec_with_tunables() {
        Err(e) => log(format!(
            "could not restart with the daemon's allocator tunables ({e}); going on without"
        )),
        Ok(fardisk_common::malloc::HugePages::NotAsked) => {
            log("malloc ignores glibc.malloc.hugetlb=1 after every start; going on without transparent huge pages")
        }
        Ok(_) => {}
    }
    fardisk_common::malloc::tune_allocator();
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(run())
}

async fn run() -> Result<()> {
    match Cli::parse().command {
        Command::EngineStore(args) => engine_store(args).await,
        Command::CacheReads(a) => {
            let args = cache_reads::Args {
                dir: a.dir,
                arc_mib: a.arc_mib,
                working_set_mib: a.working_set_mib,
                l2_mib: a.l2_mib,
                readers: a.readers,
                seconds: a.seconds,
                latency_ms: a.latency_ms,
                seed: a.seed,
            };
            cache_reads::run(args, &a.out, &a.note).await
        }
        Command::L2arcMemory(a) => {
            let args = l2arc_memory::Args {
                dir: a.dir,
                full_mib: a.full_mib,
                large_gib: a.large_gib,
                large_fill_mib: a.large_fill_mib,
                seed: a.seed,
            };
            l2arc_memory::run(args, &a.out, &a.note)
        }
        Command::RestartWarmup(a) => {
            let args = restart_warmup::Args {
                dir: a.dir,
                volume_mib: a.volume_mib,
                hot_mib: a.hot_mib,
                arc_mib: a.arc_mib,
                l2_mib: a.l2_mib,
                readers: a.readers,
                seconds: a.seconds.max(1),
                after_seconds: a.after_seconds.max(1),
                latency_ms: a.latency_ms,
                seed: a.seed,
            };
            restart_warmup::run(args, &a.out, &a.note).await
        }
        Command::Snapshots(a) => {
            let args = snapshots::Args {
                dir: a.dir,
                sizes_gib: a.sizes_gib,
                rounds: a.rounds.max(1),
                latency_ms: a.latency_ms,
                seed: a.seed,
            };
            snapshots::run(args, &a.out, &a.note).await
        }
        Command::LogBursts(a) => {
            let args = log_bursts::Args {
                dir: a.dir,
                ram_dir: a.ram_dir,
                log_mib: a.log_mib,
                latency_ms: a.latency_ms,
                bandwidth_mib_s: a.bandwidth_mib_s,
                write_kib: a.write_kib,
                seed: a.seed,
            };
            log_bursts::run(args, &a.out, &a.note).await
        }
        Command::LogReplay(a) => {
            let args = log_replay::Args {
                dir: a.dir,
                records: a.records,
                latency_ms: a.latency_ms,
                seed: a.seed,
            };
            log_replay::run(args, &a.out, &a.note).await
        }
        Command::SyncWrites(a) => {
            if !a.writers.contains(&1) {
                bail!("--writers must include 1 (the latency distribution comes from it)");
            }
            let args = sync_writes::Args {
                dir: a.dir,
                seconds: a.seconds,
                latency_ms: a.latency_ms,
                writer_counts: a.writers,
                seed: a.seed,
                log_leg_timeout_ms: a.log_leg_timeout_ms,
            };
            sync_writes::run(args, &a.out, &a.note).await
        }
    }
}
