//! `IntentLog`: all log vdevs of one pool, behind the commit / release / replay interface the
//! engine uses.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::oneshot;

use crate::block::block_len_upper_bound;
use crate::config::{OpenOptions, VdevConfig};
use crate::error::LogError;
use crate::open::{assemble_vdev, open_vdev_legs, plan_merge, PoolId};
use crate::queue::{CommitReceipt, Waiter};
use crate::record::LogRecord;
use crate::shared::Shared;
use crate::stats::{LogStats, StatsCounters};
use crate::status::VdevStatus;
use crate::vdev::{Session, Vdev};
use crate::writer::run_writer;

/// The separate intent log of one pool.
pub struct IntentLog {
    pub(crate) shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
}

impl IntentLog {
    /// Opens every configured vdev, checks each label names this pool and role, picks per
    /// vdev the leg with the longest valid chain, resyncs the others and cuts the log at the
    /// end of the replayable prefix. A wrong or swapped device is refused with an error
    /// naming the path and what it carries; an absent one is `LogError::Missing` unless
    /// `opts.missing` is `Degrade`.
    pub fn open(
        pool_name: &str,
        pool_guid: u128,
        vdevs: &[VdevConfig],
        opts: &OpenOptions,
    ) -> Result<IntentLog, LogError> {
        check_unique(vdevs)?;
        let pool = PoolId { name: pool_name.to_string(), guid: pool_guid };
        let opened =
            vdevs.iter().map(|c| open_vdev_legs(&pool, c, opts)).collect::<Result<Vec<_>, _>>()?;
        let plan = plan_merge(&opened);
        if let Some(seq) = plan.gap_at_seq {
            tracing::warn!(seq, "log history has a gap; records after it are discarded");
        }
        let leg_timeout_ms = Arc::new(AtomicU64::new(opts.leg_timeout_ms));
        let assembled: Vec<Arc<Vdev>> = vdevs
            .iter()
            .zip(opened)
            .zip(&plan.keep_blocks)
            .map(|((config, (legs, label)), &keep)| {
                let clock = Arc::clone(&opts.clock);
                let timeout = Arc::clone(&leg_timeout_ms);
                let release_seq = plan.release_seq;
                Arc::new(assemble_vdev(config, legs, label, keep, release_seq, clock, timeout))
            })
            .collect();
        let session = Session {
            writer_epoch: (plan.max_epoch + 1).max(opts.writer_epoch),
            epoch_first_seq: plan.next_seq,
        };
        let shared =
            Arc::new(Shared::new(pool, assembled, session, plan.next_seq, opts, leg_timeout_ms));
        shared.write_epoch_markers();
        let writer_shared = Arc::clone(&shared);
        let writer = std::thread::Builder::new()
            .name("slog-writer".into())
            .spawn(move || run_writer(writer_shared))
            .map_err(|e| {
                LogError::io(std::path::Path::new("slog-writer"), "spawn writer thread", e)
            })?;
        Ok(IntentLog { shared, writer: Some(writer) })
    }

    /// Group commit: appends the records and returns once they are durable on every healthy
    /// leg of the vdev they went to (and every earlier commit is durable too).
    pub async fn commit(&self, records: Vec<LogRecord>) -> Result<CommitReceipt, LogError> {
        self.enqueue(records).await?.durable().await
    }

    /// The first half of `commit`: the records take their place in the log's order (sequence
    /// numbers follow queue order) when this returns; [`QueuedCommit::durable`] waits for the
    /// device flush. A caller that must keep its own order between commits (the pool: records in
    /// the order their writes were applied) enqueues under its own lock and waits outside it.
    pub async fn enqueue(&self, records: Vec<LogRecord>) -> Result<QueuedCommit<'_>, LogError> {
        let shared = &self.shared;
        let started_us = shared.clock.mono_us();
        StatsCounters::add(&shared.stats.sync_requests, 1);
        for record in &records {
            record.validate().map_err(LogError::InvalidRecord)?;
        }
        let payload_bytes: u64 = records.iter().map(|r| r.encoded_len_bytes()).sum();
        if block_len_upper_bound(payload_bytes) > u64::from(u32::MAX) {
            let total_bytes = self.space_total_bytes();
            return Err(LogError::LogFull {
                needed_bytes: block_len_upper_bound(payload_bytes),
                free_bytes: 0,
                total_bytes,
            });
        }
        let permit = shared.admission.acquire().await.map_err(|_| LogError::Closed)?;
        let (reply, answer) = oneshot::channel();
        {
            let mut queue = shared.queue.lock();
            if queue.shutdown {
                return Err(LogError::Closed);
            }
            queue.waiters.push_back(Waiter { records, payload_bytes, durable: true, reply });
        }
        // No wake-up of the writer thread: `durable` writes the batch itself when nobody else
        // is writing, and whoever is writing takes the queue next (writer.rs `lead`).
        Ok(QueuedCommit { shared, answer, _permit: permit, started_us, led: false })
    }

    /// Queues `records` to be written to the log devices without a flush, and returns at once
    /// (no waiting, no admission permit). The records take their place in the log's order as
    /// with `enqueue`; a later commit's flush makes them durable, and until then a power cut may
    /// keep them or not. The answer says when the block is on every online leg (a process crash
    /// can no longer lose it) or why it is not: a caller must then not count them as logged.
    ///
    /// When the newest queued waiter is a write ahead the writer has not taken yet, the records
    /// join it (`Ok(None)`: that one's answer covers them too), so a burst of writes while the
    /// writer is busy becomes one waiter and one block, and the queue holds at most one write
    /// ahead behind each waiter the writer has yet to take.
    pub fn write_ahead(&self, records: Vec<LogRecord>) -> Result<Option<WrittenAhead>, LogError> {
        for record in &records {
            record.validate().map_err(LogError::InvalidRecord)?;
        }
        let payload_bytes: u64 = records.iter().map(|r| r.encoded_len_bytes()).sum();
        if block_len_upper_bound(payload_bytes) > u64::from(u32::MAX) {
            return Err(LogError::LogFull {
                needed_bytes: block_len_upper_bound(payload_bytes),
                free_bytes: 0,
                total_bytes: self.space_total_bytes(),
            });
        }
        let mut queue = self.shared.queue.lock();
        if queue.shutdown {
            return Err(LogError::Closed);
        }
        let max_batch_bytes = self.shared.max_batch_bytes;
        if let Some(last) = queue.waiters.back_mut() {
            if !last.durable && last.payload_bytes + payload_bytes <= max_batch_bytes {
                last.records.extend(records);
                last.payload_bytes += payload_bytes;
                return Ok(None);
            }
        }
        let (reply, answer) = oneshot::channel();
        queue.waiters.push_back(Waiter { records, payload_bytes, durable: false, reply });
        drop(queue);
        self.shared.queue_wake.notify_one();
        Ok(Some(WrittenAhead { answer }))
    }

    /// Space of records whose txg is <= `txg` becomes reusable (once the new head is
    /// durable, which the writer does in the background or before it needs the space).
    /// Never waits for device I/O. A record is released only once every record committed
    /// before it is released too (see `Ring::release_before_seq`).
    pub fn release_through_txg(&self, txg: u64) {
        // Held back while a replay stream reads the log (release.rs).
        self.shared.release_through_txg(txg);
    }

    /// Waits until the writer thread has nothing queued and nothing in hand: every commit
    /// answered and every head a release asked for written. False if that took longer than
    /// `timeout` (a device that hangs). A simulation cuts the power only at such a point, so
    /// that what the devices hold does not depend on how fast the writer thread ran.
    pub fn wait_idle(&self, timeout: std::time::Duration) -> bool {
        // A watchdog on the writer thread, a real OS thread: bounded in real time whatever the
        // injected clock does (a manual clock would never reach the deadline).
        #[allow(clippy::disallowed_methods)]
        let deadline = std::time::Instant::now() + timeout;
        let mut queue = self.shared.queue.lock();
        while queue.busy || queue.leading || !queue.waiters.is_empty() || queue.head_dirty {
            if queue.shutdown {
                return true;
            }
            if self.shared.idle_wake.wait_until(&mut queue, deadline).timed_out() {
                return false;
            }
        }
        true
    }

    /// Per vdev and leg: path, state, error counters, volatile flag, space.
    /// Changes how long a mirror's write cycle waits for a leg once another answered it
    /// (`OpenOptions::leg_timeout_ms`); the next cycle uses it.
    pub fn set_leg_timeout_ms(&self, leg_timeout_ms: u64) {
        self.shared.leg_timeout_ms.store(leg_timeout_ms, Ordering::Relaxed);
    }

    pub fn status(&self) -> Vec<VdevStatus> {
        self.shared.vdevs.read().iter().map(|v| v.status()).collect()
    }

    pub fn stats(&self) -> LogStats {
        self.shared.stats.snapshot(self.space_used_bytes(), self.space_total_bytes())
    }

    pub fn space_used_bytes(&self) -> u64 {
        self.shared.space_used_bytes()
    }

    pub fn space_total_bytes(&self) -> u64 {
        self.shared.space_total_bytes()
    }

    /// The vdev configurations as they stand now (after replace/add/remove).
    pub fn vdev_configs(&self) -> Vec<VdevConfig> {
        self.shared.vdevs.read().iter().map(|v| v.config()).collect()
    }

    /// Commits queued for the next device write (queue depth; bounded by `max_waiters`).
    pub fn queued_commits(&self) -> usize {
        self.shared.queue.lock().waiters.len()
    }

    /// The writer epoch this log stamps on its blocks.
    pub fn writer_epoch(&self) -> u64 {
        self.shared.session.writer_epoch
    }
}

impl std::fmt::Debug for IntentLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntentLog")
            .field("pool", &self.shared.pool.name)
            .field("vdevs", &self.shared.vdevs.read().len())
            .field("next_seq", &self.shared.next_seq.load(Ordering::Relaxed))
            .field("writer_epoch", &self.shared.session.writer_epoch)
            .finish()
    }
}

impl Drop for IntentLog {
    fn drop(&mut self) {
        self.shared.queue.lock().shutdown = true;
        self.shared.queue_wake.notify_all();
        self.shared.admission.close();
        if let Some(writer) = self.writer.take() {
            if writer.join().is_err() {
                tracing::error!("slog writer thread panicked");
            }
        }
    }
}

fn check_unique(vdevs: &[VdevConfig]) -> Result<(), LogError> {
    let mut paths: Vec<_> = vdevs.iter().flat_map(|v| v.legs.iter()).collect();
    let mut guids: Vec<_> = vdevs.iter().map(|v| v.vdev_guid).collect();
    let (path_count, guid_count) = (paths.len(), guids.len());
    paths.sort();
    paths.dedup();
    guids.sort_unstable();
    guids.dedup();
    if paths.len() != path_count || guids.len() != guid_count {
        return Err(LogError::InvalidConfig("a device or vdev appears twice".into()));
    }
    Ok(())
}

/// Records queued by [`IntentLog::write_ahead`]: written to the devices once answered, durable
/// only after a later commit.
pub struct WrittenAhead {
    answer: oneshot::Receiver<Result<CommitReceipt, LogError>>,
}

impl WrittenAhead {
    /// `None` while the writer has not got to the block; then whether it was written.
    pub fn try_outcome(&mut self) -> Option<Result<CommitReceipt, LogError>> {
        match self.answer.try_recv() {
            Ok(result) => Some(result),
            Err(oneshot::error::TryRecvError::Empty) => None,
            Err(oneshot::error::TryRecvError::Closed) => Some(Err(LogError::Closed)),
        }
    }

    /// Waits until the block is written to every online leg (or failed).
    pub async fn written(self) -> Result<CommitReceipt, LogError> {
        self.answer.await.map_err(|_| LogError::Closed)?
    }
}

/// Records queued in the log's order by [`IntentLog::enqueue`], not yet known to be durable.
pub struct QueuedCommit<'a> {
    shared: &'a Arc<Shared>,
    answer: tokio::sync::oneshot::Receiver<Result<CommitReceipt, LogError>>,
    /// Held until the answer: it bounds the commits in flight (admission).
    _permit: tokio::sync::SemaphorePermit<'a>,
    started_us: u64,
    /// `durable` ran: the waiter was written, or left to whoever was writing.
    led: bool,
}

impl Drop for QueuedCommit<'_> {
    /// A commit dropped before `durable` (its caller was cancelled) must still be written:
    /// later commits queue behind it.
    fn drop(&mut self) {
        if !self.led {
            self.shared.queue_wake.notify_one();
        }
    }
}

impl QueuedCommit<'_> {
    /// Returns once the records are durable on every healthy leg (and every earlier commit too).
    /// When nobody is writing the log, the caller writes the queued batch itself, blocking its
    /// thread for the device write and flush (writer.rs `lead`).
    pub async fn durable(mut self) -> Result<CommitReceipt, LogError> {
        self.led = true;
        crate::writer::lead(self.shared);
        let result = (&mut self.answer).await.map_err(|_| LogError::Closed)?;
        self.shared
            .stats
            .record_latency_us(self.shared.clock.mono_us().saturating_sub(self.started_us));
        result
    }
}
