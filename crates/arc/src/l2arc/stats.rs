//! L2ARC counters and snapshots.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::DeviceId;

/// Whether a cache device serves reads and takes writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum DeviceState {
    /// Opened with existing contents; its index is being rebuilt. Takes no writes yet.
    Rebuilding,
    /// In service.
    Online,
    /// Failed an I/O, vanished, shrank or was replaced; out of service, entries dropped.
    Faulted,
}

/// Results of rebuilding the index from log-block headers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RebuildStats {
    pub entries: u64,
    pub bytes: u64,
    /// Log blocks whose metadata was damaged (torn or corrupt); their entries are lost.
    pub blocks_skipped: u64,
    pub slots_scanned: u64,
    pub slots_total: u64,
    pub done: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DeviceStats {
    pub id: DeviceId,
    pub path: PathBuf,
    pub device_guid: u64,
    pub state: DeviceState,
    pub fault_reason: Option<String>,
    /// Blocks indexed on this device and their data bytes.
    pub entries: u64,
    pub size_bytes: u64,
    /// Memory of this device's index (table, per-slot counters and generations), fixed when
    /// the device is opened: ~0.96 GiB per TiB of device.
    pub index_bytes: u64,
    /// Bits of one index entry (tag, slot, place).
    pub index_entry_bits: u32,
    /// Blocks written to the device that its full index could not take.
    pub index_full_drops: u64,
    pub capacity_bytes: u64,
    /// Reads bypass the page cache (O_DIRECT); false where the file system refuses it.
    pub direct_reads: bool,
    pub log_block_bytes: u32,
    pub slot_count: u32,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub log_blocks_written: u64,
    pub io_errors: u64,
    pub checksum_errors: u64,
    pub rebuild: RebuildStats,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct L2Stats {
    pub hits: u64,
    pub misses: u64,
    /// Data bytes of the blocks currently indexed.
    pub size_bytes: u64,
    pub entries: u64,
    /// Memory of the devices' indexes (summed `DeviceStats::index_bytes`).
    pub index_bytes: u64,
    /// Bytes written to cache devices (data and metadata).
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub checksum_errors: u64,
    pub io_errors: u64,
    /// Entries and data bytes taken from the eviction feed.
    pub feed_entries: u64,
    pub feed_bytes: u64,
    /// Feed entries skipped because the block was already cached.
    pub skipped_present: u64,
    /// Feed entries skipped because they do not fit in one log block.
    pub skipped_too_large: u64,
    /// Feed entries lost because a device failed or left before their block was written.
    pub lost_unwritten: u64,
    /// Summed over devices; `done` when every device has finished.
    pub rebuild: RebuildStats,
    pub devices: Vec<DeviceStats>,
}

/// Counters shared by all devices.
#[derive(Debug, Default)]
pub(crate) struct L2Counters {
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
    pub(crate) feed_entries: AtomicU64,
    pub(crate) feed_bytes: AtomicU64,
    pub(crate) skipped_present: AtomicU64,
    pub(crate) skipped_too_large: AtomicU64,
    pub(crate) lost_unwritten: AtomicU64,
}

/// Per-device counters.
#[derive(Debug, Default)]
pub(crate) struct DeviceCounters {
    pub(crate) bytes_written: AtomicU64,
    pub(crate) bytes_read: AtomicU64,
    pub(crate) log_blocks_written: AtomicU64,
    pub(crate) io_errors: AtomicU64,
    pub(crate) checksum_errors: AtomicU64,
}

/// Rebuild progress of one device, readable while the rebuild runs.
#[derive(Debug, Default)]
pub(crate) struct RebuildProgress {
    pub(crate) entries: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) blocks_skipped: AtomicU64,
    pub(crate) slots_scanned: AtomicU64,
    pub(crate) done: AtomicBool,
}

impl RebuildProgress {
    pub(crate) fn snapshot(&self, slots_total: u64) -> RebuildStats {
        RebuildStats {
            entries: self.entries.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            blocks_skipped: self.blocks_skipped.load(Ordering::Relaxed),
            slots_scanned: self.slots_scanned.load(Ordering::Relaxed),
            slots_total,
            done: self.done.load(Ordering::Acquire),
        }
    }
}

pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

pub(crate) fn load(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}
