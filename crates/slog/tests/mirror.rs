//! Mirrored log vdevs: a failing leg, a corrupted leg, a vanished leg and resilvering.

mod common;

use std::sync::Arc;

use common::*;
use fardisk_slog::{HealthState, IntentLog, LogRecord, MemProvider, VdevConfig, VdevSpec};

fn mirror(provider: &MemProvider, seed: u64) -> VdevConfig {
    format_mem(provider, &VdevSpec::Mirror(vec![path("m0"), path("m1")]), 1 << 20, seed)
}

fn commit_txgs(
    rt: &tokio::runtime::Runtime,
    log: &IntentLog,
    txgs: std::ops::Range<u64>,
) -> Vec<LogRecord> {
    let mut all = Vec::new();
    for txg in txgs {
        let batch = vec![record(txg, txg * 10, 2000), record(txg, txg * 10 + 1, 0)];
        rt.block_on(log.commit(batch.clone())).expect("commit");
        all.extend(batch);
    }
    all
}

fn replayed(log: &IntentLog) -> Vec<LogRecord> {
    replay_checked(log, 0).expect("replay").records.into_iter().map(|r| r.record).collect()
}

/// The log over `config` on a manual clock the test moves, with `leg_timeout_ms` when given.
fn open_on_manual_clock(
    provider: &MemProvider,
    config: &VdevConfig,
    leg_timeout_ms: Option<u64>,
) -> (Arc<IntentLog>, Arc<fardisk_slog::clock::ManualClock>) {
    let clock = Arc::new(fardisk_slog::clock::ManualClock::default());
    let mut opts = open_opts(provider);
    opts.clock = Arc::clone(&clock) as Arc<dyn fardisk_slog::clock::Clock>;
    if let Some(ms) = leg_timeout_ms {
        opts.leg_timeout_ms = ms;
    }
    let configs = std::slice::from_ref(config);
    (Arc::new(IntentLog::open(POOL, POOL_GUID, configs, &opts).expect("open")), clock)
}

fn leg_state(log: &IntentLog, leg: usize) -> HealthState {
    log.status()[0].legs[leg].state
}

#[test]
fn failing_leg_degrades_but_commits_continue_and_replay_uses_the_good_leg() {
    let rt = runtime();
    let provider = MemProvider::new();
    let config = mirror(&provider, 1);
    let log = open_mem(&provider, std::slice::from_ref(&config));
    let mut expected = commit_txgs(&rt, &log, 1..4);
    provider.device(path("m1")).expect("m1").set_fail_writes(true);
    expected.extend(commit_txgs(&rt, &log, 4..8));
    let status = log.status();
    assert_eq!(status[0].state, HealthState::Degraded);
    assert_eq!(leg_state(&log, 0), HealthState::Online);
    assert_eq!(leg_state(&log, 1), HealthState::Faulted);
    assert_eq!(status[0].legs[1].write_errors, 1);
    assert_eq!(replayed(&log), expected, "in-session replay");
    // Power cut: the faulted leg comes back readable but stale; the good leg's chain wins.
    let crashed = provider.crash(7);
    drop(log);
    let log = open_mem(&crashed, &[config]);
    assert_eq!(replayed(&log), expected, "replay after crash picks the longest chain");
    assert_eq!(log.status()[0].state, HealthState::Online, "the stale leg was resynced");
    // The resynced leg alone now holds everything.
    crashed.device(path("m0")).expect("m0").set_fail_reads(true);
    assert_eq!(replayed(&log), expected, "replay from the resynced leg");
    assert_eq!(leg_state(&log, 0), HealthState::Faulted);
}

#[test]
fn vanished_leg_is_faulted_and_the_vdev_keeps_serving() {
    let rt = runtime();
    let provider = MemProvider::new();
    let config = mirror(&provider, 2);
    let log = open_mem(&provider, &[config]);
    let mut expected = commit_txgs(&rt, &log, 1..3);
    provider.device(path("m0")).expect("m0").vanish();
    expected.extend(commit_txgs(&rt, &log, 3..6));
    assert_eq!(leg_state(&log, 0), HealthState::Faulted);
    assert_eq!(log.status()[0].state, HealthState::Degraded);
    assert_eq!(replayed(&log), expected);
    provider.device(path("m1")).expect("m1").vanish();
    let err = rt.block_on(log.commit(vec![record(9, 999, 10)])).expect_err("no leg left");
    assert!(matches!(err, fardisk_slog::LogError::NoHealthyLeg), "{err}");
    assert_eq!(log.status()[0].state, HealthState::Faulted);
}

#[test]
fn corrupted_leg_counts_checksum_errors_and_the_other_leg_is_used() {
    let rt = runtime();
    let provider = MemProvider::new();
    let config = mirror(&provider, 3);
    let log = open_mem(&provider, std::slice::from_ref(&config));
    let expected = commit_txgs(&rt, &log, 1..6);
    // Damage the whole ring area of leg 0 (a media error under every block).
    provider.device(path("m0")).expect("m0").corrupt(16384 + 4096, 64 * 1024);
    assert_eq!(replayed(&log), expected, "in-session replay reads around the damage");
    let errors = log.status()[0].legs[0].checksum_errors;
    assert!(errors >= 1, "checksum errors counted on the damaged leg: {errors}");
    assert_eq!(log.status()[0].legs[1].checksum_errors, 0);
    drop(log);
    let log = open_mem(&provider, &[config]);
    assert_eq!(replayed(&log), expected, "after reopen the intact leg's chain is chosen");
    assert!(
        log.status()[0].legs[0].checksum_errors >= 1,
        "damage found by the open-time scan is counted"
    );
    provider.device(path("m1")).expect("m1").set_fail_reads(true);
    assert_eq!(replayed(&log), expected, "leg 0 was repaired from leg 1 at open");
}

#[test]
fn replace_leg_resilvers_live_records() {
    let rt = runtime();
    let provider = MemProvider::new();
    let config = mirror(&provider, 4);
    let log = Arc::new(open_mem(&provider, &[config]));
    let mut expected = commit_txgs(&rt, &log, 1..4);
    provider.device(path("m1")).expect("m1").vanish();
    expected.extend(commit_txgs(&rt, &log, 4..6));
    assert_eq!(log.status()[0].state, HealthState::Degraded);
    provider.add(path("m2"), 1 << 20);
    let new_config = log.replace_leg(&path("m1"), &path("m2")).expect("replace");
    assert_eq!(new_config.legs, vec![path("m0"), path("m2")]);
    assert_eq!(log.status()[0].state, HealthState::Online);
    expected.extend(commit_txgs(&rt, &log, 6..8));
    // Only the new leg is left: everything live must be on it.
    provider.device(path("m0")).expect("m0").vanish();
    drop(log);
    let mut opts = open_opts(&provider);
    opts.missing = fardisk_slog::MissingPolicy::Degrade;
    let log = IntentLog::open(POOL, POOL_GUID, &[new_config], &opts).expect("open degraded");
    assert_eq!(log.status()[0].legs[0].state, HealthState::Unavail);
    assert_eq!(replayed(&log), expected, "the resilvered leg holds every live record");
}

#[test]
fn a_leg_that_does_not_answer_is_named_in_status_until_it_does() {
    use std::time::Duration;
    let rt = runtime();
    let provider = MemProvider::new();
    let config = mirror(&provider, 3);
    let (log, clock) = open_on_manual_clock(&provider, &config, None);
    commit_txgs(&rt, &log, 1..2);
    let waiting = |leg: usize| log.status()[0].legs[leg].io_waiting_ms;
    assert_eq!((waiting(0), waiting(1)), (None, None), "no cycle under way between commits");
    // m1 stops answering its flushes, as a hung device does: the commit waits for it.
    let hung = provider.device(path("m1")).expect("m1");
    hung.hold_flushes();
    let commit = {
        let log = Arc::clone(&log);
        rt.spawn(async move { log.commit(vec![record(2, 20, 512)]).await })
    };
    assert!(hung.wait_for_blocked_flushes(1, Duration::from_secs(30)), "m1's flush is held");
    wait_until("m0 answered its cycle", || waiting(0).is_none());
    clock.advance(Duration::from_millis(fardisk_slog::LEG_IO_STALLED_MS + 1_500));
    assert_eq!(
        waiting(1),
        Some(fardisk_slog::LEG_IO_STALLED_MS + 1_500),
        "status names the leg the commit waits for, and for how long"
    );
    assert_eq!(log.status()[0].state, HealthState::Online, "a slow leg is not a failed one");
    hung.release_flushes();
    rt.block_on(commit).expect("task").expect("the commit completes once m1 answers");
    assert_eq!((waiting(0), waiting(1)), (None, None), "answered: nothing under way");
}

/// A leg that stops answering is taken out of service once its mirror answered and
/// `leg_timeout_ms` passed: the commit waiting for it completes, later commits do not wait for
/// it, `status` says why, and every acknowledged record replays from the other leg, in the
/// session and after a power cut.
#[test]
fn a_hung_leg_is_given_up_on_after_its_timeout_and_commits_go_on_without_it() {
    use std::time::Duration;
    let rt = runtime();
    let provider = MemProvider::new();
    let config = mirror(&provider, 4);
    let (log, clock) = open_on_manual_clock(&provider, &config, Some(200));
    let mut expected = commit_txgs(&rt, &log, 1..3);
    let hung = provider.device(path("m1")).expect("m1");
    hung.hold_flushes();
    let batch = vec![record(3, 30, 512)];
    // The commit writes the legs on its own thread (writer.rs `lead`), so it runs on one of
    // its own here and the wait for it is bounded: before, it waited as long as m1 hung.
    let commit = {
        let (log, batch) = (Arc::clone(&log), batch.clone());
        std::thread::spawn(move || runtime().block_on(log.commit(batch)))
    };
    assert!(hung.wait_for_blocked_flushes(1, Duration::from_secs(30)), "m1's flush is held");
    clock.advance(Duration::from_millis(200));
    wait_until("the commit to complete without m1", || commit.is_finished());
    commit.join().expect("commit thread").expect("the commit succeeds on m0");
    expected.extend(batch);
    let status = &log.status()[0];
    assert_eq!((status.state, status.legs[1].state), (HealthState::Degraded, HealthState::Faulted));
    assert_eq!((status.legs[1].timeouts, status.legs[1].write_errors), (1, 0));
    assert!(status.legs[1].io_waiting_ms.is_some(), "m1's flush is still out");
    // Later commits do not wait for m1 at all, though it still hangs.
    expected.extend(commit_txgs(&rt, &log, 4..6));
    assert_eq!(log.status()[0].legs[0].state, HealthState::Online);
    assert_eq!(replayed(&log), expected, "in-session replay");
    // Power cut while m1 still hangs; it comes back stale and is resynced from m0.
    let crashed = provider.crash(11);
    hung.release_flushes();
    drop(log);
    let log = open_mem(&crashed, &[config]);
    assert_eq!(replayed(&log), expected, "replay after the power cut");
    assert_eq!(log.status()[0].state, HealthState::Online, "the stale leg was resynced");
}
