//! What the pool has done since import, for `status`, `iostat` and the metrics: txgs, uploads,
//! store reads, throttling, readahead, compaction and deletes. Relaxed atomics: each counter is
//! exact, a status shows them a few nanoseconds apart.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub(crate) struct Counters {
    txgs: AtomicU64,
    txg_dirty_bytes: AtomicU64,
    txg_sync_us_total: AtomicU64,
    segments: AtomicU64,
    segment_bytes: AtomicU64,
    store_read_bytes: AtomicU64,
    checksum_errors: AtomicU64,
    throttle_delays: AtomicU64,
    throttle_delay_us: AtomicU64,
    stalls: AtomicU64,
    readahead_blocks: AtomicU64,
    compacted_segments: AtomicU64,
    deleted_segments: AtomicU64,
    orphans_deleted: AtomicU64,
    /// Reads waiting now for a store that does not answer (failmode=wait): a gauge.
    reads_waiting: AtomicU64,
    /// Reads that waited through an outage, since import.
    reads_waited: AtomicU64,
}

impl Counters {
    pub fn record_txg(&self, dirty_bytes: u64, us: u64) {
        self.txgs.fetch_add(1, Ordering::Relaxed);
        self.txg_dirty_bytes.fetch_add(dirty_bytes, Ordering::Relaxed);
        self.txg_sync_us_total.fetch_add(us, Ordering::Relaxed);
    }
    pub fn add_segment(&self, bytes: u64) {
        self.segments.fetch_add(1, Ordering::Relaxed);
        self.segment_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    pub fn add_store_read(&self, bytes: u64) {
        self.store_read_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    pub fn add_checksum_error(&self) {
        self.checksum_errors.fetch_add(1, Ordering::Relaxed);
    }
    pub fn add_throttle_delay(&self, us: u64) {
        self.throttle_delays.fetch_add(1, Ordering::Relaxed);
        self.throttle_delay_us.fetch_add(us, Ordering::Relaxed);
    }
    pub fn add_stall(&self) {
        self.stalls.fetch_add(1, Ordering::Relaxed);
    }
    pub fn add_readahead(&self, blocks: u64) {
        self.readahead_blocks.fetch_add(blocks, Ordering::Relaxed);
    }
    pub fn add_compacted(&self) {
        self.compacted_segments.fetch_add(1, Ordering::Relaxed);
    }
    pub fn add_deleted(&self) {
        self.deleted_segments.fetch_add(1, Ordering::Relaxed);
    }
    pub fn add_orphan_deleted(&self) {
        self.orphans_deleted.fetch_add(1, Ordering::Relaxed);
    }
    /// A read starts waiting for the store; it stops when the guard drops.
    pub fn read_waiting(&self) -> ReadWaiting<'_> {
        self.reads_waiting.fetch_add(1, Ordering::Relaxed);
        self.reads_waited.fetch_add(1, Ordering::Relaxed);
        ReadWaiting(&self.reads_waiting)
    }

    pub fn snapshot(&self) -> CountersSnapshot {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CountersSnapshot {
            txgs: l(&self.txgs),
            txg_sync_us_total: l(&self.txg_sync_us_total),
            segments: l(&self.segments),
            segment_bytes: l(&self.segment_bytes),
            checksum_errors: l(&self.checksum_errors),
            throttle_delays: l(&self.throttle_delays),
            stalls: l(&self.stalls),
            readahead_blocks: l(&self.readahead_blocks),
            compacted_segments: l(&self.compacted_segments),
            deleted_segments: l(&self.deleted_segments),
            orphans_deleted: l(&self.orphans_deleted),
            reads_waiting: l(&self.reads_waiting),
            reads_waited: l(&self.reads_waited),
        }
    }
}

/// The counters at one moment (what `status` shows).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CountersSnapshot {
    pub txgs: u64,
    pub txg_sync_us_total: u64,
    pub segments: u64,
    pub segment_bytes: u64,
    pub checksum_errors: u64,
    pub throttle_delays: u64,
    pub stalls: u64,
    pub readahead_blocks: u64,
    pub compacted_segments: u64,
    pub deleted_segments: u64,
    pub orphans_deleted: u64,
    pub reads_waiting: u64,
    pub reads_waited: u64,
}

/// One read counted in `reads_waiting` while it lives (also when the read is dropped).
pub(crate) struct ReadWaiting<'a>(&'a AtomicU64);

impl Drop for ReadWaiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
