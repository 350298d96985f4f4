//! Commit, replay, release and space on a single in-memory log device.

mod common;

use std::sync::Arc;

use common::*;
use fardisk_slog::{IntentLog, LogError, ManualClock, MemProvider, VdevSpec};

#[test]
fn committed_records_replay_in_order_after_reopen() {
    let rt = runtime();
    let provider = MemProvider::new();
    let config = format_mem(&provider, &VdevSpec::Single(path("log0")), 1 << 20, 1);
    let records: Vec<_> =
        (0..10).map(|id| record(1 + id / 4, id, (id as usize * 700) % 5000)).collect();
    {
        let log = open_mem(&provider, std::slice::from_ref(&config));
        for chunk in records.chunks(3) {
            let receipt = rt.block_on(log.commit(chunk.to_vec())).expect("commit");
            assert_eq!(receipt.record_count, chunk.len() as u64);
        }
        let replay = replay_checked(&log, 0).expect("replay in session");
        assert_eq!(replay.records.iter().map(|r| r.record.clone()).collect::<Vec<_>>(), records);
    }
    let log = open_mem(&provider, &[config]);
    let replay = replay_checked(&log, 0).expect("replay");
    let seqs: Vec<u64> = replay.records.iter().map(|r| r.seq).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "consecutive sequence numbers: {seqs:?}");
    assert_eq!(replay.records.iter().map(|r| r.record.clone()).collect::<Vec<_>>(), records);
    assert_eq!(replay.gap_at_seq, None);
    assert_eq!(replay.txg_max, 3);
    let after_two = replay_checked(&log, 2).expect("replay after txg 2");
    assert!(after_two.records.iter().all(|r| r.record.txg > 2));
    assert_eq!(after_two.records.len(), records.iter().filter(|r| r.txg > 2).count());
}

#[test]
fn released_records_are_not_replayed_and_space_returns() {
    let rt = runtime();
    let provider = MemProvider::new();
    let config = format_mem(&provider, &VdevSpec::Single(path("log0")), 1 << 20, 2);
    let log = open_mem(&provider, std::slice::from_ref(&config));
    let used_empty = log.space_used_bytes();
    for txg in 1..=4 {
        rt.block_on(log.commit(vec![record(txg, txg, 3000)])).expect("commit");
    }
    assert!(log.space_used_bytes() > used_empty);
    log.release_through_txg(2);
    let replay = replay_checked(&log, 0).expect("replay");
    assert_eq!(replay.records.iter().map(|r| r.record.txg).collect::<Vec<_>>(), vec![3, 4]);
    log.release_through_txg(4);
    assert_eq!(log.space_used_bytes(), 0);
    drop(log);
    let log = open_mem(&provider, &[config]);
    assert!(
        replay_checked(&log, 0).expect("replay").records.is_empty(),
        "released records stay released after reopen"
    );
}

#[test]
fn log_full_when_over_capacity_and_space_returns_after_release() {
    let rt = runtime();
    let provider = MemProvider::new();
    // 16 KiB of labels and heads + a 64 KiB ring.
    let config = format_mem(&provider, &VdevSpec::Single(path("small")), 16384 + 65536, 3);
    let log = open_mem(&provider, &[config]);
    let total = log.space_total_bytes();
    assert_eq!(total, 65536);
    let mut txg = 1;
    let mut committed = 0;
    let full = loop {
        match rt.block_on(log.commit(vec![record(txg, committed, 6000)])) {
            Ok(_) => committed += 1,
            Err(err) => break err,
        }
        txg += 1;
        assert!(committed < 100, "the log must fill up");
    };
    assert!(matches!(full, LogError::LogFull { .. }), "got {full:?}");
    assert!(committed >= 5, "a 64 KiB ring holds several 8 KiB blocks, got {committed}");
    assert_eq!(log.stats().log_full_events, 1);
    // Nothing live was overwritten.
    assert_eq!(replay_checked(&log, 0).expect("replay").records.len() as u64, committed);
    // The engine publishes, releases, retries.
    log.release_through_txg(txg);
    rt.block_on(log.commit(vec![record(txg + 1, 1000, 6000)]))
        .expect("space returned after release");
    let too_big = rt.block_on(log.commit(vec![record(txg + 1, 1001, 70000)]));
    assert!(
        matches!(too_big, Err(LogError::LogFull { total_bytes: 65536, .. })),
        "bigger than the ring: {too_big:?}"
    );
}

#[test]
fn ring_wraps_many_times_with_release_and_reopens_mid_lap() {
    let rt = runtime();
    let provider = MemProvider::new();
    let config = format_mem(&provider, &VdevSpec::Single(path("ring")), 16384 + 128 * 1024, 4);
    let mut log = open_mem(&provider, std::slice::from_ref(&config));
    let mut id = 0u64;
    let mut bytes_logged = 0;
    for txg in 1..=200u64 {
        let batch: Vec<_> =
            (0..2).map(|k| record(txg, id + k, 1000 + (txg as usize * 37) % 3000)).collect();
        id += 2;
        rt.block_on(log.commit(batch)).expect("commit");
        // Keep the last two txgs live, like an engine publishing every txg.
        log.release_through_txg(txg.saturating_sub(2));
        if txg % 37 == 0 {
            bytes_logged += log.stats().bytes_logged;
            drop(log);
            log = open_mem(&provider, std::slice::from_ref(&config));
            let replay = replay_checked(&log, txg - 2).expect("replay");
            let txgs: Vec<u64> = replay.records.iter().map(|r| r.record.txg).collect();
            assert_eq!(
                txgs,
                vec![txg - 1, txg - 1, txg, txg],
                "exactly the unpublished txgs at txg {txg}"
            );
        }
    }
    bytes_logged += log.stats().bytes_logged;
    assert!(
        bytes_logged > 4 * 128 * 1024,
        "the ring wrapped several times ({bytes_logged} bytes logged)"
    );
}

#[test]
fn stats_count_requests_and_latency_with_injected_clock() {
    let rt = runtime();
    let provider = MemProvider::new();
    let config = format_mem(&provider, &VdevSpec::Single(path("log0")), 1 << 20, 5);
    let clock = Arc::new(ManualClock::starting_at(std::time::Duration::from_micros(1_000)));
    let mut opts = open_opts(&provider);
    opts.clock = clock.clone();
    let log = IntentLog::open(POOL, POOL_GUID, &[config], &opts).expect("open");
    for id in 0..3 {
        rt.block_on(log.commit(vec![record(1, id, 100)])).expect("commit");
    }
    rt.block_on(log.commit(Vec::new())).expect("empty commit is a barrier");
    let stats = log.stats();
    assert_eq!(stats.sync_requests, 4);
    assert_eq!(stats.device_writes, 3);
    assert_eq!(stats.records_logged, 3);
    assert_eq!(
        stats.latency_histogram_us[0].count, 4,
        "the clock never moved: all in the first bucket"
    );
    assert!(stats.space_used_bytes > 0 && stats.space_total_bytes > stats.space_used_bytes);
}

#[test]
fn invalid_records_are_refused() {
    let rt = runtime();
    let provider = MemProvider::new();
    let config = format_mem(&provider, &VdevSpec::Single(path("log0")), 1 << 20, 6);
    let log = open_mem(&provider, &[config]);
    let mut bad = record(1, 1, 100);
    bad.length_bytes = 99;
    assert!(matches!(rt.block_on(log.commit(vec![bad])), Err(LogError::InvalidRecord(_))));
}

/// The scan at open and the replay read the log in large pieces, not block by block: one or
/// two O_DIRECT reads per 4-8 KiB block made the import of an 80,000-record log (625 MiB of
/// 4 KiB writes) take 42-51 s while the database waited for its restart (e2e 54's engine after
/// the store outage answered 38-54 s after its kill). Before the read-ahead window this walk
/// made 6,007 device reads for the 1,500 blocks (two per block and walk); now about one per MiB.
#[test]
fn open_and_replay_read_the_log_in_large_pieces() {
    let rt = runtime();
    let provider = MemProvider::new();
    let device_bytes = 32 << 20;
    let config = format_mem(&provider, &VdevSpec::Single(path("log0")), device_bytes, 3);
    let records: Vec<_> = (0..1500).map(|id| record(1, id, 4096)).collect();
    {
        let log = open_mem(&provider, std::slice::from_ref(&config));
        for r in &records {
            rt.block_on(log.commit(vec![r.clone()])).expect("commit");
        }
    }
    let device = provider.device(path("log0")).expect("device");
    let before = device.read_count();
    let log = open_mem(&provider, &[config]);
    let replay = replay_checked(&log, 0).expect("replay");
    let reads = device.read_count() - before;
    assert_eq!(replay.records.iter().map(|r| r.record.clone()).collect::<Vec<_>>(), records);
    let log_mib = log.space_used_bytes().div_ceil(1 << 20);
    // The labels and heads, then per walk (the open's scan, the replay) one read per MiB.
    assert!(
        reads <= 16 + 2 * (log_mib + 1),
        "{reads} device reads to open and replay {} blocks ({log_mib} MiB)",
        records.len()
    );
}

/// The import's replay reads the log as it hands records out: the first record costs one
/// read-ahead window, not the whole log (`replay` holds every live record at once: after a store
/// outage, the whole log).
#[test]
fn the_replay_stream_reads_the_log_as_records_are_taken() {
    let rt = runtime();
    let provider = MemProvider::new();
    let config = format_mem(&provider, &VdevSpec::Single(path("log0")), 64 << 20, 4);
    let records: Vec<_> = (0..4000).map(|id| record(1, id, 4096)).collect();
    {
        let log = open_mem(&provider, std::slice::from_ref(&config));
        for r in &records {
            rt.block_on(log.commit(vec![r.clone()])).expect("commit");
        }
    }
    let device = provider.device(path("log0")).expect("device");
    let log = open_mem(&provider, &[config]);
    let before = device.read_count();
    let mut stream = log.replay_stream(0).expect("stream");
    let first = stream.next_record().expect("a first record");
    assert_eq!(first.record, records[0]);
    let first_reads = device.read_count() - before;
    assert!(
        first_reads <= 2,
        "{first_reads} device reads for the first record of a {} MiB log",
        log.space_used_bytes() >> 20
    );
    let mut rest = 1;
    while stream.next_record().is_some() {
        rest += 1;
    }
    assert_eq!(rest, records.len());
    assert_eq!(stream.end().gap_at_seq, None);
}

/// A stream over a log that keeps working (a fenced writer copying what it holds): a txg
/// published while the stream reads is released, and that must not let commits write over blocks
/// the stream has yet to read. Without the stream's release pin the commits below wrap onto the
/// released txg-2 blocks, the stream meets a block that is not the one it noted and stops there,
/// and the txg-3 records after it are lost.
#[test]
fn a_release_waits_for_a_replay_stream_and_commits_cannot_overwrite_what_it_has_yet_to_read() {
    let rt = runtime();
    let provider = MemProvider::new();
    let config = format_mem(&provider, &VdevSpec::Single(path("log0")), 16 << 20, 5);
    let log = open_mem(&provider, &[config]);
    let commit_all = |records: &[fardisk_slog::LogRecord]| {
        for chunk in records.chunks(8) {
            rt.block_on(log.commit(chunk.to_vec())).expect("commit");
        }
    };
    // About 8 MiB of txg 2 (published while the stream reads), then 3 MiB of txg 3.
    let published: Vec<_> = (0..2000).map(|id| record(2, id, 4096)).collect();
    let held: Vec<_> = (2000..2750).map(|id| record(3, id, 4096)).collect();
    commit_all(&published);
    commit_all(&held);

    let mut stream = log.replay_stream(1).expect("stream");
    let first = stream.next_record().expect("a first record");
    assert_eq!(first.record, published[0]);
    let used_before = log.space_used_bytes();
    log.release_through_txg(2);
    assert_eq!(log.space_used_bytes(), used_before, "a release waits while a stream reads");
    // More commits than the free space behind the txg-3 blocks: with the release done they would
    // wrap onto the txg-2 blocks; held back, the ones that find no room are refused.
    let mut refused = 0;
    for id in 2750..5000u64 {
        match rt.block_on(log.commit(vec![record(4, id, 4096)])) {
            Ok(_) => {}
            Err(LogError::LogFull { .. }) => refused += 1,
            Err(e) => panic!("commit {id}: {e}"),
        }
    }
    assert!(refused > 0, "the commits should have needed the released space");
    let mut streamed = vec![first.record];
    // Bounded by the records the log holds: the stream ends at the end of its prefix.
    while let Some(r) = stream.next_record() {
        if r.record.txg <= 3 {
            streamed.push(r.record);
        }
    }
    assert_eq!(stream.end().gap_at_seq, None);
    let expected: Vec<_> = published.iter().chain(&held).cloned().collect();
    assert_eq!(streamed.len(), expected.len(), "every record, none lost to an overwrite");
    assert_eq!(streamed, expected);
    drop(stream);
    assert!(log.space_used_bytes() < used_before, "the held-back release is done at the drop");
    // And the space is usable again.
    rt.block_on(log.commit(vec![record(4, 9999, 4096)])).expect("commit after the release");
}
