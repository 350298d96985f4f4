//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use fardisk_slog::{
    CommitReceipt, FormatOptions, IntentLog, LogError, LogRecord, MemProvider, OpenOptions,
    RecordKind, Replay, VdevConfig, VdevSpec,
};

pub const POOL: &str = "tank";
pub const POOL_GUID: u128 = 0x5eed_0000_0000_0000_0000_0000_0000_0001;

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

pub fn path(name: &str) -> PathBuf {
    PathBuf::from(format!("/dev/mem/{name}"))
}

/// Creates in-memory devices of `device_bytes` for every leg, then formats them.
pub fn format_mem(
    provider: &MemProvider,
    spec: &VdevSpec,
    device_bytes: u64,
    seed: u64,
) -> VdevConfig {
    for leg in spec.legs() {
        provider.add(leg, device_bytes);
    }
    let opts = FormatOptions::new(Arc::new(provider.clone()), seed);
    IntentLog::format(POOL, POOL_GUID, spec, &opts).expect("format")
}

pub fn open_opts(provider: &MemProvider) -> OpenOptions {
    OpenOptions::new(Arc::new(provider.clone()))
}

pub fn open_mem(provider: &MemProvider, configs: &[VdevConfig]) -> IntentLog {
    IntentLog::open(POOL, POOL_GUID, configs, &open_opts(provider)).expect("open")
}

/// A record identified by `id` (stored as the offset); writes carry `len` data bytes.
pub fn record(txg: u64, id: u64, len: usize) -> LogRecord {
    let kind = if len == 0 { RecordKind::Trim } else { RecordKind::Write };
    let data: Vec<u8> =
        (0..len).map(|i| (id as usize).wrapping_mul(31).wrapping_add(i) as u8).collect();
    LogRecord {
        txg,
        volume_id: (id % 3) as u32,
        kind,
        offset_bytes: id * 4096,
        length_bytes: len.max(512) as u32,
        data: Bytes::from(data),
    }
    .fix_length()
}

trait FixLength {
    fn fix_length(self) -> LogRecord;
}

impl FixLength for LogRecord {
    fn fix_length(mut self) -> LogRecord {
        if self.kind == RecordKind::Write {
            self.length_bytes = self.data.len() as u32;
        }
        self
    }
}

/// Commits every batch concurrently and returns the results in input order.
pub async fn commit_all(
    log: &Arc<IntentLog>,
    batches: Vec<Vec<LogRecord>>,
) -> Vec<Result<CommitReceipt, LogError>> {
    let handles: Vec<_> = batches
        .into_iter()
        .map(|batch| {
            let log = Arc::clone(log);
            tokio::spawn(async move { log.commit(batch).await })
        })
        .collect();
    let mut results = Vec::with_capacity(handles.len());
    for handle in handles {
        results.push(handle.await.expect("commit task"));
    }
    results
}

/// `log.replay(after_txg)`, checked against `replay_stream`: the stream an import uses must
/// hand out the same records in the same order and end the same way, in every case a test
/// builds (crash images, damaged and missing legs, gaps, several vdevs).
pub fn replay_checked(log: &IntentLog, after_txg: u64) -> Result<Replay, LogError> {
    let replay = log.replay(after_txg)?;
    let mut stream = log.replay_stream(after_txg)?;
    let mut streamed = Vec::new();
    // Bounded by the records the log holds: the stream ends at the end of its prefix.
    while let Some(r) = stream.next_record() {
        streamed.push(r);
    }
    assert_eq!(streamed, replay.records, "replay_stream hands out what replay returns");
    let end = stream.end();
    assert_eq!(
        (end.start_seq, end.end_seq, end.gap_at_seq, end.txg_max),
        (replay.start_seq, replay.end_seq, replay.gap_at_seq, replay.txg_max),
        "replay_stream ends where replay does"
    );
    Ok(replay)
}

/// Polls `condition` every millisecond until it holds; fails the test after 30 s of real time
/// (threads of the log answer in real time, whatever clock the log was given).
#[allow(clippy::disallowed_methods)]
pub fn wait_until(what: &str, condition: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !condition() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
