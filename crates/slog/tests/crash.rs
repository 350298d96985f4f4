//! Randomized crash tests: commits, releases, leg faults and power cuts over many seeds.
//!
//! The auditor checks after every crash and reopen:
//! * every record of every commit that returned (and is not yet published) is replayed, with
//!   the sequence numbers its receipt promised;
//! * every replayed record is byte-for-byte a record that was submitted (no garbage from torn
//!   writes), its txg is above the published txg, and sequence numbers strictly increase;
//! * records replayed once (even if their commit never returned) are replayed again until
//!   they are published: the engine has applied them, so they must not vanish.
//!
//! Half the rounds also write batches ahead (`write_ahead`, no flush) before their commits: a
//! written-ahead batch counts as durable only once a commit queued after it returned.

// Real time is the point here: waits for the log writer, a real OS thread.
#![allow(clippy::disallowed_methods)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use fardisk_slog::rng::Rng;
use fardisk_slog::{
    IntentLog, LogError, LogRecord, MemProvider, VdevConfig, VdevSpec, WrittenAhead,
};

struct Model {
    /// Records that must be replayed, by sequence number.
    durable: BTreeMap<u64, LogRecord>,
    /// Every record ever submitted, by id (offset).
    submitted: HashMap<u64, LogRecord>,
    published_txg: u64,
    current_txg: u64,
    next_id: u64,
}

impl Model {
    fn new() -> Self {
        Self {
            durable: BTreeMap::new(),
            submitted: HashMap::new(),
            published_txg: 0,
            current_txg: 1,
            next_id: 1,
        }
    }

    fn make_batch(&mut self, rng: &Rng) -> Vec<LogRecord> {
        let count = 1 + rng.below(4);
        // Now and then a record of the previous (still open) txg arrives after newer ones, as
        // with concurrent committers: releases must still only free a prefix of the log.
        let late_txg = (self.current_txg - 1).max(self.published_txg + 1);
        (0..count)
            .map(|_| {
                let len = if rng.one_in(5) { 0 } else { 1 + rng.below(5000) as usize };
                let txg = if rng.one_in(6) { late_txg } else { self.current_txg };
                let rec = record(txg, self.next_id, len);
                self.submitted.insert(self.next_id, rec.clone());
                self.next_id += 1;
                rec
            })
            .collect()
    }

    fn publish(&mut self, log: &IntentLog, txg: u64) {
        self.published_txg = self.published_txg.max(txg);
        self.durable.retain(|_, r| r.txg > self.published_txg);
        log.release_through_txg(self.published_txg);
    }

    /// Checks a replay and adopts it as the new durable state.
    fn audit(&mut self, replay: &fardisk_slog::Replay, context: &str) {
        let mut last_seq = None;
        for replayed in &replay.records {
            let id = replayed.record.offset_bytes / 4096;
            let submitted = self.submitted.get(&id).unwrap_or_else(|| {
                panic!("{context}: replayed a record never submitted: {replayed:?}")
            });
            assert_eq!(
                &replayed.record, submitted,
                "{context}: replayed record differs from what was submitted"
            );
            assert!(
                replayed.record.txg > self.published_txg,
                "{context}: replayed a published record"
            );
            assert!(
                last_seq.is_none_or(|s| replayed.seq > s),
                "{context}: sequence numbers not increasing"
            );
            last_seq = Some(replayed.seq);
        }
        let by_seq: BTreeMap<u64, &LogRecord> =
            replay.records.iter().map(|r| (r.seq, &r.record)).collect();
        if self.durable.keys().any(|k| !by_seq.contains_key(k)) {
            eprintln!(
                "DIAG {context}: replay start {} end {} gap {:?} txg_max {} published {}",
                replay.start_seq,
                replay.end_seq,
                replay.gap_at_seq,
                replay.txg_max,
                self.published_txg
            );
            eprintln!(
                "DIAG replayed: {:?}",
                replay.records.iter().map(|r| (r.seq, r.record.txg)).collect::<Vec<_>>()
            );
            eprintln!(
                "DIAG durable: {:?}",
                self.durable.iter().map(|(s, r)| (*s, r.txg)).collect::<Vec<_>>()
            );
        }
        for (seq, rec) in &self.durable {
            assert_eq!(
                by_seq.get(seq),
                Some(&rec),
                "{context}: durable record seq {seq} missing or changed"
            );
        }
        self.durable = replay.records.iter().map(|r| (r.seq, r.record.clone())).collect();
        self.current_txg = self.current_txg.max(replay.txg_max + 1);
    }
}

fn spec_for(seed: u64) -> Vec<VdevSpec> {
    let p = |name: &str| path(&format!("s{seed}-{name}"));
    match seed % 4 {
        0 => vec![VdevSpec::Single(p("a"))],
        1 => vec![VdevSpec::Mirror(vec![p("a"), p("b")])],
        2 => vec![VdevSpec::Single(p("a")), VdevSpec::Single(p("b"))],
        _ => vec![VdevSpec::Mirror(vec![p("a"), p("b")]), VdevSpec::Single(p("c"))],
    }
}

/// Writes up to three batches ahead (half the time none). A batch that joined the one before
/// it (`Ok(None)`: that one was still queued) is covered by that one's answer.
fn write_ahead_some(
    log: &IntentLog,
    model: &mut Model,
    rng: &Rng,
) -> Vec<(Vec<LogRecord>, WrittenAhead)> {
    let count = if rng.one_in(2) { 0 } else { 1 + rng.below(3) };
    let mut aheads: Vec<(Vec<LogRecord>, WrittenAhead)> = Vec::new();
    for _ in 0..count {
        let batch = model.make_batch(rng);
        match log.write_ahead(batch.clone()).expect("write ahead queued") {
            Some(written) => aheads.push((batch, written)),
            None => aheads.last_mut().expect("joined a write ahead of this round").0.extend(batch),
        }
    }
    aheads
}

/// Commits a few batches concurrently, some written ahead first; acknowledged records become
/// durable in the model.
fn commit_round(rt: &tokio::runtime::Runtime, log: &Arc<IntentLog>, model: &mut Model, rng: &Rng) {
    let aheads = write_ahead_some(log, model, rng);
    // After writes ahead, often a commit with nothing of its own (an fsync after writes).
    let batches: Vec<_> = if !aheads.is_empty() && rng.one_in(2) {
        vec![Vec::new()]
    } else {
        (0..1 + rng.below(4)).map(|_| model.make_batch(rng)).collect()
    };
    let results = rt.block_on(commit_all(log, batches.clone()));
    let any_committed = results.iter().any(|r| r.is_ok());
    for (batch, written) in aheads {
        match rt.block_on(written.written()) {
            // Durable only through a later commit's flush.
            Ok(receipt) if any_committed => {
                for (i, rec) in batch.into_iter().enumerate() {
                    model.durable.insert(receipt.first_seq + i as u64, rec);
                }
            }
            Ok(_) | Err(LogError::LogFull { .. }) => {}
            Err(err) => panic!("unexpected write-ahead error: {err}"),
        }
    }
    let mut full = false;
    for (batch, result) in batches.into_iter().zip(results) {
        match result {
            Ok(receipt) => {
                for (i, rec) in batch.into_iter().enumerate() {
                    model.durable.insert(receipt.first_seq + i as u64, rec);
                }
            }
            Err(LogError::LogFull { .. }) => full = true,
            Err(err) => panic!("unexpected commit error: {err}"),
        }
    }
    if full {
        // What the engine does: publish everything dirty, start a new txg.
        let txg = model.current_txg;
        model.current_txg += 1;
        model.publish(log, txg);
    }
}

fn devices_of(configs: &[VdevConfig]) -> Vec<PathBuf> {
    configs.iter().flat_map(|c| c.legs.clone()).collect()
}

/// Waits until some device holds a flush at its gate, or the commits finished without one.
fn wait_for_any_blocked_flush(provider: &MemProvider, paths: &[PathBuf], done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && !done() {
        for path in paths {
            if provider
                .device(path)
                .is_some_and(|d| d.wait_for_blocked_flushes(1, Duration::from_millis(5)))
            {
                return;
            }
        }
    }
}

/// Starts commits, freezes the devices mid-flush, and returns the image a power cut would
/// leave. The in-flight commits complete afterwards but count as never acknowledged.
fn crash_mid_commit(
    rt: &tokio::runtime::Runtime,
    log: &Arc<IntentLog>,
    provider: &MemProvider,
    paths: &[PathBuf],
    model: &mut Model,
    rng: &Rng,
) -> MemProvider {
    for path in paths {
        provider.device(path).expect("device").hold_flushes();
    }
    let _aheads = write_ahead_some(log, model, rng);
    let batches: Vec<_> = (0..1 + rng.below(3)).map(|_| model.make_batch(rng)).collect();
    if rng.one_in(2) {
        // Release right before the commits: the head update and the next block race for the
        // same flush, and the block may land in the space the release just freed.
        let txg = model.current_txg.saturating_sub(1);
        model.publish(log, txg);
    }
    let in_flight = {
        let log = Arc::clone(log);
        rt.spawn(async move { commit_all(&log, batches).await })
    };
    wait_for_any_blocked_flush(provider, paths, || in_flight.is_finished());
    let crashed = provider.crash(rng.next_u64());
    for path in paths {
        provider.device(path).expect("device").release_flushes();
    }
    let _ = rt.block_on(in_flight);
    crashed
}

fn run_seed(rt: &tokio::runtime::Runtime, seed: u64) {
    let rng = Rng::new(seed);
    let mut provider = MemProvider::new();
    let ring_bytes = 64 * 1024 * (1 + rng.below(4));
    let configs: Vec<VdevConfig> =
        spec_for(seed).iter().map(|s| format_mem(&provider, s, 16384 + ring_bytes, seed)).collect();
    let paths = devices_of(&configs);
    let mut model = Model::new();
    for round in 0..5 {
        let context = format!("seed {seed} round {round}");
        let log = Arc::new(open_mem(&provider, &configs));
        model.audit(&replay_checked(&log, model.published_txg).expect("replay"), &context);
        let faulty_leg = (configs[0].legs.len() > 1 && rng.one_in(3))
            .then(|| configs[0].legs[rng.below(2) as usize].clone());
        let ops = 5 + rng.below(20);
        for op in 0..ops {
            if faulty_leg.as_ref().is_some_and(|_| op == ops / 2) {
                provider
                    .device(faulty_leg.as_ref().expect("leg"))
                    .expect("device")
                    .set_fail_writes(true);
            }
            match rng.below(10) {
                0..=5 => commit_round(rt, &log, &mut model, &rng),
                6 | 7 => model.current_txg += 1,
                _ => {
                    let txg = model.current_txg.saturating_sub(1 + rng.below(2));
                    model.publish(&log, txg);
                }
            }
        }
        // The engine's own check before the crash: everything acknowledged is replayable now.
        model.audit(
            &replay_checked(&log, model.published_txg).expect("replay"),
            &format!("{context} before crash"),
        );
        provider = if rng.one_in(2) {
            crash_mid_commit(rt, &log, &provider, &paths, &mut model, &rng)
        } else {
            provider.crash(rng.next_u64())
        };
        drop(log);
    }
}

#[test]
fn acknowledged_commits_survive_random_crashes() {
    let rt = runtime();
    // SLOG_CRASH_SEEDS=first..last (exclusive) reruns a range, e.g. to chase a failure.
    let range = std::env::var("SLOG_CRASH_SEEDS").ok().and_then(|v| {
        let (a, b) = v.split_once("..")?;
        Some(a.parse::<u64>().ok()?..b.parse::<u64>().ok()?)
    });
    for seed in range.unwrap_or(0..300) {
        run_seed(&rt, seed);
    }
}
