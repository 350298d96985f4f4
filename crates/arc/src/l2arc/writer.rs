//! The L2ARC writer: drains the ARC eviction feed at a capped rate into the current log block
//! and writes log blocks out when full or after `flush_interval_ms`.
//!
//! A log block is built in memory. Each write-out puts the new data (which grows down from the
//! end of the block) and then the header plus entry table (which grow up from the start) into
//! the block's slot; only after both writes succeed are the new entries indexed. A partly
//! filled block stays open and is extended in place by later write-outs, so a slow trickle of
//! evictions does not burn a whole slot per flush. Before a slot is reused, its old entries
//! leave the index and its generation is bumped, so no reader can take the new bytes for old.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::device::CacheDevice;
use super::health;
use super::index::Location;
use super::log_block::{encode_meta, LogBlockBuilder, LOG_ENTRY_BYTES};
use super::rate::TokenBucket;
use super::stats::add;
use super::{L2Arc, Shared};
use crate::arc::{EvictionFeed, FeedItem};
use crate::key::BlockKey;

/// A block with less room than this is written out and closed rather than kept open for
/// entries that will hardly ever fit.
const CLOSE_BELOW_ROOM_BYTES: u64 = 512;

/// What one writer round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteTickReport {
    /// Entries and data bytes taken from the feed into log blocks.
    pub entries: u64,
    pub bytes: u64,
    pub skipped_present: u64,
    pub skipped_too_large: u64,
    /// Log-block write-outs (header and table written).
    pub block_writes: u64,
    /// The round stopped because the rate cap was reached.
    pub throttled: bool,
}

struct OpenBlock {
    device: Arc<CacheDevice>,
    slot: u32,
    sequence: u64,
    generation: u64,
    builder: LogBlockBuilder,
    keys: HashSet<BlockKey>,
    written_entries: usize,
    written_data_low: u32,
    unwritten_since_ms: Option<u64>,
}

pub(crate) struct WriterState {
    bucket: TokenBucket,
    open: Option<OpenBlock>,
    round_robin: usize,
    last_health_check_ms: u64,
}

impl WriterState {
    pub(crate) fn new(write_max_bytes_per_s: u64, now_ms: u64) -> Self {
        Self {
            bucket: TokenBucket::new(write_max_bytes_per_s, now_ms),
            open: None,
            round_robin: 0,
            last_health_check_ms: now_ms,
        }
    }
}

pub(crate) fn write_tick(shared: &Arc<Shared>, feed: &EvictionFeed) -> WriteTickReport {
    let now_ms = shared.clock.mono_ms();
    let mut w = shared.writer.lock();
    if now_ms.saturating_sub(w.last_health_check_ms) >= shared.config.health_check_interval_ms {
        w.last_health_check_ms = now_ms;
        health::check_devices(shared);
    }
    w.bucket.refill(now_ms);
    let mut report = WriteTickReport::default();
    // Bounded by what was queued when the round began.
    for _ in 0..feed.len() {
        if !w.bucket.has_tokens() {
            report.throttled = true;
            break;
        }
        if !ensure_open(shared, &mut w) {
            break;
        }
        let Some(item) = feed.pop() else { break };
        take_item(shared, &mut w, item, now_ms, &mut report);
    }
    let due = w
        .open
        .as_ref()
        .and_then(|o| o.unwritten_since_ms)
        .is_some_and(|since| now_ms.saturating_sub(since) >= shared.config.flush_interval_ms);
    if due {
        write_out(shared, &mut w, false, &mut report);
    }
    report
}

pub(crate) fn flush_now(shared: &Arc<Shared>) -> WriteTickReport {
    let mut w = shared.writer.lock();
    let mut report = WriteTickReport::default();
    write_out(shared, &mut w, false, &mut report);
    report
}

/// Writes the open block and makes every writable device durable, so a clean export leaves a
/// cache that rebuilds completely at the next import.
pub(crate) fn sync(shared: &Arc<Shared>) -> WriteTickReport {
    let mut w = shared.writer.lock();
    let mut report = WriteTickReport::default();
    write_out(shared, &mut w, false, &mut report);
    let writable: Vec<Arc<CacheDevice>> =
        shared.devices.read().iter().filter(|d| d.writable()).cloned().collect();
    for device in writable {
        if let Err(err) = device.sync_data() {
            shared.io_error(&device, "sync", &err);
        }
    }
    report
}

fn take_item(
    shared: &Shared,
    w: &mut WriterState,
    item: FeedItem,
    now_ms: u64,
    report: &mut WriteTickReport,
) {
    let Some(open) = w.open.as_ref() else { return };
    let len_bytes = item.data.len();
    if len_bytes as u64 > LogBlockBuilder::capacity_for_one(open.builder.block_bytes()) {
        report.skipped_too_large += 1;
        add(&shared.counters.skipped_too_large, 1);
        return;
    }
    if open.keys.contains(&item.key) || shared.index.lock().contains(&item.key) {
        report.skipped_present += 1;
        add(&shared.counters.skipped_present, 1);
        return;
    }
    if !open.builder.fits(len_bytes) {
        write_out(shared, w, true, report);
        if !ensure_open(shared, w) {
            add(&shared.counters.lost_unwritten, 1);
            return;
        }
    }
    let open = w.open.as_mut().expect("ensured open above");
    open.builder.append(item.key, &item.data);
    open.keys.insert(item.key);
    open.unwritten_since_ms.get_or_insert(now_ms);
    let room_left = open.builder.room_for_next();
    w.bucket.spend(len_bytes as u64 + LOG_ENTRY_BYTES as u64);
    report.entries += 1;
    report.bytes += len_bytes as u64;
    add(&shared.counters.feed_entries, 1);
    add(&shared.counters.feed_bytes, len_bytes as u64);
    if room_left < CLOSE_BELOW_ROOM_BYTES {
        write_out(shared, w, true, report);
    }
}

/// Makes sure a log block is open on a writable device, opening the next slot of the next
/// device round-robin if needed. Returns false when no device can take writes.
fn ensure_open(shared: &Shared, w: &mut WriterState) -> bool {
    if let Some(open) = &w.open {
        if open.device.writable() {
            return true;
        }
        discard_open(shared, w);
    }
    let writable: Vec<Arc<CacheDevice>> =
        shared.devices.read().iter().filter(|d| d.writable()).cloned().collect();
    if writable.is_empty() {
        return false;
    }
    let device = Arc::clone(&writable[w.round_robin % writable.len()]);
    w.round_robin = w.round_robin.wrapping_add(1);
    let (slot, sequence) = {
        let mut cursor = device.cursor.lock();
        let taken = (cursor.next_slot, cursor.next_sequence);
        cursor.next_slot = (cursor.next_slot + 1) % device.slot_count();
        cursor.next_sequence += 1;
        taken
    };
    // Forget the slot's old entries BEFORE any byte of it is overwritten.
    let generation = device.bump_slot_generation(slot);
    shared.index.lock().invalidate_slot(device.id, slot);
    let block_bytes = device.block_bytes();
    w.open = Some(OpenBlock {
        device,
        slot,
        sequence,
        generation,
        builder: LogBlockBuilder::new(block_bytes),
        keys: HashSet::new(),
        written_entries: 0,
        written_data_low: block_bytes,
        unwritten_since_ms: None,
    });
    true
}

fn discard_open(shared: &Shared, w: &mut WriterState) {
    if let Some(open) = w.open.take() {
        let unwritten = open.builder.entries().len() - open.written_entries;
        add(&shared.counters.lost_unwritten, unwritten as u64);
    }
}

/// Writes the open block's new data and its metadata, then indexes the new entries. With
/// `close`, the block is finished and the next entry opens a new slot.
fn write_out(shared: &Shared, w: &mut WriterState, close: bool, report: &mut WriteTickReport) {
    let Some(open) = w.open.as_mut() else { return };
    if open.unwritten_since_ms.is_none() {
        if close {
            w.open = None;
        }
        return;
    }
    if !open.device.writable() {
        discard_open(shared, w);
        return;
    }
    if let Err(err) = write_block(open) {
        let device = Arc::clone(&open.device);
        discard_open(shared, w);
        shared.io_error(&device, "write", &err);
        return;
    }
    index_new_entries(shared, open);
    open.written_entries = open.builder.entries().len();
    open.written_data_low = open.builder.data_low();
    open.unwritten_since_ms = None;
    open.device.counters.log_blocks_written.fetch_add(1, Ordering::Relaxed);
    report.block_writes += 1;
    if close {
        let base = open.device.slot_offset(open.slot);
        open.device.drop_cached(base, u64::from(open.device.block_bytes()));
        w.open = None;
    }
}

fn write_block(open: &OpenBlock) -> std::io::Result<()> {
    let device = &open.device;
    let base = device.slot_offset(open.slot);
    let data_low = open.builder.data_low();
    if data_low < open.written_data_low {
        let data = open.builder.bytes(data_low, open.written_data_low);
        device.write_at(base + u64::from(data_low), data)?;
    }
    let meta =
        encode_meta(&device.place(open.slot), open.sequence, data_low, open.builder.entries());
    device.write_at(base, &meta)
}

fn index_new_entries(shared: &Shared, open: &OpenBlock) {
    let mut index = shared.index.lock();
    // Checked under the index lock: a fault after this point drops what we add.
    if !open.device.readable() {
        return;
    }
    for entry in &open.builder.entries()[open.written_entries..] {
        let loc = Location {
            device: open.device.id,
            slot: open.slot,
            generation: open.generation,
            sequence: open.sequence,
            data_offset: entry.data_offset,
            len_bytes: entry.len_bytes,
            checksum: entry.checksum,
        };
        index.insert(entry.key, loc);
    }
}

/// A background writer thread; stops (after finishing its round) when stopped or dropped.
pub struct WriterHandle {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl WriterHandle {
    pub(crate) fn spawn(l2: L2Arc, feed: Arc<EvictionFeed>, tick_interval: Duration) -> Self {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new().name("l2arc-writer".into()).spawn(move || loop {
            l2.write_tick(&feed);
            let (flag, wake) = &*thread_stop;
            let mut stopped = flag.lock();
            if !*stopped {
                wake.wait_for(&mut stopped, tick_interval);
            }
            if *stopped {
                break;
            }
        });
        match thread {
            Ok(handle) => Self { stop, thread: Some(handle) },
            Err(err) => {
                tracing::error!(%err, "cannot start the L2ARC writer thread; L2ARC will not fill");
                Self { stop, thread: None }
            }
        }
    }

    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let (flag, wake) = &*self.stop;
        *flag.lock() = true;
        wake.notify_all();
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("L2ARC writer thread panicked");
            }
        }
    }
}

impl Drop for WriterHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}
