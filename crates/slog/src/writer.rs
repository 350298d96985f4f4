//! The log writer: it takes the waiters of the group-commit queue (queue.rs).
//!
//! Callers of `commit` queue a waiter. When nobody is writing, the caller itself takes every
//! waiter queued (up to `max_batch_bytes`), writes them as one block to one vdev
//! (round-robin), flushes every leg and answers them (`lead`); otherwise it sleeps and the
//! writer thread, or the caller writing, takes the queue next. Callers arriving while a flush
//! runs queue up and share the next block and the next flush, so N concurrent committers cost
//! far fewer than N flushes. One writes at a time (`Queue::busy`, `Queue::leading`).
//! Batches are written one after another, so when a commit returns every earlier commit is
//! durable too: replay returns a prefix of the commit order.
//!
//! Records written ahead (`IntentLog::write_ahead`: plain writes, before anyone asked for them
//! to be durable) take the same queue but their block is not flushed. A later commit flushes
//! every vdev that holds such blocks before it is answered; when its own records were all
//! written ahead, that flush is all it costs, as a local disk's fsync finds the data already
//! written and only flushes the cache. Without a flush a power cut may keep any subset of the
//! blocks written ahead; the chain links and the sequence numbers make replay stop at the first
//! missing one, so what replays is still a prefix of the queue order.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::LogError;
use crate::queue::{CommitReceipt, Waiter};
use crate::record::LogRecord;
use crate::shared::Shared;
use crate::stats::StatsCounters;
use crate::vdev::WriteFailure;

/// The writer thread's main loop; returns at shutdown.
pub(crate) fn run_writer(shared: Arc<Shared>) {
    loop {
        let (batch, heads_due) = {
            let mut queue = shared.queue.lock();
            while queue.leading
                || (queue.waiters.is_empty() && !queue.head_dirty && !queue.shutdown)
            {
                if std::mem::take(&mut queue.busy) {
                    shared.idle_wake.notify_all();
                }
                shared.queue_wake.wait(&mut queue);
            }
            if queue.shutdown {
                for waiter in queue.waiters.drain(..) {
                    let _ = waiter.reply.send(Err(LogError::Closed));
                }
                drop(queue);
                shared.persist_dirty_heads();
                shared.idle_wake.notify_all();
                return;
            }
            queue.busy = true;
            let heads_due = std::mem::take(&mut queue.head_dirty);
            (take_batch(&mut queue.waiters, shared.max_batch_bytes), heads_due)
        };
        if batch.is_empty() {
            if heads_due {
                shared.persist_dirty_heads();
            }
            continue;
        }
        let leftover = process_batch(&shared, batch);
        let mut queue = shared.queue.lock();
        queue.put_back(leftover);
        if heads_due && shared.any_head_dirty() {
            queue.head_dirty = true;
        }
    }
}

/// A committer that finds nobody writing writes the queued batch itself, on its own thread,
/// instead of waking the writer thread and waiting to be woken in turn: two thread hand-offs
/// fewer per commit, which at queue depth 1 is most of what a commit costs beyond the device
/// (issue #19). Whatever queues meanwhile is left for the writer thread, woken when this ends.
/// Returns without doing anything when the writer thread or another committer is writing (it
/// will take the queue next) or the queue is empty (the waiter was already answered).
pub(crate) fn lead(shared: &Shared) {
    let batch = {
        let mut queue = shared.queue.lock();
        if queue.busy || queue.leading || queue.shutdown || queue.waiters.is_empty() {
            return;
        }
        queue.leading = true;
        take_batch(&mut queue.waiters, shared.max_batch_bytes)
    };
    let leftover = process_batch(shared, batch);
    let more = {
        let mut queue = shared.queue.lock();
        queue.put_back(leftover);
        queue.leading = false;
        !queue.waiters.is_empty() || queue.head_dirty || queue.shutdown
    };
    if more {
        shared.queue_wake.notify_one();
    } else {
        shared.idle_wake.notify_all();
    }
}

/// Takes waiters from the front while their records fit in one batch (always at least one).
fn take_batch(waiters: &mut VecDeque<Waiter>, max_batch_bytes: u64) -> Vec<Waiter> {
    let mut batch = Vec::new();
    let mut bytes = 0u64;
    while let Some(next) = waiters.front() {
        if !batch.is_empty() && bytes + next.payload_bytes > max_batch_bytes {
            break;
        }
        bytes += next.payload_bytes;
        batch.extend(waiters.pop_front());
    }
    batch
}

fn fail_all(shared: &Shared, waiters: Vec<Waiter>, error: impl Fn() -> LogError) {
    for waiter in waiters {
        StatsCounters::add(&shared.stats.commit_errors, 1);
        let _ = waiter.reply.send(Err(error()));
    }
}

fn answer(waiters: Vec<Waiter>, first_seq: u64, vdev_guid: Option<u64>) {
    let batch_commits = waiters.len() as u64;
    let batch_records: u64 = waiters.iter().map(|w| w.records.len() as u64).sum();
    let mut seq = first_seq;
    for waiter in waiters {
        let record_count = waiter.records.len() as u64;
        let receipt =
            CommitReceipt { first_seq: seq, record_count, vdev_guid, batch_commits, batch_records };
        seq += record_count;
        let _ = waiter.reply.send(Ok(receipt));
    }
}

/// Writes one batch; returns the waiters that must wait for the next one.
fn process_batch(shared: &Shared, mut batch: Vec<Waiter>) -> Vec<Waiter> {
    if let Some(txg) = shared.poisoned_txg() {
        fail_all(shared, batch, || LogError::AwaitingRelease { txg });
        return Vec::new();
    }
    if batch.iter().all(|w| w.records.is_empty()) {
        // Nothing to write: every earlier batch is durable once the blocks written ahead are.
        if batch.iter().any(|w| w.durable) {
            match shared.flush_written_ahead() {
                Ok(true) => StatsCounters::add(&shared.stats.flushes_without_write, 1),
                Ok(false) => {}
                Err(lost_from_seq) => {
                    shared.poison(lost_from_seq);
                    fail_all(shared, batch, || LogError::NoHealthyLeg);
                    return Vec::new();
                }
            }
        }
        answer(batch, shared.next_seq.load(Ordering::Acquire), None);
        return Vec::new();
    }
    let Some(max_block_bytes) = shared.max_block_bytes() else {
        fail_all(shared, batch, || LogError::NoHealthyLeg);
        return Vec::new();
    };
    let fitting = fitting_prefix(&batch, max_block_bytes);
    let mut leftover = batch.split_off(fitting.max(1));
    if fitting == 0 {
        refuse_full(shared, batch);
        return leftover;
    }
    if let Err(rejected) = write_batch(shared, batch) {
        // Space vanished between the check and the write (cannot happen with one writer,
        // but never block forever): refuse this batch, keep the rest queued.
        refuse_full(shared, rejected);
        leftover.clear();
    }
    leftover
}

/// How many waiters from the front fit in one block of at most `max_block_bytes`.
fn fitting_prefix(batch: &[Waiter], max_block_bytes: u64) -> usize {
    let mut payload = 0u64;
    let mut count = 0;
    for waiter in batch {
        payload += waiter.payload_bytes;
        if crate::block::block_len_upper_bound(payload) > max_block_bytes {
            break;
        }
        count += 1;
    }
    count
}

fn refuse_full(shared: &Shared, waiters: Vec<Waiter>) {
    let (used, total) = (shared.space_used_bytes(), shared.space_total_bytes());
    for waiter in waiters {
        StatsCounters::add(&shared.stats.log_full_events, 1);
        StatsCounters::add(&shared.stats.commit_errors, 1);
        let needed_bytes = crate::block::block_len_upper_bound(waiter.payload_bytes);
        let _ = waiter.reply.send(Err(LogError::LogFull {
            needed_bytes,
            free_bytes: total - used.min(total),
            total_bytes: total,
        }));
    }
}

/// Writes the batch to one vdev, trying the others in turn when one fails. Returns the
/// batch back only when no vdev had room.
/// A batch of writes ahead alone is written without a flush; one with a commit is flushed,
/// together with every block written ahead before it on other vdevs.
fn write_batch(shared: &Shared, batch: Vec<Waiter>) -> Result<(), Vec<Waiter>> {
    let flush = batch.iter().any(|w| w.durable);
    let first_seq = shared.next_seq.load(Ordering::Acquire);
    let records: Vec<&LogRecord> = batch.iter().flat_map(|w| w.records.iter()).collect();
    let count = records.len() as u64;
    let outcome = shared.write_to_some_vdev(first_seq, &records, flush);
    drop(records);
    match outcome {
        Ok(vdev_guid) => {
            shared.next_seq.store(first_seq + count, Ordering::Release);
            StatsCounters::add(&shared.stats.device_writes, 1);
            StatsCounters::add(&shared.stats.records_logged, count);
            if !flush {
                StatsCounters::add(&shared.stats.blocks_written_ahead, 1);
            } else if let Err(lost_from_seq) = shared.flush_written_ahead() {
                shared.poison(lost_from_seq);
                fail_all(shared, batch, || LogError::NoHealthyLeg);
                return Ok(());
            }
            answer(batch, first_seq, Some(vdev_guid));
            Ok(())
        }
        Err(WriteFailure::AllLegsFailed) => {
            // The block may have reached some leg before it failed: its sequence numbers are
            // spent, and no later commit may be acknowledged until the gap is released.
            shared.next_seq.store(first_seq + count, Ordering::Release);
            shared.poison(first_seq);
            fail_all(shared, batch, || LogError::NoHealthyLeg);
            Ok(())
        }
        Err(WriteFailure::NoSpace) => Err(batch),
    }
}
