//! The intent log as the pool uses it (ZFS's zil.c role): every acknowledged write leaves a record
//! in memory; a sync request commits the records to the log devices (group commit happens in
//! `fardisk-slog`) and returns only when every write acknowledged before it is durable. Without a
//! healthy log, a sync request waits for a txg to be published in the store instead
//! (request.rs, through the syncer). Replaying the log at import is the import's (open/replay.rs).
//!
//! With `log_write_ahead=on` (off by default: props.rs says why) a write also hands the
//! pending records to the log at once
//! (`write_ahead`), to be written to the devices without a flush while the client goes on; the
//! sync request that follows then finds them written and pays for the flush alone. Only while
//! sync requests come (one in the last `WRITE_AHEAD_AFTER_SYNC_US`): a client that never
//! flushes would only pay for log writes nobody waits for (NBD randrw at depth 64 without
//! flushes: 53 % of a local file with every record written ahead, 61 % without). Records
//! written ahead are never counted durable by themselves: the sync request waits for the answer
//! of every write ahead queued before its commit, and one that failed sends it to the txg.

mod request;

pub(super) use request::sync_request;

use fardisk_slog::{IntentLog, LogRecord, RecordKind, WrittenAhead};
use parking_lot::Mutex;
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// Writes at least this large skip the log under `logbias=throughput`; a sync request then waits
/// for their txg to reach the store instead (they travel once, to the store).
pub const THROUGHPUT_WRITE_BYTES_MIN: usize = 128 << 10;
/// What a pending record costs in memory besides its data (the record itself in the Vec).
const RECORD_OVERHEAD_BYTES: u64 = 64;
/// Writes ahead handed to the log and not yet answered, at most. A write ahead joins the one
/// still queued (`IntentLog::write_ahead`), so normally there are at most two: one being
/// written, one filling up behind it. Past the bound (a log device that stopped answering)
/// records wait in `pending` for the next write ahead or sync request.
const WRITES_AHEAD_IN_FLIGHT_MAX: usize = 16;
/// Writes are written ahead only this soon after a sync request: a database flushes every few
/// milliseconds while it commits, and a client that has not flushed for this long is streaming
/// writes its next flush may be far from.
const WRITE_AHEAD_AFTER_SYNC_US: u64 = 100_000;

/// Records handed to the log by `write_ahead` whose answer nobody has looked at yet.
struct Ahead {
    written: WrittenAhead,
    /// The newest txg among its records: what must reach the store if they fail.
    newest_txg: u64,
}

impl std::fmt::Debug for Ahead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ahead").field("newest_txg", &self.newest_txg).finish()
    }
}

/// Opens log devices: files normally; the simulation passes crash-able in-memory devices so a
/// power cut, a torn write or a failing leg replays exactly from a seed.
#[derive(Clone)]
pub struct LogDevices(pub Arc<dyn fardisk_slog::DeviceProvider>);

impl Default for LogDevices {
    fn default() -> Self {
        LogDevices(Arc::new(fardisk_slog::FileProvider::default()))
    }
}

impl std::fmt::Debug for LogDevices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogDevices")
    }
}

impl LogDevices {
    /// False only when the device is absent; a device that exists but fails to open is the
    /// log's to report (it opens DEGRADED without that leg).
    pub(crate) fn exists(&self, path: &std::path::Path) -> bool {
        !matches!(self.0.open(path), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

#[derive(Debug, Default)]
struct State {
    pending: Vec<LogRecord>,
    /// Memory `pending` holds: its records' data plus `RECORD_OVERHEAD_BYTES` each.
    pending_bytes: u64,
    /// Newest txg holding a write that was not logged (logbias=throughput): sync requests wait
    /// for it to be published.
    unlogged_txg: u64,
    next_ticket: u64,
    /// Every ticket up to this one has finished (committed or covered by a txg).
    done_through: u64,
    done: BTreeSet<u64>,
    /// Newest txg holding records whose commit and txg fallback both failed: they are not
    /// durable, so no sync request may return Ok until that txg is published.
    failed_txg: u64,
    /// Writes ahead in the log's queue, oldest first (at most `WRITES_AHEAD_IN_FLIGHT_MAX`).
    ahead: VecDeque<Ahead>,
}

/// The intent log's side of the pool.
///
/// Lock order (the pool's: pool/mod.rs): `order` (async) -> `state` -> `log`. The txg lock may be
/// held when `state` or `log` is taken (a write records itself under it), never the reverse.
#[derive(Default)]
pub(crate) struct Intent {
    /// Swapped only by `fardisk add/remove` (pool/vdevs.rs); read on every write.
    log: parking_lot::RwLock<Option<Arc<IntentLog>>>,
    /// Where a log added at run time opens its devices.
    pub devices: LogDevices,
    state: Mutex<State>,
    /// Held from taking the pending records until they are queued in the log, so records enter
    /// the log (whose replay applies them by sequence) in the order their writes were applied.
    /// Without it two sync requests could queue in the opposite order from the one they took
    /// their records in, and replay would put an older write of a block over a newer one that a
    /// flush had acknowledged. FIFO, so sync requests also queue in arrival order.
    order: tokio::sync::Mutex<()>,
    #[cfg(test)]
    pub(crate) pause_after_take: Mutex<Option<Arc<tokio::sync::Semaphore>>>,
    finished: Notify,
    /// When the newest sync request arrived (the pool's monotonic clock, µs; 0: none yet).
    last_sync_request_us: AtomicU64,
    pub fallbacks: AtomicU64,
    pub sync_requests: AtomicU64,
}

impl std::fmt::Debug for Intent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Intent").field("log", &self.log.read().is_some()).finish()
    }
}

impl Intent {
    pub fn new(log: Option<Arc<IntentLog>>, devices: LogDevices) -> Intent {
        Intent { log: parking_lot::RwLock::new(log), devices, ..Default::default() }
    }

    pub fn log(&self) -> Option<Arc<IntentLog>> {
        self.log.read().clone()
    }

    /// Starts logging into `log` (the pool had none). Call with the txg lock held: writes
    /// acknowledged before this were never recorded, so the next sync requests wait for
    /// `open_txg` (which holds them, or a later txg does) to reach the store.
    pub fn attach(&self, log: Arc<IntentLog>, open_txg: u64) {
        let mut st = self.state.lock();
        st.unlogged_txg = st.unlogged_txg.max(open_txg);
        *self.log.write() = Some(log);
    }

    /// Stops logging (the last log vdev is being removed); returns the log that was in use.
    /// Call with the txg lock held. The pending records are dropped, so a sync request that
    /// still holds the log must wait for `open_txg` (which holds their writes) to reach the
    /// store instead; requests that find no log wait for the open writes anyway.
    pub fn detach(&self, open_txg: u64) -> Option<Arc<IntentLog>> {
        let mut st = self.state.lock();
        st.pending.clear();
        st.pending_bytes = 0;
        st.ahead.clear();
        st.unlogged_txg = st.unlogged_txg.max(open_txg);
        self.log.write().take()
    }

    /// Hands the pending records to the log to be written ahead of the next sync request
    /// (`log_write_ahead=on`). Never waits: when a sync request is taking records (it holds
    /// `order`, and records must enter the log in the order their writes were applied) or
    /// `WRITES_AHEAD_IN_FLIGHT_MAX` are queued, the records stay pending for the next call or
    /// the sync request; likewise when no sync request came in the last
    /// `WRITE_AHEAD_AFTER_SYNC_US`. Call without the txg lock.
    pub fn write_ahead(&self, published_txg: u64, now_us: u64) {
        let last_sync_us = self.last_sync_request_us.load(Ordering::Relaxed);
        if last_sync_us == 0 || now_us.saturating_sub(last_sync_us) > WRITE_AHEAD_AFTER_SYNC_US {
            return;
        }
        let Some(log) = self.log() else {
            return;
        };
        let Ok(_order) = self.order.try_lock() else {
            return;
        };
        let mut st = self.state.lock();
        st.reap_ahead();
        if st.pending.is_empty() || st.ahead.len() >= WRITES_AHEAD_IN_FLIGHT_MAX {
            return;
        }
        let records = st.take_pending(published_txg);
        let Some(newest_txg) = records.iter().map(|r| r.txg).max() else {
            return;
        };
        match log.write_ahead(records) {
            Ok(Some(written)) => st.ahead.push_back(Ahead { written, newest_txg }),
            // Joined the newest write ahead, still queued (always the last one here: a sync
            // request takes them all and queues its commit behind, under `order`).
            Ok(None) => match st.ahead.back_mut() {
                Some(last) => last.newest_txg = last.newest_txg.max(newest_txg),
                None => st.unlogged_txg = st.unlogged_txg.max(newest_txg),
            },
            // Not in the log: their txg must reach the store before a sync request returns.
            Err(_) => st.unlogged_txg = st.unlogged_txg.max(newest_txg),
        }
    }

    /// A sync request arrived at `now_us`: writes are written ahead for a while (`write_ahead`).
    pub fn sync_request_arrived(&self, now_us: u64) {
        self.last_sync_request_us.store(now_us.max(1), Ordering::Relaxed);
    }

    /// Records an acknowledged write. Called with the txg lock held, so records are in the same
    /// order as the dirty-set updates they describe. `pending_bytes_max` bounds the memory the
    /// records waiting for a sync request hold (see `push`); returns true when they were given
    /// up, so the caller can start the txg that makes them durable instead.
    pub fn record_write(
        &self,
        txg: u64,
        volume_id: u32,
        offset: u64,
        data: &bytes::Bytes,
        logbias_throughput: bool,
        pending_bytes_max: u64,
    ) -> bool {
        if self.log.read().is_none() {
            return false;
        }
        let mut st = self.state.lock();
        if logbias_throughput && data.len() >= THROUGHPUT_WRITE_BYTES_MIN {
            st.unlogged_txg = st.unlogged_txg.max(txg);
            return false;
        }
        let record = LogRecord {
            txg,
            volume_id,
            kind: RecordKind::Write,
            offset_bytes: offset,
            length_bytes: data.len() as u32,
            data: data.clone(),
        };
        st.push(record, pending_bytes_max)
    }

    /// Records a trim (whole blocks); `pending_bytes_max` as for `record_write`.
    pub fn record_zero(
        &self,
        txg: u64,
        volume_id: u32,
        offset: u64,
        len: u64,
        pending_bytes_max: u64,
    ) -> bool {
        if self.log.read().is_none() {
            return false;
        }
        let mut st = self.state.lock();
        let mut gave_up = false;
        // Bounded: one record per 1 GiB of a huge trim.
        let mut pos = offset;
        while pos < offset + len {
            let n = (offset + len - pos).min(1 << 30);
            let record = LogRecord {
                txg,
                volume_id,
                kind: RecordKind::Trim,
                offset_bytes: pos,
                length_bytes: n as u32,
                data: bytes::Bytes::new(),
            };
            gave_up |= st.push(record, pending_bytes_max);
            pos += n;
        }
        gave_up
    }

    /// Drops records of txgs now in the store and frees their log space.
    pub fn published(&self, txg: u64) {
        {
            let mut st = self.state.lock();
            st.pending.retain(|r| r.txg > txg);
            st.pending_bytes = st.pending.iter().map(record_bytes).sum();
        }
        if let Some(log) = self.log() {
            log.release_through_txg(txg);
        }
    }

    fn finish(&self, ticket: u64) {
        let mut st = self.state.lock();
        st.done.insert(ticket);
        loop {
            let next = st.done_through + 1;
            if !st.done.remove(&next) {
                break;
            }
            st.done_through = next;
        }
        drop(st);
        self.finished.notify_waiters();
    }

    /// Test hook: a sync request that finds a semaphore here waits for one permit after taking
    /// its records and before queueing them (the window where two requests could swap order).
    #[cfg(test)]
    async fn pause_for_test(&self) {
        let pause = self.pause_after_take.lock().take();
        if let Some(sem) = pause {
            let _ = sem.acquire().await.map(|p| p.forget());
        }
    }

    async fn wait_through(&self, ticket: u64) {
        loop {
            let notified = self.finished.notified();
            if self.state.lock().done_through >= ticket {
                return;
            }
            notified.await;
        }
    }
}

fn record_bytes(r: &LogRecord) -> u64 {
    r.data.len() as u64 + RECORD_OVERHEAD_BYTES
}

impl State {
    /// Takes the pending records of txgs not yet published (the others are in the store).
    fn take_pending(&mut self, published_txg: u64) -> Vec<LogRecord> {
        self.pending_bytes = 0;
        std::mem::take(&mut self.pending).into_iter().filter(|r| r.txg > published_txg).collect()
    }

    /// Forgets the writes ahead the log has answered, oldest first; one that failed leaves its
    /// txg for the next sync request to wait for, as records given up do.
    fn reap_ahead(&mut self) {
        while let Some(front) = self.ahead.front_mut() {
            match front.written.try_outcome() {
                None => return,
                Some(Ok(_)) => {}
                Some(Err(_)) => self.unlogged_txg = self.unlogged_txg.max(front.newest_txg),
            }
            self.ahead.pop_front();
        }
    }

    /// Appends a record. Records stay in memory until a sync request commits them or their txg is
    /// published, and the dirty limit does not see them: a write that overwrites a block already
    /// dirty in the open txg (or writes zeros, which become a hole) adds nothing to the dirty data
    /// but a whole record here, so a client rewriting a small region without flushing piles them
    /// up at its write rate for up to a txg_timeout (measured: 3 GiB resident after 20 s of 64 KiB
    /// writes over a 4 MiB region at 490 MB/s, with a dirty limit of 32 MiB). Past
    /// `pending_bytes_max` the records are given up, as logbias=throughput gives up large writes:
    /// the next sync request waits for their txg to reach the store instead (their writes are all
    /// in the open or the syncing txg). Returns true then.
    fn push(&mut self, record: LogRecord, pending_bytes_max: u64) -> bool {
        self.pending_bytes += record_bytes(&record);
        let txg = record.txg;
        self.pending.push(record);
        if self.pending_bytes <= pending_bytes_max {
            return false;
        }
        let newest = self.pending.iter().map(|r| r.txg).max().unwrap_or(txg);
        self.unlogged_txg = self.unlogged_txg.max(newest);
        self.pending = Vec::new();
        self.pending_bytes = 0;
        true
    }
}

#[cfg(test)]
#[path = "intent_tests.rs"]
mod order_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn write(txg: u64, len: usize) -> LogRecord {
        LogRecord {
            txg,
            volume_id: 1,
            kind: RecordKind::Write,
            offset_bytes: 0,
            length_bytes: len as u32,
            data: bytes::Bytes::from(vec![7u8; len]),
        }
    }

    #[test]
    fn pending_records_past_the_limit_are_given_up_to_their_txg() {
        let mut st = State::default();
        // Rewrites of one block: each is a record, whatever the dirty data says.
        for _ in 0..3 {
            assert!(!st.push(write(5, 4096), 3 * (4096 + RECORD_OVERHEAD_BYTES)));
        }
        assert_eq!(st.pending.len(), 3);
        assert_eq!(st.pending_bytes, 3 * (4096 + RECORD_OVERHEAD_BYTES));
        assert!(
            st.push(write(6, 4096), 3 * (4096 + RECORD_OVERHEAD_BYTES)),
            "the fourth passes the limit"
        );
        assert!(st.pending.is_empty());
        assert_eq!(st.pending_bytes, 0);
        assert_eq!(st.unlogged_txg, 6, "the next sync request waits for the newest txg given up");
        assert!(!st.push(write(6, 4096), 3 * (4096 + RECORD_OVERHEAD_BYTES)), "logging goes on");
        assert_eq!(st.unlogged_txg, 6);
    }
}
