//! The engine's block cache backed by the ARC (RAM) and, when the pool has cache devices, the
//! L2ARC (local SSD), fed from the ARC's evictions at a capped rate. Keys are block locations,
//! which never change meaning, and every block is verified against its pointer's checksum by the
//! caller as well as by the L2ARC. Async readers read the L2ARC through io_uring
//! (`device_reads.rs`), without a thread hop.

use crate::blkptr::BlockPtr;
use crate::cache::{BlockCache, DeviceRead};
use crate::clock::{Clock, SystemClock};
use crate::device_reads::DeviceReads;
use crate::pool::Env;
use bytes::Bytes;
use fardisk_arc::{
    AdaptiveCache, ArcConfig, BlockKey, InsertKind, L2Arc, L2ArcConfig, WriterHandle,
};
use parking_lot::{Mutex, RwLock};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the L2ARC writer drains the eviction feed.
const L2_TICK: Duration = Duration::from_millis(100);

pub struct ArcBlockCache {
    arc: AdaptiveCache,
    arc_max_bytes: u64,
    /// Swapped in when the first cache device is added to a pool that had none (`fardisk add`).
    l2: RwLock<Option<L2Arc>>,
    writer: Mutex<Option<WriterHandle>>,
    /// For an L2ARC created at run time: its write rate and guid seed.
    l2_config: L2ArcConfig,
    seed: u64,
    /// The io_uring reader, started by the first async cache-device read on the runtime that
    /// runs it (again if that runtime went away).
    device_reads: RwLock<Option<Arc<DeviceReads>>>,
    /// The kernel refused io_uring: reads go to blocking threads.
    io_uring_refused: AtomicBool,
    /// For an L2ARC created at run time: its clock (write-rate budget, health checks).
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for ArcBlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArcBlockCache").field("l2", &self.l2.read().is_some()).finish()
    }
}

fn key(p: &BlockPtr) -> BlockKey {
    BlockKey { segment_id: p.segment_id, offset_bytes: p.offset_bytes }
}

/// The caller verified (or computed) the checksum for exactly these bytes; hits are answered on
/// it without hashing again, so a caller that did not is a bug to catch.
fn debug_assert_verified(ptr: &BlockPtr, physical: &[u8]) {
    debug_assert_eq!(
        crate::codec::checksum64(physical),
        ptr.checksum,
        "a block entered the ARC unverified"
    );
}

impl ArcBlockCache {
    /// An ARC of at most `arc_max_bytes` (at least an eighth of that is kept when shrinking), with
    /// an optional L2ARC whose writer starts at once.
    pub fn new(arc_max_bytes: u64, l2: Option<L2Arc>) -> ArcBlockCache {
        Self::with_l2_config(arc_max_bytes, l2, L2ArcConfig::default(), 0)
    }

    /// `new`, with the configuration an L2ARC created later by `add_device` uses.
    pub fn with_l2_config(
        arc_max_bytes: u64,
        l2: Option<L2Arc>,
        l2_config: L2ArcConfig,
        seed: u64,
    ) -> ArcBlockCache {
        let arc = AdaptiveCache::new(ArcConfig::new(arc_max_bytes / 8, arc_max_bytes));
        let writer = l2.as_ref().map(|l| l.spawn_writer(arc.feed(), L2_TICK));
        let has_l2 = l2.is_some();
        // No cache device, nothing drains the feed: evicted blocks are freed at once.
        arc.set_feeding(has_l2);
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let cache = ArcBlockCache {
            arc_max_bytes,
            arc,
            l2: RwLock::new(l2),
            writer: Mutex::new(writer),
            l2_config,
            seed,
            device_reads: RwLock::new(None),
            io_uring_refused: AtomicBool::new(false),
            clock,
        };
        if has_l2 {
            cache.start_device_reads();
        }
        cache
    }

    /// Starts the io_uring reader now, when there is a runtime to run it (its ring and eventfd
    /// are then part of the daemon's idle descriptors, not opened by the first read).
    fn start_device_reads(&self) {
        if tokio::runtime::Handle::try_current().is_ok() {
            self.device_reads();
        }
    }

    /// An ARC and L2ARC with no writer thread: the caller feeds the L2ARC (`l2().write_tick`)
    /// when it chooses, so a simulation writes the same blocks to the device on every replay.
    pub fn with_manual_l2(
        arc_max_bytes: u64,
        l2: L2Arc,
        l2_config: L2ArcConfig,
        seed: u64,
    ) -> ArcBlockCache {
        let arc = AdaptiveCache::new(ArcConfig::new(arc_max_bytes / 8, arc_max_bytes));
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        ArcBlockCache {
            arc_max_bytes,
            arc,
            l2: RwLock::new(Some(l2)),
            writer: Mutex::new(None),
            l2_config,
            seed,
            device_reads: RwLock::new(None),
            io_uring_refused: AtomicBool::new(false),
            clock,
        }
    }

    /// The clock an L2ARC created at run time (`add_device`) runs on; the system clock unless
    /// set (give it the pool's `Env::clock`).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> ArcBlockCache {
        self.clock = clock;
        self
    }

    pub fn arc(&self) -> &AdaptiveCache {
        &self.arc
    }

    /// The L2ARC (a shared handle), if the pool has cache devices.
    pub fn l2(&self) -> Option<L2Arc> {
        self.l2.read().clone()
    }

    /// Formats `path` as a cache device of pool `pool_guid` and puts it in service at once,
    /// creating the L2ARC (and its writer) if the pool had none. A missing file is created at
    /// `size_bytes_if_new`.
    pub fn add_device(
        &self,
        path: &Path,
        pool_guid: u128,
        size_bytes_if_new: u64,
    ) -> Result<(), String> {
        let size = if path.exists() { None } else { Some(size_bytes_if_new) };
        let mut slot = self.l2.write();
        if let Some(l2) = slot.as_ref() {
            return l2
                .add_device(path, size)
                .map(|_| ())
                .map_err(|e| format!("cache device {}: {e}", path.display()));
        }
        let l2 = L2Arc::new(self.l2_config.clone(), pool_guid, self.clock.clone(), self.seed)
            .map_err(|e| format!("L2ARC: {e}"))?;
        l2.add_device(path, size).map_err(|e| format!("cache device {}: {e}", path.display()))?;
        *self.writer.lock() = Some(l2.spawn_writer(self.arc.feed(), L2_TICK));
        self.arc.set_feeding(true);
        *slot = Some(l2);
        drop(slot);
        self.start_device_reads();
        Ok(())
    }

    /// Takes the cache device at `path` out of service at once: its entries are forgotten and
    /// their blocks are read from the store again.
    pub fn remove_device(&self, path: &Path) -> Result<(), String> {
        let l2 = self
            .l2()
            .ok_or_else(|| format!("{} is not a cache device in service", path.display()))?;
        let id = l2
            .stats()
            .devices
            .iter()
            .find(|d| d.path == path)
            .map(|d| d.id)
            .ok_or_else(|| format!("{} is not a cache device in service", path.display()))?;
        l2.remove_device(id).map_err(|e| format!("removing cache device {}: {e}", path.display()))
    }

    /// Stops the L2ARC writer and makes nothing more durable: what a crash leaves on the cache
    /// device (the simulation damages it next, as a power cut might).
    pub fn stop_writer(&self) {
        if let Some(w) = self.writer.lock().take() {
            w.stop();
        }
    }

    /// Stops the L2ARC writer and makes what it wrote durable (export).
    pub fn shutdown(&self) {
        if let Some(w) = self.writer.lock().take() {
            w.stop();
        }
        if let Some(l2) = self.l2() {
            l2.sync();
        }
    }

    /// The io_uring reader (started on first use, from async code).
    fn device_reads(&self) -> Option<Arc<DeviceReads>> {
        if let Some(reads) = self.device_reads.read().as_ref().filter(|r| r.is_alive()) {
            return Some(Arc::clone(reads));
        }
        if self.io_uring_refused.load(Ordering::Relaxed) {
            return None;
        }
        let mut slot = self.device_reads.write();
        if let Some(reads) = slot.as_ref().filter(|r| r.is_alive()) {
            return Some(Arc::clone(reads));
        }
        match DeviceReads::start() {
            Ok(reads) => {
                let reads = Arc::new(reads);
                *slot = Some(Arc::clone(&reads));
                Some(reads)
            }
            Err(err) => {
                tracing::warn!(%err, "io_uring unavailable; cache-device reads use blocking threads");
                self.io_uring_refused.store(true, Ordering::Relaxed);
                None
            }
        }
    }

    /// Reads a block from the L2ARC through io_uring: each place the index names, until one
    /// verifies. The rare candidates that did not are settled on a blocking thread (that reads
    /// their log blocks' tables).
    async fn read_l2_async(
        l2: &L2Arc,
        reads: &DeviceReads,
        key: BlockKey,
        ptr: &BlockPtr,
    ) -> Option<Bytes> {
        let plans = l2.plan_read(&key, ptr.physical_bytes);
        let mut tried = Vec::new();
        for plan in plans {
            let read = reads.read(&plan).await;
            if let Some(hit) = l2.finish_read(ptr.physical_bytes, ptr.checksum, &plan, read) {
                return Some(hit);
            }
            tried.push(plan);
        }
        let len_bytes = ptr.physical_bytes;
        if tried.is_empty() {
            l2.missed(&key, len_bytes, &tried);
        } else {
            let l2 = l2.clone();
            let settled =
                tokio::task::spawn_blocking(move || l2.missed(&key, len_bytes, &tried)).await;
            if let Err(err) = settled {
                tracing::warn!(%err, "settling a cache-device miss failed");
            }
        }
        None
    }

    /// Keeps `physical`, verified against `ptr.checksum`, in RAM under that checksum.
    fn arc_insert(&self, ptr: &BlockPtr, physical: Bytes, prefetch: bool) {
        let kind = if prefetch { InsertKind::Prefetch } else { InsertKind::Demand };
        self.arc.insert(key(ptr), physical, ptr.checksum, kind);
    }

    pub fn stats_json(&self) -> serde_json::Value {
        serde_json::json!({
            "arc": self.arc.stats(),
            "l2arc": self.l2().map(|l| l.stats()),
        })
    }
}

impl BlockCache for ArcBlockCache {
    fn ram_bytes_max(&self) -> u64 {
        self.arc_max_bytes
    }

    fn get(&self, ptr: &BlockPtr, prefetch: bool) -> Option<Bytes> {
        self.get_ram(ptr, prefetch).or_else(|| self.get_device(ptr, prefetch))
    }

    fn get_ram(&self, ptr: &BlockPtr, prefetch: bool) -> Option<Bytes> {
        let k = key(ptr);
        if prefetch {
            self.arc.get_prefetch(&k, ptr.checksum)
        } else {
            self.arc.get(&k, ptr.checksum)
        }
    }

    fn get_device(&self, ptr: &BlockPtr, prefetch: bool) -> Option<Bytes> {
        let k = key(ptr);
        let from_l2 = self.l2.read().as_ref()?.get(&k, ptr.physical_bytes, ptr.checksum)?;
        self.arc_insert(ptr, from_l2.clone(), prefetch);
        Some(from_l2)
    }

    fn read_device(self: Arc<Self>, ptr: BlockPtr, prefetch: bool, env: Env) -> DeviceRead {
        Box::pin(async move {
            let l2 = self.l2()?;
            if env.blocking_inline {
                return self.get_device(&ptr, prefetch);
            }
            let Some(reads) = self.device_reads() else {
                return env
                    .blocking("cache-device read", move || self.get_device(&ptr, prefetch))
                    .await
                    .ok()
                    .flatten();
            };
            let k = key(&ptr);
            let from_l2 = Self::read_l2_async(&l2, &reads, k, &ptr).await?;
            self.arc_insert(&ptr, from_l2.clone(), prefetch);
            Some(from_l2)
        })
    }

    fn in_ram(&self, ptr: &BlockPtr) -> bool {
        self.arc.contains(&key(ptr))
    }

    fn on_device(&self, ptr: &BlockPtr) -> bool {
        self.l2.read().as_ref().is_some_and(|l2| l2.contains(&key(ptr)))
    }

    fn insert(&self, ptr: &BlockPtr, physical: Bytes, prefetch: bool) {
        debug_assert_verified(ptr, &physical);
        self.arc_insert(ptr, physical, prefetch);
    }

    fn get_ram_many(&self, ptrs: &[BlockPtr], prefetch: bool) -> Vec<Option<Bytes>> {
        let keys: Vec<(BlockKey, u64)> = ptrs.iter().map(|p| (key(p), p.checksum)).collect();
        self.arc.get_many(&keys, prefetch)
    }

    fn let_go_read_once(&self, ptrs: &[BlockPtr]) {
        let keys: Vec<BlockKey> = ptrs.iter().map(key).collect();
        self.arc.let_go_read_once(&keys);
    }

    fn insert_many(&self, blocks: Vec<(BlockPtr, Bytes)>, prefetch: bool) {
        let kind = if prefetch { InsertKind::Prefetch } else { InsertKind::Demand };
        let items = blocks
            .into_iter()
            .map(|(p, physical)| {
                debug_assert_verified(&p, &physical);
                (key(&p), physical, p.checksum)
            })
            .collect();
        self.arc.insert_many(items, kind);
    }

    fn hits_verified(&self) -> bool {
        // RAM: every entry was verified against its checksum on the way in and is answered only
        // to a pointer with that checksum. Device: `L2Arc` reads verify against `ptr.checksum`.
        true
    }

    fn invalidate(&self, ptr: &BlockPtr) {
        let k = key(ptr);
        self.arc.remove(&k);
        if let Some(l2) = self.l2.read().as_ref() {
            l2.remove(&k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(i: u32) -> (BlockPtr, Bytes) {
        let physical = Bytes::from(vec![i as u8; 4096]);
        let ptr = BlockPtr {
            segment_id: 1,
            offset_bytes: i * 4096,
            physical_bytes: 4096,
            checksum: crate::codec::checksum64(&physical),
            birth_txg: 1,
            compression: 0,
            logical_bytes: 4096,
        };
        (ptr, physical)
    }

    /// Four times the ARC's size goes through it, singly and in batches.
    fn overflow(cache: &ArcBlockCache) {
        let blocks_max = (cache.ram_bytes_max() / 4096) as u32;
        for i in 0..blocks_max * 2 {
            let (ptr, physical) = block(i);
            cache.insert(&ptr, physical, false);
        }
        let batch: Vec<_> = (blocks_max * 2..blocks_max * 4).map(block).collect();
        cache.insert_many(batch, false);
        assert!(cache.arc().stats().evictions > 0);
    }

    #[test]
    fn without_a_cache_device_evicted_blocks_are_freed_not_queued_for_one() {
        let cache = ArcBlockCache::new(1 << 20, None);
        overflow(&cache);
        let feed = cache.arc().feed();
        assert_eq!((feed.pushed(), feed.len(), feed.bytes()), (0, 0, 0));
    }

    #[test]
    fn adding_a_cache_device_starts_the_feed() {
        let dir = std::env::temp_dir().join(format!("fardisk-arc-feed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cache = ArcBlockCache::new(1 << 20, None);
        cache.add_device(&dir.join("l2"), 7, 64 << 20).unwrap();
        cache.stop_writer();
        overflow(&cache);
        let pushed = cache.arc().feed().pushed();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(pushed > 0, "evictions must reach the new cache device");
    }
}
