//! The L2ARC: a persistent read cache on local cache devices.
//!
//! * Striped, never mirrored: each log block goes to one device, round-robin over the online
//!   devices; losing a device loses only cached copies.
//! * Fed from the ARC's eviction feed by a writer capped at `write_max_bytes_per_s`.
//! * Each device is a ring of fixed-size log blocks (see `log_block.rs`, `device.rs`); cached
//!   blocks take whole 4 KiB units inside a log block, at a place chosen by hashing their key
//!   (`geometry.rs`). Before a slot is reused, the index forgets every entry in it, then the
//!   slot is rewritten.
//! * Each device has its own index (`index.rs`): 29 bits per cached block, sized when the
//!   device is opened, ~0.96 GiB of memory per TiB of device (docs/design/0005-l2arc-index.md).
//! * After a restart the index is rebuilt in the background from the log-block headers alone;
//!   lookups meanwhile miss or hit what is already restored.
//! * Every read is verified against the caller's expected checksum; bytes that do not match are
//!   never returned (a damaged entry is dropped and counted), and the caller reads the store.
//! * A device that fails an I/O, vanishes or shrinks is FAULTED: out of service, its entries
//!   dropped, nothing panics. The health check reopens it if a valid label comes back.
//!
//! Locks, always taken in this order and never held across device I/O:
//! `writer` -> `devices` -> a device's `index`. Reads take `devices` and `index` briefly, never
//! `writer`.

mod builder;
mod config;
mod device;
mod direct;
mod error;
// Decoders for the cargo-fuzz targets in fuzz/ (not an API), re-exported by lib.rs.
#[doc(hidden)]
pub mod fuzz_api;
mod geometry;
mod health;
mod index;
mod label;
mod log_block;
mod open_block;
mod packed;
mod rate;
mod reader;
mod rebuild;
mod stats;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

pub use config::{L2ArcConfig, LOG_BLOCK_BYTES_MAX, LOG_BLOCK_BYTES_MIN, SLOTS_PER_DEVICE_TARGET};
pub use error::L2Error;
pub use label::cache_label_pool_guid;
pub use reader::{PlannedRead, ReadBuf};
pub use stats::{DeviceState, DeviceStats, L2Stats, RebuildStats};
pub use writer::{WriteTickReport, WriterHandle};

use crate::arc::EvictionFeed;
use crate::clock::Clock;
use crate::key::BlockKey;
use device::CacheDevice;
use fardisk_common::rng::Rng;
use stats::{load, L2Counters};
use writer::WriterState;

/// Identifies a cache device within one L2ARC (not persistent; the label's guid is).
pub type DeviceId = u32;

pub(crate) struct Shared {
    pub(crate) config: L2ArcConfig,
    pub(crate) pool_guid: u128,
    pub(crate) clock: Arc<dyn Clock>,
    guid_rng: Rng,
    next_device_id: AtomicU32,
    pub(crate) devices: RwLock<Vec<Arc<CacheDevice>>>,
    pub(crate) writer: Mutex<WriterState>,
    pub(crate) counters: L2Counters,
}

impl Shared {
    /// Takes a device out of service and forgets its entries. The state changes before the
    /// index lock is taken, so a writer or rebuild that checks the state under the index lock
    /// can never index entries after this drop.
    pub(crate) fn fault(&self, device: &CacheDevice, reason: String) {
        if device.fault(reason) {
            device.index.write().clear();
        }
    }

    /// Whether some device's index names `key`.
    pub(crate) fn indexed(&self, key: &BlockKey) -> bool {
        reader::indexed(self, key)
    }

    pub(crate) fn io_error(&self, device: &CacheDevice, what: &str, err: &std::io::Error) {
        device.counters.io_errors.fetch_add(1, Ordering::Relaxed);
        self.fault(device, format!("{what} failed: {err}"));
    }

    fn new_device_guid(&self) -> u64 {
        // Zero is reserved so a zeroed header can never match a device.
        (0..4).map(|_| self.guid_rng.next_u64()).find(|g| *g != 0).unwrap_or(1)
    }
}

/// The L2ARC. Cloning shares the same cache.
#[derive(Clone)]
pub struct L2Arc {
    shared: Arc<Shared>,
}

impl L2Arc {
    /// An L2ARC with no devices yet. `seed` drives device-guid generation (inject entropy in
    /// production, a constant in tests).
    pub fn new(
        config: L2ArcConfig,
        pool_guid: u128,
        clock: Arc<dyn Clock>,
        seed: u64,
    ) -> Result<Self, L2Error> {
        config.validate()?;
        let now_ms = clock.mono_ms();
        let writer = WriterState::new(config.write_max_bytes_per_s, now_ms);
        Ok(Self {
            shared: Arc::new(Shared {
                config,
                pool_guid,
                clock,
                guid_rng: Rng::new(seed),
                next_device_id: AtomicU32::new(0),
                devices: RwLock::new(Vec::new()),
                writer: Mutex::new(writer),
                counters: L2Counters::default(),
            }),
        })
    }

    /// An L2ARC over cache devices formatted earlier (an import): each is opened and its
    /// index rebuilt in the background. A device that cannot be opened is reported, not
    /// fatal: the pool imports without it and its blocks are read from the store.
    pub fn open(
        config: L2ArcConfig,
        pool_guid: u128,
        clock: Arc<dyn Clock>,
        seed: u64,
        paths: &[PathBuf],
    ) -> Result<(Self, Vec<(PathBuf, L2Error)>), L2Error> {
        let l2 = Self::new(config, pool_guid, clock, seed)?;
        let failures = paths
            .iter()
            .filter_map(|path| l2.open_device(path).err().map(|err| (path.clone(), err)))
            .collect();
        Ok((l2, failures))
    }

    /// Formats `path` as a new cache device of this pool (destroying what it cached) and puts
    /// it in service. For a regular file, `size_bytes` creates or resizes it; `None` uses the
    /// current size (a block device always uses its own size).
    pub fn add_device(&self, path: &Path, size_bytes: Option<u64>) -> Result<DeviceId, L2Error> {
        self.reject_duplicate(path)?;
        let id = self.shared.next_device_id.fetch_add(1, Ordering::Relaxed);
        self.format_device(id, path, size_bytes)
    }

    fn format_device(
        &self,
        id: DeviceId,
        path: &Path,
        size_bytes: Option<u64>,
    ) -> Result<DeviceId, L2Error> {
        let guid = self.shared.new_device_guid();
        let config = &self.shared.config;
        let device = CacheDevice::format(id, path, size_bytes, self.shared.pool_guid, guid, |c| {
            config.log_block_bytes_for(c)
        })?;
        tracing::info!(path = %path.display(), slots = device.slot_count(), log_block_bytes = device.block_bytes(), "cache device added");
        self.shared.devices.write().push(Arc::new(device));
        Ok(id)
    }

    /// Opens a cache device formatted earlier for this pool and rebuilds its index in the
    /// background (see [`L2Stats::rebuild`]). Until then its blocks miss. A device of this pool
    /// in the previous layout (format version 1) cannot be indexed: it is formatted again and
    /// starts empty (a cold cache); its blocks are read from the store.
    pub fn open_device(&self, path: &Path) -> Result<DeviceId, L2Error> {
        self.reject_duplicate(path)?;
        let id = self.shared.next_device_id.fetch_add(1, Ordering::Relaxed);
        let device = match CacheDevice::open_existing(id, path, self.shared.pool_guid) {
            Ok(device) => Arc::new(device),
            Err(err @ L2Error::OldFormat { .. }) => {
                tracing::warn!(%err, "formatting it again as an empty cache device");
                return self.format_device(id, path, None);
            }
            Err(err) => return Err(err),
        };
        self.shared.devices.write().push(Arc::clone(&device));
        rebuild::spawn_rebuild(Arc::clone(&self.shared), device);
        Ok(id)
    }

    /// Takes a device out of service for good and forgets its entries.
    pub fn remove_device(&self, id: DeviceId) -> Result<(), L2Error> {
        let device = {
            let mut devices = self.shared.devices.write();
            let pos = devices.iter().position(|d| d.id == id).ok_or(L2Error::UnknownDevice(id))?;
            devices.remove(pos)
        };
        device.mark_removed();
        device.index.write().clear();
        Ok(())
    }

    fn reject_duplicate(&self, path: &Path) -> Result<(), L2Error> {
        let wanted = canonical(path);
        let devices = self.shared.devices.read();
        if devices.iter().any(|d| canonical(&d.path) == wanted) {
            return Err(L2Error::DuplicateDevice { path: path.to_path_buf() });
        }
        Ok(())
    }

    /// Reads a cached block of `len_bytes` (the block as stored, from its pointer). Returns it
    /// only if its xxh3-64 is `expected_checksum`; anything else is a miss.
    pub fn get(&self, key: &BlockKey, len_bytes: u32, expected_checksum: u64) -> Option<Bytes> {
        reader::get(&self.shared, key, len_bytes, expected_checksum)
    }

    /// The places a block of `len_bytes` may be cached, for a caller that reads them with its
    /// own I/O: read each ([`PlannedRead::fd`], `offset_bytes`, `len_bytes`) into its
    /// [`PlannedRead::buffer`] and pass the result to [`Self::finish_read`] until one returns
    /// the block; if none does, pass the tried ones to [`Self::missed`]. [`Self::get`] does the
    /// same with `pread`.
    pub fn plan_read(&self, key: &BlockKey, len_bytes: u32) -> Vec<PlannedRead> {
        reader::plan(&self.shared, key, len_bytes)
    }

    /// Checks the result of reading `plan` (the buffer and the bytes read): the block if it is
    /// the one the caller expects (counted as a hit), `None` otherwise.
    pub fn finish_read(
        &self,
        len_bytes: u32,
        expected_checksum: u64,
        plan: &PlannedRead,
        read: std::io::Result<(ReadBuf, usize)>,
    ) -> Option<Bytes> {
        reader::finish(&self.shared, len_bytes, expected_checksum, plan, read)
    }

    /// No planned read gave the block: counts the miss and drops the entries among `tried`
    /// that held damaged bytes of `key` (reads their log blocks' tables; call it off the async
    /// runtime's threads).
    pub fn missed(&self, key: &BlockKey, len_bytes: u32, tried: &[PlannedRead]) {
        reader::missed(&self.shared, key, len_bytes, tried)
    }

    /// Whether the block may be cached, by index only: a few bits of each key are kept, so it
    /// is rarely true for a block that is not (and the bytes may still fail verification).
    pub fn contains(&self, key: &BlockKey) -> bool {
        self.shared.indexed(key)
    }

    /// Forgets a block (for example one that failed verification above). Returns whether it
    /// was indexed. Reads the entry's log-block table to tell it from other keys' entries.
    pub fn remove(&self, key: &BlockKey) -> bool {
        reader::remove(&self.shared, key)
    }

    /// One round of the writer: takes what the rate cap allows from `feed` into the current
    /// log block and writes blocks that are full or older than `flush_interval_ms`.
    pub fn write_tick(&self, feed: &EvictionFeed) -> WriteTickReport {
        writer::write_tick(&self.shared, feed)
    }

    /// Writes the current log block now (it stays open for more entries).
    pub fn flush(&self) -> WriteTickReport {
        writer::flush_now(&self.shared)
    }

    /// Writes the current log block and syncs every device (call at export).
    pub fn sync(&self) -> WriteTickReport {
        writer::sync(&self.shared)
    }

    /// Checks every device file is still there, whole and the same; faults those that are
    /// not and reopens faulted ones whose label is valid again. The writer does this every
    /// `health_check_interval_ms`.
    pub fn check_devices(&self) {
        health::check_devices(&self.shared);
    }

    /// Starts a thread that runs [`Self::write_tick`] every `tick_interval` until the handle
    /// is stopped or dropped.
    pub fn spawn_writer(&self, feed: Arc<EvictionFeed>, tick_interval: Duration) -> WriterHandle {
        WriterHandle::spawn(self.clone(), feed, tick_interval)
    }

    pub fn stats(&self) -> L2Stats {
        let c = &self.shared.counters;
        let devices: Vec<_> = self.shared.devices.read().iter().map(|d| d.stats()).collect();
        let sum = |f: fn(&stats::DeviceStats) -> u64| devices.iter().map(f).sum::<u64>();
        let rebuild = RebuildStats {
            entries: sum(|d| d.rebuild.entries),
            bytes: sum(|d| d.rebuild.bytes),
            blocks_skipped: sum(|d| d.rebuild.blocks_skipped),
            slots_scanned: sum(|d| d.rebuild.slots_scanned),
            slots_total: sum(|d| d.rebuild.slots_total),
            done: devices.iter().all(|d| d.rebuild.done),
        };
        L2Stats {
            hits: load(&c.hits),
            misses: load(&c.misses),
            size_bytes: sum(|d| d.size_bytes),
            entries: sum(|d| d.entries),
            index_bytes: sum(|d| d.index_bytes),
            bytes_written: sum(|d| d.bytes_written),
            bytes_read: sum(|d| d.bytes_read),
            checksum_errors: sum(|d| d.checksum_errors),
            io_errors: sum(|d| d.io_errors),
            feed_entries: load(&c.feed_entries),
            feed_bytes: load(&c.feed_bytes),
            skipped_present: load(&c.skipped_present),
            skipped_too_large: load(&c.skipped_too_large),
            lost_unwritten: load(&c.lost_unwritten),
            rebuild,
            devices,
        }
    }
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}
