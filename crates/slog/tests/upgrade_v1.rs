//! A log written by fardisk before log block format version 2 (4 KiB units) replays, and its
//! chain continues in version 2 blocks: `tests/fixtures/log-v1-{a,b}.bin` are the two legs of a
//! mirror formatted and written by the version 1 code (commit e0dbf50) and never released:
//!
//! * format: pool `tank` (`common::POOL_GUID`), 80 KiB files, guid seed 11;
//! * commits: [write 4096 bytes, id 1, txg 5], [write 5 bytes id 2 + trim id 3, txg 5/6],
//!   [write 10,000 bytes, id 4, txg 6] (records as `common::record` makes them).

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::*;
use fardisk_slog::{
    CrashDevice, IntentLog, LogRecord, MemProvider, OpenOptions, VdevConfig, VdevKind,
};

const VDEV_GUID: u64 = 0xc287_f91b_03d9_6643;

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The fixture legs as in-memory devices (512-byte write unit: version 2 blocks shrink).
fn provider_with_v1_log() -> (MemProvider, VdevConfig) {
    let provider = MemProvider::new();
    let legs = vec![path("log-v1-a"), path("log-v1-b")];
    provider.insert(CrashDevice::from_image(&legs[0], fixture("log-v1-a.bin")));
    provider.insert(CrashDevice::from_image(&legs[1], fixture("log-v1-b.bin")));
    (provider, VdevConfig { vdev_guid: VDEV_GUID, kind: VdevKind::Mirror, legs })
}

fn v1_records() -> Vec<LogRecord> {
    vec![record(5, 1, 4096), record(5, 2, 5), record(6, 3, 0), record(6, 4, 10000)]
}

fn replayed(log: &IntentLog) -> Vec<LogRecord> {
    replay_checked(log, 0).expect("replay").records.into_iter().map(|r| r.record).collect()
}

#[test]
fn version_1_log_replays_and_continues_in_version_2() {
    let rt = runtime();
    let (provider, config) = provider_with_v1_log();
    let opts = OpenOptions::new(Arc::new(provider.clone()));
    let log = IntentLog::open(POOL, POOL_GUID, std::slice::from_ref(&config), &opts)
        .expect("a version 1 log opens");
    assert_eq!(replayed(&log), v1_records(), "every acknowledged version 1 record replays");
    let before = log.stats().bytes_logged;
    rt.block_on(log.commit(vec![record(7, 5, 4096)])).expect("commit after the upgrade");
    assert_eq!(
        log.stats().bytes_logged - before,
        4608,
        "a 4 KiB write is one 4.5 KiB version 2 block on a 512-byte-sector device"
    );
    drop(log);
    // A power cut right after the commit: only flushed bytes survive.
    let crashed = provider.crash(3);
    let opts = OpenOptions::new(Arc::new(crashed));
    let log = IntentLog::open(POOL, POOL_GUID, &[config], &opts).expect("reopen");
    let mut want = v1_records();
    want.push(record(7, 5, 4096));
    assert_eq!(replayed(&log), want, "version 1 and version 2 blocks replay as one chain");
    let legs = &log.status()[0].legs;
    assert!(legs.iter().all(|l| l.state == fardisk_slog::HealthState::Online), "{legs:?}");
}
