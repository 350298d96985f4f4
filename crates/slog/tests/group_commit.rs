//! Group commit: concurrent committers share device writes and flushes.

// Real time is the point here: group commit is observed across real threads in real time.
#![allow(clippy::disallowed_methods)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use fardisk_slog::{IntentLog, MemProvider, VdevSpec};

#[test]
fn concurrent_committers_share_flushes() {
    const COMMITTERS: u64 = 32;
    let rt = runtime();
    let provider = MemProvider::new();
    let config = format_mem(&provider, &VdevSpec::Single(path("log0")), 4 << 20, 1);
    let log = Arc::new(open_mem(&provider, &[config]));
    let device = provider.device(path("log0")).expect("device");
    let flushes_before = device.flush_count();
    device.hold_flushes();
    // The first commit is written and stuck in its flush...
    let first = {
        let log = Arc::clone(&log);
        rt.spawn(async move { log.commit(vec![record(1, 0, 512)]).await })
    };
    assert!(
        device.wait_for_blocked_flushes(1, Duration::from_secs(30)),
        "first flush reached the device"
    );
    // ...while the others arrive and queue behind it.
    let others: Vec<_> = (1..COMMITTERS)
        .map(|id| {
            let log = Arc::clone(&log);
            rt.spawn(async move { log.commit(vec![record(1, id, 512)]).await })
        })
        .collect();
    wait_until("all committers queued", || log.queued_commits() == (COMMITTERS - 1) as usize);
    device.release_flushes();
    let first = rt.block_on(first).expect("task").expect("commit");
    assert_eq!(first.batch_commits, 1);
    let mut seqs = vec![first.first_seq];
    for handle in others {
        let receipt = rt.block_on(handle).expect("task").expect("commit");
        assert_eq!(
            receipt.batch_commits,
            COMMITTERS - 1,
            "all queued committers shared one device write"
        );
        seqs.push(receipt.first_seq);
    }
    let stats = log.stats();
    assert_eq!(stats.sync_requests, COMMITTERS);
    assert_eq!(stats.device_writes, 2);
    let flushes = device.flush_count() - flushes_before;
    assert!(
        flushes < COMMITTERS,
        "flush count {flushes} must be far below the commit count {COMMITTERS}"
    );
    assert_eq!(flushes, 2);
    assert!(stats.group_commit_ratio() >= 10.0, "ratio {}", stats.group_commit_ratio());
    seqs.sort_unstable();
    assert_eq!(
        seqs,
        (seqs[0]..seqs[0] + COMMITTERS).collect::<Vec<_>>(),
        "every record got its own sequence number"
    );
    assert_eq!(replay_checked(&log, 0).expect("replay").records.len() as u64, COMMITTERS);
}

#[test]
fn batches_respect_max_batch_bytes() {
    let rt = runtime();
    let provider = MemProvider::new();
    let config = format_mem(&provider, &VdevSpec::Single(path("log0")), 4 << 20, 2);
    let mut opts = open_opts(&provider);
    opts.max_batch_bytes = 3 * (4096 + 64);
    let log = Arc::new(IntentLog::open(POOL, POOL_GUID, &[config], &opts).expect("open"));
    let device = provider.device(path("log0")).expect("device");
    device.hold_flushes();
    let blocker = {
        let log = Arc::clone(&log);
        rt.spawn(async move { log.commit(vec![record(1, 0, 4096)]).await })
    };
    assert!(device.wait_for_blocked_flushes(1, Duration::from_secs(30)));
    let queued: Vec<_> = (1..=9)
        .map(|id| {
            let log = Arc::clone(&log);
            rt.spawn(async move { log.commit(vec![record(1, id, 4096)]).await })
        })
        .collect();
    wait_until("nine queued", || log.queued_commits() == 9);
    device.release_flushes();
    rt.block_on(blocker).expect("task").expect("commit");
    for handle in queued {
        let receipt = rt.block_on(handle).expect("task").expect("commit");
        assert!(
            receipt.batch_commits <= 3,
            "a batch carries at most 3 such records, got {}",
            receipt.batch_commits
        );
    }
    assert_eq!(log.stats().device_writes, 4, "1 + 9 records in batches of 3");
}

#[test]
fn waiters_are_bounded() {
    let rt = runtime();
    let provider = MemProvider::new();
    let config = format_mem(&provider, &VdevSpec::Single(path("log0")), 4 << 20, 3);
    let mut opts = open_opts(&provider);
    opts.max_waiters = 4;
    let log = Arc::new(IntentLog::open(POOL, POOL_GUID, &[config], &opts).expect("open"));
    let device = provider.device(path("log0")).expect("device");
    device.hold_flushes();
    let spawn = |id: u64| {
        let log = Arc::clone(&log);
        rt.spawn(async move { log.commit(vec![record(1, id, 100)]).await })
    };
    let mut handles = vec![spawn(0)];
    assert!(device.wait_for_blocked_flushes(1, Duration::from_secs(30)));
    handles.extend((1..12).map(spawn));
    wait_until("the queue to fill", || log.queued_commits() == 3);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        log.queued_commits(),
        3,
        "one in flight + three queued = max_waiters; the rest wait for admission"
    );
    device.release_flushes();
    for handle in handles {
        rt.block_on(handle).expect("task").expect("commit");
    }
    assert_eq!(replay_checked(&log, 0).expect("replay").records.len(), 12);
}
