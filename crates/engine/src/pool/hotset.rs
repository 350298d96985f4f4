//! Warm-up after a restart (seed 004: "snapshot the hot set while the database runs well and
//! restore it later"). Demand reads are counted per 64 KiB region of a volume; `save_hot_set`
//! stores the most-read regions in the object `hotset`, and after an import `warm_up` reads them
//! back in the background, as prefetches, into the ARC (from the L2ARC when it has them, else
//! from the store) at bounded concurrency, so the first minute after a restart is not a cold one.
//!
//! Regions are logical (volume, offset), not physical block locations: whatever a region holds
//! when it is warmed is what the database would read, and a region whose data moved or vanished
//! is simply read as it is now (never stale). A scan reads every region once; the tracker ages
//! counts and forgets single reads when it is full, so a scan cannot push the hot set out.
//!
//! Object `hotset` (overwritten; verified on read), little-endian:
//! ```text
//! 0   u64  magic "FDHOTRG1"
//! 8   u32  version (1)
//! 12  u32  region_count
//! 16  u64  txg the list was taken at
//! 24  region_count x { u32 volume_id, u32 reads (saturating), u64 region index }
//! end u64  xxh3_64 of everything before
//! ```

use super::{Inner, Pool};
use crate::dirty::BLOCK_BYTES;
use crate::error::{Error, Result};
use crate::objstore::PutMode;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub const HOT_SET_KEY: &str = "hotset";
const MAGIC: &[u8; 8] = b"FDHOTRG1";
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 24;
const ENTRY_BYTES: usize = 16;
/// Blocks per tracked region (64 KiB): one coalesced GET warms a whole region.
pub const REGION_BLOCKS: u64 = 16;
/// Regions tracked at most (4 GiB of volume space); past it, single reads are forgotten and
/// the other counts halve.
const TRACKED_REGIONS_MAX: usize = 1 << 16;
/// Regions read concurrently while warming (demand reads keep the rest of the store's bandwidth).
const WARM_IN_FLIGHT: usize = 4;

/// Demand-read counts per (volume, region).
#[derive(Debug, Default)]
pub(crate) struct HotTracker {
    counts: Mutex<HashMap<(u32, u64), u32>>,
    /// xxh3 of the list this import last stored: an idle pool's periodic save (every 5 minutes
    /// in the daemon) would otherwise PUT the same bytes 12 times an hour.
    saved_sum: Mutex<Option<u64>>,
}

/// Warm-up progress, shown in status.
#[derive(Debug, Default)]
pub(crate) struct WarmupCounters {
    pub regions_total: AtomicU64,
    pub regions_done: AtomicU64,
    pub regions_skipped: AtomicU64,
}

impl HotTracker {
    /// Counts a demand read of blocks `first..=last` of a volume.
    pub fn touch(&self, volume_id: u32, first: u64, last: u64) {
        let mut counts = self.counts.lock();
        for region in first / REGION_BLOCKS..=last / REGION_BLOCKS {
            let c = counts.entry((volume_id, region)).or_insert(0);
            *c = c.saturating_add(1);
        }
        if counts.len() > TRACKED_REGIONS_MAX {
            // Aging: one-time reads (a scan) go, everything else counts half as much.
            counts.retain(|_, c| *c > 1);
            counts.values_mut().for_each(|c| *c = c.div_ceil(2));
        }
    }

    /// The `max` most-read regions read more than once, in volume order (so warming them is
    /// close to sequential).
    fn hottest(&self, max: usize) -> Vec<(u32, u64, u32)> {
        let counts = self.counts.lock();
        let mut v: Vec<(u32, u64, u32)> =
            counts.iter().filter(|(_, c)| **c > 1).map(|(&(vol, r), &c)| (vol, r, c)).collect();
        v.sort_unstable_by_key(|b| std::cmp::Reverse(b.2));
        v.truncate(max);
        v.sort_unstable();
        v
    }
}

/// The `hotset` object listing `regions` as (volume id, region index, demand reads), taken at
/// published txg `txg` (exported as `pool::encode_hot_set`).
pub fn encode(txg: u64, regions: &[(u32, u64, u32)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + regions.len() * ENTRY_BYTES + 8);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(regions.len() as u32).to_le_bytes());
    out.extend_from_slice(&txg.to_le_bytes());
    for &(vol, region, reads) in regions {
        out.extend_from_slice(&vol.to_le_bytes());
        out.extend_from_slice(&reads.to_le_bytes());
        out.extend_from_slice(&region.to_le_bytes());
    }
    let sum = xxhash_rust::xxh3::xxh3_64(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// Verifies a `hotset` object; its regions as (volume id, region index, reads).
pub fn decode(bytes: &[u8]) -> Result<Vec<(u32, u64, u32)>> {
    let corrupt = |why: &str| Error::corrupt("hot set", why);
    if bytes.len() < HEADER_BYTES + 8 || &bytes[..8] != MAGIC {
        return Err(corrupt("bad magic or too short"));
    }
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    if xxhash_rust::xxh3::xxh3_64(body) != u64::from_le_bytes(sum.try_into().expect("8 bytes")) {
        return Err(corrupt("checksum mismatch"));
    }
    let le32 = |at: usize| u32::from_le_bytes(body[at..at + 4].try_into().expect("4 bytes"));
    if le32(8) != VERSION {
        return Err(corrupt("unsupported version"));
    }
    let count = le32(12) as usize;
    if count > TRACKED_REGIONS_MAX || body.len() != HEADER_BYTES + count * ENTRY_BYTES {
        return Err(corrupt("length does not match the region count"));
    }
    Ok((0..count)
        .map(|i| {
            let at = HEADER_BYTES + i * ENTRY_BYTES;
            let region = u64::from_le_bytes(body[at + 8..at + 16].try_into().expect("8 bytes"));
            (le32(at), region, le32(at + 4))
        })
        .collect())
}

impl Pool {
    /// Stores the current hot set (at most what fits in `budget_bytes`) in the object store;
    /// returns the number of regions saved. Called at export, on demand, and periodically.
    pub async fn save_hot_set(&self, budget_bytes: u64) -> Result<usize> {
        if self.read_only_txg().is_some() {
            return Ok(0); // A read-only import writes nothing to the store.
        }
        let max = (budget_bytes / (REGION_BLOCKS * BLOCK_BYTES)).max(1) as usize;
        let regions = self.inner.hot.hottest(max.min(TRACKED_REGIONS_MAX));
        let blob = encode(self.published_txg(), &regions);
        debug_assert!(decode(&blob).is_ok(), "a hot set must decode right before it is written");
        let sum = xxhash_rust::xxh3::xxh3_64(&blob);
        if *self.inner.hot.saved_sum.lock() == Some(sum) {
            return Ok(regions.len()); // What the store holds already: no request.
        }
        self.inner.store.put(HOT_SET_KEY, Bytes::from(blob), PutMode::Overwrite).await?;
        *self.inner.hot.saved_sum.lock() = Some(sum);
        Ok(regions.len())
    }

    /// Reads the saved hot set back into the cache, in the background: returns at once. Regions
    /// of volumes that are gone or shrank are skipped; a missing or damaged list warms nothing.
    pub fn warm_up(&self) {
        if self.inner.blocks.holds_nothing() {
            return;
        }
        let pool = self.clone();
        self.spawn(async move {
            if let Err(e) = pool.warm_up_now().await {
                tracing::warn!(error = %e, "warm-up stopped; reads go to the store as usual");
            }
        });
    }

    async fn warm_up_now(&self) -> Result<()> {
        let blob = match self.inner.store.get(HOT_SET_KEY).await {
            Ok(b) => b,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let regions = decode(&blob)?;
        let w = &self.inner.warmup;
        w.regions_total.store(regions.len() as u64, Ordering::Relaxed);
        tracing::info!(regions = regions.len(), "warm-up: reading the saved hot set");
        let started = self.inner.env.clock.mono_us();
        let mut pending = tokio::task::JoinSet::new();
        for (vol, region, _) in regions {
            while pending.len() >= WARM_IN_FLIGHT {
                pending.join_next().await;
            }
            let pool = self.clone();
            pending.spawn(async move { pool.warm_region(vol, region).await });
        }
        while pending.join_next().await.is_some() {}
        tracing::info!(
            done = w.regions_done.load(Ordering::Relaxed),
            skipped = w.regions_skipped.load(Ordering::Relaxed),
            seconds = (self.inner.env.clock.mono_us() - started) / 1_000_000,
            "warm-up finished"
        );
        Ok(())
    }

    async fn warm_region(&self, volume_id: u32, region: u64) {
        let w = &self.inner.warmup;
        let target = self
            .inner
            .meta
            .read()
            .volumes
            .get(&volume_id)
            .map(|v| (v.tree, v.size_bytes / BLOCK_BYTES));
        let first = region * REGION_BLOCKS;
        let Some((tree, blocks)) = target.filter(|(_, blocks)| first < *blocks) else {
            w.regions_skipped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let last = (first + REGION_BLOCKS).min(blocks) - 1;
        let ok = match self.resolve(volume_id, tree, first, last).await {
            Ok(sources) => super::fetch::prefetch_sources(&self.inner, &sources).await.is_ok(),
            Err(_) => false,
        };
        let counter = if ok { &w.regions_done } else { &w.regions_skipped };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

pub(crate) fn warmup_json(inner: &Arc<Inner>) -> serde_json::Value {
    let w = &inner.warmup;
    serde_json::json!({
        "regions_total": w.regions_total.load(Ordering::Relaxed),
        "regions_done": w.regions_done.load(Ordering::Relaxed),
        "regions_skipped": w.regions_skipped.load(Ordering::Relaxed),
        "tracked_regions": inner.hot.counts.lock().len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_round_trips_and_damage_is_refused() {
        let regions = vec![(1u32, 7u64, 3u32), (2, 0, 9)];
        let blob = encode(42, &regions);
        assert_eq!(decode(&blob).expect("decodes"), regions);
        for i in [0, 9, 13, 30, blob.len() - 1] {
            let mut bad = blob.clone();
            bad[i] ^= 0x10;
            assert!(decode(&bad).is_err(), "byte {i} flipped went unnoticed");
        }
        assert!(decode(&blob[..blob.len() - 3]).is_err());
    }

    #[test]
    fn a_scan_does_not_push_out_the_hot_set() {
        let t = HotTracker::default();
        for _ in 0..5 {
            t.touch(1, 0, 10 * REGION_BLOCKS - 1); // ten hot regions, read five times
        }
        // A scan over far more regions than the tracker holds, each read once.
        for r in 0..(TRACKED_REGIONS_MAX as u64 * 2) {
            t.touch(2, r * REGION_BLOCKS, r * REGION_BLOCKS);
        }
        let hot = t.hottest(100);
        assert_eq!(hot.len(), 10, "only the hot regions are kept: {:?}", &hot[..hot.len().min(12)]);
        assert!(hot.iter().all(|(vol, r, _)| *vol == 1 && *r < 10));
    }
}
