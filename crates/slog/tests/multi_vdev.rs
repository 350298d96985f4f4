//! Several top-level log vdevs: round-robin batches, merge by sequence number, gaps, epochs,
//! adding and removing vdevs, and the all-vdevs-failed path.

mod common;

use std::sync::Arc;

use common::*;
use fardisk_slog::{
    HealthState, IntentLog, LogError, LogRecord, MemProvider, MissingPolicy, RemoveOutcome,
    VdevSpec,
};

fn replayed(log: &IntentLog, after_txg: u64) -> Vec<LogRecord> {
    replay_checked(log, after_txg).expect("replay").records.into_iter().map(|r| r.record).collect()
}

#[test]
fn batches_alternate_between_vdevs_and_replay_merges_them_in_order() {
    let rt = runtime();
    let provider = MemProvider::new();
    let a = format_mem(&provider, &VdevSpec::Single(path("a")), 1 << 20, 1);
    let b = format_mem(&provider, &VdevSpec::Mirror(vec![path("b0"), path("b1")]), 1 << 20, 2);
    let configs = vec![a.clone(), b.clone()];
    let mut expected = Vec::new();
    {
        let log = open_mem(&provider, &configs);
        let mut used = std::collections::HashSet::new();
        for id in 0..12 {
            let rec = record(1 + id / 5, id, 700);
            let receipt = rt.block_on(log.commit(vec![rec.clone()])).expect("commit");
            used.insert(receipt.vdev_guid.expect("written"));
            expected.push(rec);
        }
        assert_eq!(used.len(), 2, "both vdevs received batches");
        assert_eq!(replayed(&log, 0), expected);
    }
    let log = open_mem(&provider, &configs);
    assert_eq!(replayed(&log, 0), expected, "merged in commit order after reopen");
}

#[test]
fn missing_vdev_stops_replay_at_the_gap_and_its_stale_records_never_return() {
    for missing in 0..2 {
        missing_vdev_case(missing);
    }
}

fn missing_vdev_case(missing: usize) {
    let rt = runtime();
    let provider = MemProvider::new();
    let a = format_mem(&provider, &VdevSpec::Single(path("a")), 1 << 20, 3);
    let b = format_mem(&provider, &VdevSpec::Single(path("b")), 1 << 20, 4);
    let configs = vec![a.clone(), b.clone()];
    let mut committed = Vec::new();
    {
        let log = open_mem(&provider, &configs);
        for id in 0..8 {
            let rec = record(1, id, 300);
            let receipt = rt.block_on(log.commit(vec![rec.clone()])).expect("commit");
            committed.push((receipt.vdev_guid.expect("written"), rec));
        }
    }
    // Import without one vdev: the history is consistent up to its first record.
    let gone = &configs[missing];
    let unplugged = provider.remove(&gone.legs[0]).expect("unplug");
    let mut opts = open_opts(&provider);
    opts.missing = MissingPolicy::Degrade;
    let first_gone =
        committed.iter().position(|(guid, _)| *guid == gone.vdev_guid).expect("it got a batch");
    let prefix: Vec<LogRecord> = committed[..first_gone].iter().map(|(_, r)| r.clone()).collect();
    let fresh = {
        let log = IntentLog::open(POOL, POOL_GUID, &configs, &opts).expect("degraded open");
        assert_eq!(log.status()[missing].state, HealthState::Faulted);
        assert_eq!(
            replayed(&log, 0),
            prefix,
            "replay stops at the first record only the missing vdev held"
        );
        // The engine carries on: new records on the remaining vdev.
        let fresh: Vec<LogRecord> = (100..104).map(|id| record(2, id, 300)).collect();
        for rec in &fresh {
            rt.block_on(log.commit(vec![rec.clone()])).expect("commit on the remaining vdev");
        }
        fresh
    };
    // The vdev comes back: its old records must not be mixed into the new history.
    provider.insert(unplugged);
    let log = open_mem(&provider, &configs);
    let mut want = prefix;
    want.extend(fresh);
    assert_eq!(
        replayed(&log, 0),
        want,
        "stale records of the returning vdev are superseded (missing = {missing})"
    );
}

#[test]
fn add_and_remove_vdevs_while_running() {
    let rt = runtime();
    let provider = MemProvider::new();
    let a = format_mem(&provider, &VdevSpec::Single(path("a")), 1 << 20, 5);
    let b = format_mem(&provider, &VdevSpec::Single(path("b")), 1 << 20, 6);
    let log = open_mem(&provider, std::slice::from_ref(&a));
    rt.block_on(log.commit(vec![record(1, 1, 100)])).expect("commit");
    log.add_vdev(b.clone()).expect("add");
    assert!(log.add_vdev(b.clone()).is_err(), "adding the same vdev twice is refused");
    let mut guids = std::collections::HashSet::new();
    for id in 2..6 {
        guids.insert(rt.block_on(log.commit(vec![record(2, id, 100)])).expect("commit").vdev_guid);
    }
    assert!(guids.contains(&Some(b.vdev_guid)), "the added vdev takes batches");
    let outcome = log.remove_vdev(&path("b")).expect("remove");
    assert_eq!(outcome, RemoveOutcome::Pending { release_through_txg: 2 });
    assert_eq!(log.status()[1].state, HealthState::Removing);
    for id in 6..9 {
        let receipt = rt.block_on(log.commit(vec![record(3, id, 100)])).expect("commit");
        assert_eq!(receipt.vdev_guid, Some(a.vdev_guid), "a removing vdev takes no new batches");
    }
    assert_eq!(replayed(&log, 0).len(), 8, "records on the removing vdev still replay");
    log.release_through_txg(2);
    assert_eq!(log.status().len(), 1, "removed once its records were released");
    assert_eq!(replayed(&log, 0).len(), 3);
    assert!(matches!(log.remove_vdev(&path("b")), Err(LogError::UnknownDevice { .. })));
}

#[test]
fn after_every_vdev_failed_nothing_is_acknowledged_until_the_gap_is_released() {
    let rt = runtime();
    let provider = MemProvider::new();
    let a = format_mem(&provider, &VdevSpec::Single(path("a")), 1 << 20, 7);
    let spare = format_mem(&provider, &VdevSpec::Single(path("spare")), 1 << 20, 8);
    let log = Arc::new(open_mem(&provider, std::slice::from_ref(&a)));
    rt.block_on(log.commit(vec![record(1, 1, 100)])).expect("commit");
    provider.device(path("a")).expect("a").set_fail_writes(true);
    let err = rt.block_on(log.commit(vec![record(1, 2, 100)])).expect_err("all legs failed");
    assert!(matches!(err, LogError::NoHealthyLeg), "{err}");
    log.add_vdev(spare).expect("add a spare vdev");
    let err = rt.block_on(log.commit(vec![record(2, 3, 100)])).expect_err("gap not released");
    assert!(matches!(err, LogError::AwaitingRelease { txg: 1 }), "{err}");
    // The engine publishes txg 1 (which includes the failed records) and releases it.
    log.release_through_txg(1);
    rt.block_on(log.commit(vec![record(2, 4, 100)])).expect("commits resume");
    let replay = replay_checked(&log, 1).expect("replay");
    assert_eq!(
        replay.records.iter().map(|r| r.record.offset_bytes / 4096).collect::<Vec<_>>(),
        vec![4]
    );
    assert_eq!(replay.gap_at_seq, None);
}
