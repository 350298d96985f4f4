//! The intent log as the pool uses it (ZFS's zil.c role): every acknowledged write leaves a record
//! in memory; a sync request commits the records to the log devices (group commit happens in
//! `fardisk-slog`) and returns only when every write acknowledged before it is durable. Without a
//! healthy log, a sync request waits for a txg to be published in the store instead
//! (request.rs, through the syncer). Replaying the log at import is the import's (open/replay.rs).

mod request;

pub(super) use request::sync_request;

use fardisk_slog::{IntentLog, LogRecord, RecordKind};
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use tokio::sync::Notify;

/// Writes at least this large skip the log under `logbias=throughput`; a sync request then waits
/// for their txg to reach the store instead (they travel once, to the store).
pub const THROUGHPUT_WRITE_BYTES_MIN: usize = 128 << 10;
/// What a pending record costs in memory besides its data (the record itself in the Vec).
const RECORD_OVERHEAD_BYTES: u64 = 64;

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
        st.unlogged_txg = st.unlogged_txg.max(open_txg);
        self.log.write().take()
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
