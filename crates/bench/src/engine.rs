//! The engine under test: a fresh pool per run on its own prefix, one volume the size of the data
//! set, sequential 1 MiB writes through `Pool::write` from several writers, txg syncs left to the
//! engine's own syncer (default `txg_timeout` and dirty thresholds), a final `sync_txg`. Reads go
//! through a fresh import, either with no block cache at all or with an empty ARC (both cold).

use crate::data::Dataset;
use crate::progress::{Direction, InFlightSampler, Sampler};
use crate::stats::{Requests, Sample};
use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use fardisk_engine::arc_cache::ArcBlockCache;
use fardisk_engine::cache::{BlockCache, NoCache};
use fardisk_engine::clock::Clock;
use fardisk_engine::objstore::open_store_url;
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::{Env, Pool, PoolConfig};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const POOL_NAME: &str = "bench";
pub const VOLUME_NAME: &str = "v";
/// After a fresh import the engine walks its space table in the background; its GETs are not
/// part of the read workload, so the read starts after this pause.
const IMPORT_SETTLE_MS: u64 = 1_000;

/// The block cache a read-back import gets; both start empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadCache {
    /// `NoCache`: every block comes from the store; readahead results are dropped.
    None,
    /// The daemon's cache: an ARC of this many bytes, no L2ARC.
    Arc { max_bytes: u64 },
}

impl ReadCache {
    fn build(self) -> Arc<dyn BlockCache> {
        match self {
            ReadCache::None => Arc::new(NoCache),
            ReadCache::Arc { max_bytes } => Arc::new(ArcBlockCache::new(max_bytes, None)),
        }
    }
}

/// How a run drives the engine.
#[derive(Debug, Clone)]
pub struct Drive {
    pub writers: usize,
    pub chunk_bytes: usize,
    pub seed: u64,
    pub clock: Arc<dyn Clock>,
}

impl Drive {
    fn env(&self) -> Env {
        Env { clock: self.clock.clone(), seed: self.seed, blocking_inline: false }
    }
}

/// Engine-side facts of a write run, beyond the store's request counts.
#[derive(Debug, Clone, Default)]
pub struct WriteFacts {
    pub txgs: u64,
    pub segments: u64,
    pub segment_bytes: u64,
    pub throttle_delays: u64,
    pub throttle_stalls: u64,
    /// Time from the last acknowledged write to the final publish.
    pub final_sync_us: u64,
    /// Logical bytes per physical byte stored, as the pool reports it.
    pub compress_ratio: f64,
}

fn engine_err(what: &str) -> impl FnOnce(fardisk_engine::Error) -> anyhow::Error + '_ {
    move |e| anyhow!("{what}: {e}")
}

async fn import(url: &str, drive: &Drive, cache: ReadCache) -> Result<Pool> {
    import_with(url, drive, cache, PoolConfig::default()).await
}

/// An import with `config` instead of the defaults (cold_reads.rs).
pub async fn import_with(
    url: &str,
    drive: &Drive,
    cache: ReadCache,
    config: PoolConfig,
) -> Result<Pool> {
    let store = open_store_url(url, false).map_err(engine_err("opening the pool's store"))?;
    let opts = ImportOptions { force: false, config, missing_log: false, ..Default::default() };
    Pool::import(store, POOL_NAME, opts, drive.env(), cache.build())
        .await
        .map_err(engine_err("import"))
}

/// Creates a pool at `url` and writes `data` into one volume; the timed window runs from the
/// first write to the publish of the txg holding the last one.
pub async fn write(url: &str, data: &Arc<Dataset>, drive: &Drive) -> Result<(Sample, WriteFacts)> {
    let store = open_store_url(url, true).map_err(engine_err("opening the store"))?;
    Pool::create(store, POOL_NAME, CreateOptions::default(), &drive.env())
        .await
        .map_err(engine_err("create"))?;
    let pool = import(url, drive, ReadCache::None).await?;
    let vol =
        pool.volume_create(VOLUME_NAME, data.total_bytes()).map_err(engine_err("volume create"))?;
    pool.sync_txg().await.map_err(engine_err("initial sync"))?; // The volume's own txg is not timed.
    let status0 = pool.status();
    let stats = pool.store_stats();
    let before = stats.snapshot();
    let sampler = Sampler::start(stats.clone(), Direction::Put, drive.clock.clone());
    let t0 = drive.clock.mono_us();
    run_writers(&pool, vol, data, drive).await?;
    let t_acked = drive.clock.mono_us();
    pool.sync_txg().await.map_err(engine_err("final sync"))?;
    let t1 = drive.clock.mono_us();
    let progress = sampler.finish().await;
    let requests = Requests::between(&before, &stats.snapshot());
    let status1 = pool.status();
    let facts = WriteFacts {
        txgs: status1.txgs_synced - status0.txgs_synced,
        segments: status1.segments_uploaded - status0.segments_uploaded,
        segment_bytes: status1.segment_bytes_uploaded - status0.segment_bytes_uploaded,
        throttle_delays: status1.throttle_delays - status0.throttle_delays,
        throttle_stalls: status1.throttle_stalls - status0.throttle_stalls,
        final_sync_us: t1 - t_acked,
        compress_ratio: status1.compress_ratio,
    };
    pool.export().await.map_err(engine_err("export"))?;
    Ok((Sample::new(data.total_bytes(), t1 - t0, requests, progress), facts))
}

/// `drive.writers` tasks take the next chunk from one shared counter, so the stream as a whole is
/// sequential with at most `writers` chunks in flight.
async fn run_writers(pool: &Pool, vol: u32, data: &Arc<Dataset>, drive: &Drive) -> Result<()> {
    let chunks = data.total_bytes() / drive.chunk_bytes as u64;
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..drive.writers.max(1) {
        let (pool, data, next, chunk) =
            (pool.clone(), data.clone(), next.clone(), drive.chunk_bytes);
        tasks.spawn(async move {
            // Bounded by the chunk count: each iteration claims a distinct chunk.
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= chunks {
                    return Ok::<(), anyhow::Error>(());
                }
                let offset = i * chunk as u64;
                pool.write(vol, offset, data.chunk(offset, chunk))
                    .await
                    .map_err(engine_err("write"))?;
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.context("writer task")??;
    }
    Ok(())
}

/// Whether `parts`, one after the other, are `want`.
fn same_bytes(parts: &[Bytes], want: &[u8]) -> bool {
    let mut at = 0;
    for part in parts {
        if want.get(at..at + part.len()) != Some(&part[..]) {
            return false;
        }
        at += part.len();
    }
    at == want.len()
}

/// Imports the pool afresh with an empty `cache` and reads the volume back sequentially in
/// `chunk_bytes` reads, checking every byte against `data`.
pub async fn read(url: &str, data: &Dataset, drive: &Drive, cache: ReadCache) -> Result<Sample> {
    let pool = import(url, drive, cache).await?;
    let vol = pool
        .volume_id(VOLUME_NAME)
        .ok_or_else(|| anyhow!("volume '{VOLUME_NAME}' missing after import"))?;
    drive.clock.sleep(Duration::from_millis(IMPORT_SETTLE_MS)).await;
    let stats = pool.store_stats();
    let before = stats.snapshot();
    let sampler = Sampler::start(stats.clone(), Direction::Get, drive.clock.clone());
    let in_flight = InFlightSampler::start(stats.clone(), drive.clock.clone());
    let t0 = drive.clock.mono_us();
    let chunk = drive.chunk_bytes;
    let len = u32::try_from(chunk).context("chunk size fits a read")?;
    for i in 0..data.total_bytes() / chunk as u64 {
        let offset = i * chunk as u64;
        // As the FUSE front end reads: the blocks themselves, not one buffer built from them.
        let got = pool.read_parts(vol, offset, len).await.map_err(engine_err("read"))?;
        if !same_bytes(&got, &data.chunk(offset, chunk)) {
            bail!("volume bytes at offset {offset} differ from what was written");
        }
    }
    let elapsed_us = drive.clock.mono_us() - t0;
    let progress = sampler.finish().await;
    let in_flight = Some(in_flight.finish().await);
    let requests = Requests::between(&before, &stats.snapshot());
    pool.export().await.map_err(engine_err("export after read"))?;
    Ok(Sample { in_flight, ..Sample::new(data.total_bytes(), elapsed_us, requests, progress) })
}
