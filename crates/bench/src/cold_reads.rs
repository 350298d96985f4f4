//! Cold random 4 KiB reads (issue #21: the first byte of a cold random read costs one store round
//! trip when its map page is not cached, not two in sequence). One at a time, each in a 64 MiB
//! group of the volume of its own, in its first 32 MiB: a leaf page that comes with another
//! read's (up to 32 leaves ride along) is never one a later read needs. Three sides, on the
//! same offsets: raw ranged 4 KiB GETs of the same bytes (one round trip each, the floor), and
//! the engine after a fresh import with an empty ARC, with its leaf hints (`cold_read_bytes_max`
//! at its default) and without (`cold_read_bytes_max=0`: the leaf, then the block).

use crate::data::Dataset;
use crate::engine::{import_with, Drive, ReadCache, VOLUME_NAME};
use anyhow::{anyhow, bail, Context, Result};
use fardisk_engine::clock::Clock;
use fardisk_engine::objstore::{InstrumentedStore, Store};
use fardisk_engine::PoolConfig;
use std::sync::Arc;
use std::time::Duration;

const READ_BYTES: u64 = 4096;
const GROUP_BYTES: u64 = 64 << 20;
/// As engine.rs: the import's background work (the space walk, the interior map pages) first.
const IMPORT_SETTLE_MS: u64 = 1_000;

/// One side's reads: the latency of each (ms) and the store GETs they made together.
#[derive(Debug, Clone, Default)]
pub struct ColdReads {
    pub latencies_ms: Vec<f64>,
    pub gets: u64,
}

/// Where the reads go: one per 64 MiB group (at most `reads_max`), block-aligned, seeded.
pub fn offsets(total_bytes: u64, reads_max: usize, seed: u64) -> Vec<u64> {
    let rng = fardisk_engine::rng::Rng::new(seed ^ 0xc01d);
    let groups = (total_bytes / GROUP_BYTES).min(reads_max as u64);
    (0..groups)
        .map(|g| g * GROUP_BYTES + rng.next_u64() % (GROUP_BYTES / 2 / READ_BYTES) * READ_BYTES)
        .collect()
}

/// Ranged 4 KiB GETs of the raw objects at `offsets`, one at a time, each checked.
pub async fn raw(
    store: &Arc<InstrumentedStore>,
    data: &Dataset,
    offsets: &[u64],
    clock: &Arc<dyn Clock>,
) -> Result<ColdReads> {
    let mut out = ColdReads::default();
    for &offset in offsets {
        let object = (offset / data.object_bytes as u64) as usize;
        let within = offset % data.object_bytes as u64;
        let key = crate::raw::object_key(object);
        let t0 = clock.mono_us();
        let got = store
            .get_range(&key, within..within + READ_BYTES)
            .await
            .with_context(|| format!("ranged GET of {key}"))?;
        out.latencies_ms.push((clock.mono_us() - t0) as f64 / 1000.0);
        out.gets += 1;
        if got != data.chunk(offset, READ_BYTES as usize) {
            bail!("raw object {key} at {within} read back different bytes");
        }
    }
    Ok(out)
}

/// The engine's reads at `offsets` after a fresh import with an empty ARC of `arc_max_bytes`,
/// `cold_read_bytes_max` as given, every byte checked.
pub async fn engine(
    url: &str,
    data: &Dataset,
    drive: &Drive,
    arc_max_bytes: u64,
    cold_read_bytes_max: u64,
    offsets: &[u64],
) -> Result<ColdReads> {
    let config = PoolConfig { cold_read_bytes_max, ..PoolConfig::default() };
    let cache = ReadCache::Arc { max_bytes: arc_max_bytes };
    let pool = import_with(url, drive, cache, config).await?;
    let vol = pool
        .volume_id(VOLUME_NAME)
        .ok_or_else(|| anyhow!("volume '{VOLUME_NAME}' missing after import"))?;
    drive.clock.sleep(Duration::from_millis(IMPORT_SETTLE_MS)).await;
    let stats = pool.store_stats();
    let before = stats.snapshot().get.requests;
    let mut out = ColdReads::default();
    for &offset in offsets {
        let t0 = drive.clock.mono_us();
        let got = pool
            .read(vol, offset, READ_BYTES as u32)
            .await
            .map_err(|e| anyhow!("cold read at {offset}: {e}"))?;
        out.latencies_ms.push((drive.clock.mono_us() - t0) as f64 / 1000.0);
        if got != data.chunk(offset, READ_BYTES as usize) {
            bail!("volume bytes at offset {offset} differ from what was written");
        }
    }
    out.gets = stats.snapshot().get.requests - before;
    pool.export().await.map_err(|e| anyhow!("export after the cold reads: {e}"))?;
    Ok(out)
}

/// The engine's reads with leaf hints (`cold_read_bytes_max` at its default) and without (0),
/// the order alternated over rounds so that neither side always goes first: (with, without).
pub async fn engine_both(
    url: &str,
    data: &Dataset,
    drive: &Drive,
    arc_max_bytes: u64,
    offsets: &[u64],
    round: usize,
) -> Result<(ColdReads, ColdReads)> {
    let default_bytes = PoolConfig::default().cold_read_bytes_max;
    let mut sides = [default_bytes, 0];
    if round.is_multiple_of(2) {
        sides.reverse();
    }
    let (mut hinted, mut plain) = (ColdReads::default(), ColdReads::default());
    for bytes_max in sides {
        let c = engine(url, data, drive, arc_max_bytes, bytes_max, offsets).await?;
        say(
            &format!("round {round} engine cold 4 KiB reads (cold_read_bytes_max={bytes_max})"),
            &c,
        );
        if bytes_max == 0 {
            plain = c;
        } else {
            hinted = c;
        }
    }
    Ok((hinted, plain))
}

/// One progress line for a side's reads.
pub fn say(what: &str, c: &ColdReads) {
    let p50 = crate::stats::median(&c.latencies_ms).unwrap_or(0.0);
    let max = c.latencies_ms.iter().copied().fold(0.0, f64::max);
    let n = c.latencies_ms.len();
    eprintln!(
        "fardisk-bench: {what}: {n} reads, p50 {p50:.1} ms, max {max:.1} ms, {} GETs",
        c.gets
    );
}
