//! The L2ARC writer: drains the ARC eviction feed at a capped rate into the open log block
//! (`open_block.rs`) and writes log blocks out when full or after `flush_interval_ms`.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::device::CacheDevice;
use super::health;
use super::log_block::LOG_ENTRY_BYTES;
use super::open_block::{ensure_open, place, write_out, OpenBlock, Spill};
use super::rate::TokenBucket;
use super::stats::add;
use super::{L2Arc, Shared};
use crate::arc::{EvictionFeed, FeedItem};
use crate::key::BlockKey;

/// Log blocks `flush` may close to place blocks held in the spill (each takes at least one).
const FLUSH_ROUNDS_MAX: usize = 4;

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

pub(crate) struct WriterState {
    bucket: TokenBucket,
    pub(crate) open: Option<OpenBlock>,
    pub(crate) spill: Spill,
    /// The data area of the last closed block, reused by the next one.
    pub(crate) spare_buffer: Vec<u8>,
    pub(crate) round_robin: usize,
    last_health_check_ms: u64,
}

impl WriterState {
    pub(crate) fn new(write_max_bytes_per_s: u64, now_ms: u64) -> Self {
        Self {
            bucket: TokenBucket::new(write_max_bytes_per_s, now_ms),
            open: None,
            spill: Spill::default(),
            spare_buffer: Vec::new(),
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
        if !ensure_open(shared, &mut w, now_ms) {
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

/// Writes the open block now (it stays open for more entries). Blocks held in the spill are
/// placed first, in the next log block if need be.
pub(crate) fn flush_now(shared: &Arc<Shared>) -> WriteTickReport {
    let mut w = shared.writer.lock();
    let mut report = WriteTickReport::default();
    flush_locked(shared, &mut w, &mut report);
    report
}

fn flush_locked(shared: &Shared, w: &mut WriterState, report: &mut WriteTickReport) {
    let now_ms = shared.clock.mono_ms();
    for _ in 0..FLUSH_ROUNDS_MAX {
        if w.spill.is_empty() {
            break;
        }
        write_out(shared, w, true, report);
        if !ensure_open(shared, w, now_ms) {
            let lost = w.spill.discard();
            add(&shared.counters.lost_unwritten, lost);
            break;
        }
    }
    write_out(shared, w, false, report);
}

/// Writes the open block and makes every writable device durable, so a clean export leaves a
/// cache that rebuilds completely at the next import.
pub(crate) fn sync(shared: &Arc<Shared>) -> WriteTickReport {
    let mut w = shared.writer.lock();
    let mut report = WriteTickReport::default();
    flush_locked(shared, &mut w, &mut report);
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
    if len_bytes as u64 > u64::from(open.builder.geometry().largest_entry_bytes()) {
        report.skipped_too_large += 1;
        add(&shared.counters.skipped_too_large, 1);
        return;
    }
    if open.holds(&item.key) || w.spill.contains(&item.key) || shared.indexed(&item.key) {
        report.skipped_present += 1;
        add(&shared.counters.skipped_present, 1);
        return;
    }
    w.bucket.spend(len_bytes as u64 + LOG_ENTRY_BYTES as u64);
    report.entries += 1;
    report.bytes += len_bytes as u64;
    add(&shared.counters.feed_entries, 1);
    add(&shared.counters.feed_bytes, len_bytes as u64);
    place(shared, w, item, now_ms, report);
}

/// A background writer thread; stops (after finishing its round) when stopped or dropped.
pub struct WriterHandle {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
    feed: Arc<EvictionFeed>,
}

impl WriterHandle {
    /// While it runs, the feed does not queue evicted blocks the devices hold already (by the
    /// index; a weak reference, so the feed never keeps the devices open).
    pub(crate) fn spawn(l2: L2Arc, feed: Arc<EvictionFeed>, tick_interval: Duration) -> Self {
        let shared = Arc::downgrade(&l2.shared);
        feed.set_held(Some(Arc::new(move |key: &BlockKey| {
            shared.upgrade().is_some_and(|s| super::reader::indexed(&s, key))
        })));
        let writer_feed = Arc::clone(&feed);
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new().name("l2arc-writer".into()).spawn(move || loop {
            l2.write_tick(&writer_feed);
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
            Ok(handle) => Self { stop, thread: Some(handle), feed },
            Err(err) => {
                tracing::error!(%err, "cannot start the L2ARC writer thread; L2ARC will not fill");
                feed.set_held(None);
                Self { stop, thread: None, feed }
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
        self.feed.set_held(None);
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
