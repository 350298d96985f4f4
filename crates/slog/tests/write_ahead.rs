//! Records written ahead of a flush (`IntentLog::write_ahead`): written to every leg without a
//! flush, made durable by the next commit, which then costs a flush alone.

mod common;

use std::sync::Arc;

use common::*;
use fardisk_slog::{MemProvider, VdevConfig, VdevSpec};

fn single(provider: &MemProvider, seed: u64) -> (Vec<VdevConfig>, std::path::PathBuf) {
    let leg = path(&format!("wa{seed}"));
    let config = format_mem(provider, &VdevSpec::Single(leg.clone()), 16384 + 256 * 1024, seed);
    (vec![config], leg)
}

#[test]
fn a_write_ahead_reaches_the_device_unflushed_and_the_next_commit_only_flushes() {
    let rt = runtime();
    let provider = MemProvider::new();
    let (configs, leg) = single(&provider, 1);
    let log = Arc::new(open_mem(&provider, &configs));
    let device = provider.device(&leg).expect("device");
    let flushes_before = device.flush_count();

    let written = rt
        .block_on(
            log.write_ahead(vec![record(5, 1, 4096)]).expect("queued").expect("a waiter").written(),
        )
        .expect("written");
    assert_eq!(written.record_count, 1);
    let stats = log.stats();
    assert_eq!((stats.device_writes, stats.blocks_written_ahead), (1, 1));
    assert_eq!(device.flush_count(), flushes_before, "a write ahead is not flushed");
    assert!(device.pending_write_count() > 0, "the block is on the device, not yet durable");
    // A power cut now may lose it: the durable image does not have it.
    let lost = MemProvider::new();
    lost.insert(fardisk_slog::CrashDevice::from_image(leg.clone(), device.durable_image()));
    let replay = replay_checked(&open_mem(&lost, &configs), 0).expect("replay");
    assert!(replay.records.is_empty(), "unflushed, not durable: {:?}", replay.records);

    // The commit that follows has nothing to write: it flushes, and the record is durable.
    let receipt = rt.block_on(log.commit(Vec::new())).expect("commit");
    assert_eq!(receipt.record_count, 0);
    let stats = log.stats();
    assert_eq!(stats.device_writes, 1, "no second device write");
    assert_eq!(stats.flushes_without_write, 1);
    assert_eq!(device.flush_count(), flushes_before + 1);
    assert_eq!(device.pending_write_count(), 0);
    let after = MemProvider::new();
    after.insert(fardisk_slog::CrashDevice::from_image(leg.clone(), device.durable_image()));
    let replay = replay_checked(&open_mem(&after, &configs), 0).expect("replay");
    assert_eq!(replay.records.len(), 1);
    assert_eq!(replay.records[0].record, record(5, 1, 4096));

    // With nothing written ahead, an empty commit touches no device, as before.
    rt.block_on(log.commit(Vec::new())).expect("commit");
    assert_eq!(device.flush_count(), flushes_before + 1);
    assert_eq!(log.stats().flushes_without_write, 1);
}

#[test]
fn writes_ahead_queued_while_the_writer_is_busy_become_one_waiter() {
    let rt = runtime();
    let provider = MemProvider::new();
    let (configs, leg) = single(&provider, 4);
    let log = Arc::new(open_mem(&provider, &configs));
    let device = provider.device(&leg).expect("device");
    // Hold the writer inside a commit's flush: everything queued meanwhile waits its turn.
    device.hold_flushes();
    let commit = {
        let log = Arc::clone(&log);
        rt.spawn(async move { log.commit(vec![record(5, 1, 10)]).await })
    };
    assert!(device.wait_for_blocked_flushes(1, std::time::Duration::from_secs(10)));
    let first = log.write_ahead(vec![record(5, 2, 4096)]).expect("queued");
    let joined: Vec<_> =
        (3..10).map(|id| log.write_ahead(vec![record(5, id, 4096)]).expect("queued")).collect();
    device.release_flushes();
    rt.block_on(commit).expect("task").expect("commit");
    assert!(joined.iter().all(Option::is_none), "they joined the first write ahead");
    let written = rt.block_on(first.expect("a waiter").written()).expect("written");
    assert_eq!(written.record_count, 8);
    let stats = log.stats();
    assert_eq!((stats.device_writes, stats.blocks_written_ahead), (2, 1), "one block for eight");
}

#[test]
fn a_commit_with_records_after_writes_ahead_makes_all_of_them_durable_in_one_flush() {
    let rt = runtime();
    let provider = MemProvider::new();
    let (configs, leg) = single(&provider, 2);
    let log = Arc::new(open_mem(&provider, &configs));
    let device = provider.device(&leg).expect("device");
    let flushes_before = device.flush_count();
    let a = log.write_ahead(vec![record(5, 1, 4096)]).expect("queued").expect("a waiter");
    // Joins `a` when the writer has not taken it yet, else is a waiter of its own.
    let b = log.write_ahead(vec![record(5, 2, 100), record(5, 3, 0)]).expect("queued");
    let receipt = rt.block_on(log.commit(vec![record(5, 4, 4096)])).expect("commit");
    let a = rt.block_on(a.written()).expect("a written");
    match b {
        Some(b) => {
            let b = rt.block_on(b.written()).expect("b written");
            assert_eq!((a.first_seq + 1, b.first_seq + 2), (b.first_seq, receipt.first_seq));
        }
        None => assert_eq!((a.record_count, a.first_seq + 3), (3, receipt.first_seq)),
    }
    assert_eq!(device.flush_count(), flushes_before + 1, "one flush for all three");
    let after = MemProvider::new();
    after.insert(fardisk_slog::CrashDevice::from_image(leg, device.durable_image()));
    let replay = replay_checked(&open_mem(&after, &configs), 0).expect("replay");
    let ids: Vec<u64> = replay.records.iter().map(|r| r.record.offset_bytes / 4096).collect();
    assert_eq!(ids, vec![1, 2, 3, 4], "everything before the commit, in queue order");
}

/// Records the thread of every flush, over in-memory devices.
struct ThreadsOfFlushes {
    inner: MemProvider,
    threads: Arc<parking_lot::Mutex<Vec<std::thread::ThreadId>>>,
}

struct Watched {
    device: Arc<dyn fardisk_slog::LogDevice>,
    threads: Arc<parking_lot::Mutex<Vec<std::thread::ThreadId>>>,
}

impl fardisk_slog::LogDevice for Watched {
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.device.read_at(offset_bytes, buf)
    }
    fn write_at(&self, offset_bytes: u64, buf: &[u8]) -> std::io::Result<()> {
        self.device.write_at(offset_bytes, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.threads.lock().push(std::thread::current().id());
        self.device.flush()
    }
    fn len_bytes(&self) -> u64 {
        self.device.len_bytes()
    }
    fn is_volatile(&self) -> bool {
        false
    }
    fn path(&self) -> &std::path::Path {
        self.device.path()
    }
}

impl fardisk_slog::DeviceProvider for ThreadsOfFlushes {
    fn open(&self, path: &std::path::Path) -> std::io::Result<Arc<dyn fardisk_slog::LogDevice>> {
        let device = self.inner.open(path)?;
        Ok(Arc::new(Watched { device, threads: Arc::clone(&self.threads) }))
    }
    fn create(
        &self,
        path: &std::path::Path,
        size_bytes: u64,
    ) -> std::io::Result<Arc<dyn fardisk_slog::LogDevice>> {
        let device = self.inner.create(path, size_bytes)?;
        Ok(Arc::new(Watched { device, threads: Arc::clone(&self.threads) }))
    }
}

#[test]
fn a_commit_on_an_idle_log_is_written_and_flushed_by_its_caller() {
    let provider = MemProvider::new();
    let (configs, _) = single(&provider, 5);
    let threads = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let watched = ThreadsOfFlushes { inner: provider.clone(), threads: Arc::clone(&threads) };
    let log = fardisk_slog::IntentLog::open(
        POOL,
        POOL_GUID,
        &configs,
        &fardisk_slog::OpenOptions::new(Arc::new(watched)),
    )
    .expect("open");
    assert!(log.wait_idle(std::time::Duration::from_secs(10)));
    threads.lock().clear();
    // A runtime on this thread alone: the commit's future runs here, so a flush on any other
    // thread is the writer thread's.
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    for id in 1..=3 {
        rt.block_on(log.commit(vec![record(5, id, 4096)])).expect("commit");
        assert!(log.wait_idle(std::time::Duration::from_secs(10)));
    }
    let me = std::thread::current().id();
    let flushes = threads.lock().clone();
    assert_eq!(flushes.len(), 3, "one flush per commit: {flushes:?}");
    assert!(flushes.iter().all(|t| *t == me), "flushed on the caller's thread: {flushes:?}");
    assert_eq!(replay_checked(&log, 0).expect("replay").records.len(), 3);
}
