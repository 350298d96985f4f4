//! One step of the simulation: an actor's burst of I/O, a read check, a txg sync (alone or racing
//! writes), compaction, a change of store weather, a crash of one of three kinds, a log-leg fault
//! or replacement, a corrupted store object, a clean export and import, a big trim whose frees a
//! crash interrupts half-way (big_frees.rs), or feeding the L2ARC.

use super::devices::LegFault;
use super::history::Op;
use super::{World, VOLUMES};
use bytes::Bytes;
use fardisk_engine::objstore::{FaultPlan, PutMode};
use fardisk_engine::pool::{PoolHealth, ScrubState};
use std::time::Duration;

/// Bounds every wait on the engine (iterations of a yield loop).
const POLLS_MAX: u64 = 2_000_000;

impl World {
    pub async fn run_step(&mut self) {
        let kind = self.rng.below(100);
        self.faulty.note(format!("step {} kind {kind}", self.step));
        match kind {
            0..=39 => self.actor_burst().await,
            40..=51 => self.check_reads().await,
            52..=61 => self.txg_sync().await,
            62..=64 => self.compact().await,
            65..=71 => self.change_weather(),
            72..=78 => self.crash().await,
            79..=82 => self.fault_leg().await,
            83..=85 => self.replace_leg().await,
            86..=88 => self.corrupt_store_object().await,
            89..=91 => self.export_import().await,
            92..=94 => self.big_free_then_crash().await,
            _ => self.feed_cache(),
        }
        // The L2ARC is also fed now and then in passing, as its writer thread would.
        if self.step.is_multiple_of(7) {
            self.feed_cache();
        }
    }

    pub(super) fn bytes(&self, len: u64) -> Vec<u8> {
        match self.rng.below(10) {
            0 => vec![0u8; len as usize],
            1..=3 => vec![(1 + self.rng.below(255)) as u8; len as usize],
            _ => {
                let mut x = self.rng.next_u64() | 1;
                (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect()
            }
        }
    }

    pub(super) async fn write(&mut self, vol: usize, offset: u64, data: Vec<u8>) {
        match self.pool().write(self.vol(vol), offset, Bytes::from(data.clone())).await {
            Ok(_) => {
                self.history.record(Op::Write { vol, offset, data });
                // The write's records go to the log ahead of any flush (log_write_ahead): let
                // the writer finish them, so that the blocks on the devices, and what a power
                // cut keeps of them, are the same on every replay of the seed.
                self.wait_log_idle();
            }
            // A partial-block write reads the rest of its block first; with the store away that
            // read can give up, and the write fails whole (nothing of it applied).
            Err(e)
                if self.store_away()
                    && (!offset.is_multiple_of(4096) || !data.len().is_multiple_of(4096)) =>
            {
                self.report.writes_refused_in_outage += 1;
                tracing::debug!(error = %e, "partial-block write failed while the store is away");
            }
            Err(e) => {
                self.fail(format!("write of {} bytes at {offset} to volume {vol}: {e}", data.len()))
            }
        }
    }

    pub(super) async fn zero(&mut self, vol: usize, offset: u64, len: u64) {
        match self.pool().zero(self.vol(vol), offset, len).await {
            Ok(_) => {
                self.history.record(Op::Zero { vol, offset, len });
                self.wait_log_idle();
            }
            // Like a partial-block write: the partial ends are read first.
            Err(e)
                if self.store_away()
                    && (!offset.is_multiple_of(4096) || !len.is_multiple_of(4096)) =>
            {
                self.report.writes_refused_in_outage += 1;
                tracing::debug!(error = %e, "partial-block trim failed while the store is away");
            }
            Err(e) => self.fail(format!("trim of {len} bytes at {offset} of volume {vol}: {e}")),
        }
    }

    /// A sync request (fsync, NBD FLUSH): when it returns, every write before it is acknowledged.
    async fn sync_request(&mut self) {
        let mark = self.history.mark();
        match self.pool().sync_request().await {
            Ok(()) => self.history.ack_through(mark),
            Err(e) => self.fail(format!("sync request failed: {e}")),
        }
    }

    /// Three actors: a database (small page writes in a hot region, fsync after most batches), a
    /// bulk loader (sequential 16-64 KiB writes and trims, rare fsyncs) and a scatterer (unaligned
    /// writes anywhere, some of them zeros).
    async fn actor_burst(&mut self) {
        match self.rng.below(3) {
            0 => {
                for _ in 0..1 + self.rng.below(4) {
                    let len = 512 * (1 + self.rng.below(16));
                    let offset = self.rng.below((512 << 10) / 512) * 512;
                    let data = self.bytes(len);
                    self.write(0, offset, data).await;
                }
                if self.rng.chance(0.8) {
                    self.sync_request().await;
                }
            }
            1 => {
                let size = VOLUMES[1].1;
                let len = (16 << 10) + self.rng.below(48 << 10);
                let offset = self.rng.below(size / (64 << 10)) * (64 << 10);
                if self.rng.chance(0.2) {
                    self.zero(1, offset, len.min(size - offset)).await;
                } else {
                    let data = self.bytes(len.min(size - offset));
                    self.write(1, offset, data).await;
                }
                if self.rng.chance(0.2) {
                    self.sync_request().await;
                }
            }
            _ => {
                for _ in 0..1 + self.rng.below(6) {
                    let vol = self.rng.below(2) as usize;
                    let len = 1 + self.rng.below(12 << 10);
                    let offset = self.rng.below(VOLUMES[vol].1 - len);
                    let data = self.bytes(len);
                    self.write(vol, offset, data).await;
                }
                if self.rng.chance(0.3) {
                    self.sync_request().await;
                }
            }
        }
    }

    /// Reads return what was written last, or (only while the store is away) an error.
    async fn check_reads(&mut self) {
        for _ in 0..1 + self.rng.below(4) {
            let vol = self.rng.below(2) as usize;
            let len = 1 + self.rng.below(64 << 10);
            let offset = self.rng.below(VOLUMES[vol].1 - len);
            match self.pool().read(self.vol(vol), offset, len as u32).await {
                Ok(got) => {
                    let want = &self.history.current(vol)[offset as usize..(offset + len) as usize];
                    if got[..] != *want {
                        let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
                        self.fail(format!("read of volume {vol} at {offset}+{len}: byte {} is {} but {} was written", offset as usize + at, got[at], want[at]));
                    }
                    self.report.reads_checked += 1;
                }
                Err(e) if self.store_away() => {
                    tracing::debug!(error = %e, "read failed while the store is away")
                }
                Err(e) => self.fail(format!(
                    "read of volume {vol} at {offset}+{len} failed with the store reachable: {e}"
                )),
            }
        }
    }

    /// Waits for `handle`, noting whether the pool said SUSPENDED meanwhile.
    pub(super) async fn watch(
        &mut self,
        mut handle: tokio::task::JoinHandle<fardisk_engine::Result<u64>>,
        what: &str,
    ) -> fardisk_engine::Result<u64> {
        let pool = self.pool();
        let mut suspended = false;
        for _ in 0..POLLS_MAX {
            tokio::select! {
                biased;
                r = &mut handle => {
                    if suspended {
                        self.report.suspended_seen += 1;
                    }
                    return r.unwrap_or_else(|e| self.fail(format!("{what} task: {e}")));
                }
                _ = tokio::task::yield_now() => {
                    suspended |= matches!(pool.health(), PoolHealth::Suspended(_));
                }
            }
        }
        self.fail(format!("{what} did not finish"))
    }

    /// A txg sync, half the time with writes arriving while it uploads (they belong to the next
    /// txg). Through an outage it retries until the store is back, then the pool must be healthy.
    async fn txg_sync(&mut self) {
        let mark = self.history.mark();
        let pool = self.pool();
        let published_before = pool.published_txg();
        if self.rng.chance(0.5) {
            let handle = tokio::spawn(async move { pool.sync_txg().await });
            match self.watch(handle, "txg sync").await {
                Ok(_) => self.history.ack_through(mark),
                Err(e) => self.fail(format!("txg sync failed: {e}")),
            }
            self.check_healthy_if_published(published_before, "after a txg sync");
            return;
        }
        // Whole blocks: a partial one would read first, and a write that waits would let the
        // sync run ahead by however long its packing thread takes, which a replay cannot repeat.
        let writes: Vec<(usize, u64, Vec<u8>)> = (0..1 + self.rng.below(4))
            .map(|_| {
                let vol = self.rng.below(2) as usize;
                let len = 4096 * (1 + self.rng.below(4));
                let offset = self.rng.below((VOLUMES[vol].1 - len) / 4096) * 4096;
                (vol, offset, self.bytes(len))
            })
            .collect();
        let ids: Vec<u32> = (0..VOLUMES.len()).map(|v| self.vol(v)).collect();
        let open_txg = pool.open_txg();
        let done = std::cell::Cell::new(false);
        // One task polls both: the writes run in the same poll that finds the txg closed, before
        // the sync can go on, so they always land in the next txg (and in its second round).
        let sync = async {
            let r = pool.sync_txg().await;
            done.set(true);
            r
        };
        let writer = async {
            for _ in 0..POLLS_MAX {
                if done.get() || pool.open_txg() > open_txg {
                    break;
                }
                tokio::task::yield_now().await;
            }
            for (vol, offset, data) in &writes {
                if let Err(e) = pool.write(ids[*vol], *offset, Bytes::from(data.clone())).await {
                    return Err(format!("write during a sync at {offset} of volume {vol}: {e}"));
                }
            }
            Ok(())
        };
        let (synced, written) = tokio::join!(sync, writer);
        if let Err(e) = written {
            self.fail(e);
        }
        for (vol, offset, data) in writes {
            self.history.record(Op::Write { vol, offset, data });
        }
        match synced {
            Ok(_) => self.history.ack_through(mark),
            Err(e) => self.fail(format!("txg sync failed: {e}")),
        }
        self.check_healthy_if_published(published_before, "after a txg sync");
    }

    async fn compact(&mut self) {
        let mark = self.history.mark();
        let pool = self.pool();
        let published_before = pool.published_txg();
        let handle = tokio::spawn(async move { pool.compact_now().await.map(|n| n as u64) });
        match self.watch(handle, "compaction").await {
            Ok(_) => self.history.ack_through(mark),
            // Compaction reads what it moves before the commit: it may give up while the store
            // is away (nothing changed), never otherwise.
            Err(e) if self.store_away() => {
                tracing::debug!(error = %e, "compaction failed while the store is away")
            }
            Err(e) => self.fail(format!("compaction failed: {e}")),
        }
        self.check_healthy_if_published(published_before, "after compaction");
    }

    /// A commit that reached the store proves it is back: the pool must say so. (One that had
    /// nothing to publish asked the store nothing, so it proves nothing.)
    fn check_healthy_if_published(&self, before: u64, what: &str) {
        if self.pool().published_txg() > before {
            self.check_healthy(what);
        }
    }

    fn change_weather(&mut self) {
        let now_us = self.clock_us();
        self.weather = match self.rng.below(4) {
            0 => {
                // A quarter of the outages last a full minute, the rest 1-30 s.
                let secs = if self.rng.chance(0.25) { 60 } else { 1 + self.rng.below(30) };
                self.report.outages += 1;
                FaultPlan { outage_until_us: now_us + secs * 1_000_000, ..FaultPlan::default() }
            }
            1 => FaultPlan {
                error_rate: 0.01 * (1 + self.rng.below(10)) as f64,
                lost_response_rate: 0.01 * (1 + self.rng.below(10)) as f64,
                // S3's 409 to a create-only PUT racing our own earlier attempt.
                conflict_rate: 0.01 * self.rng.below(10) as f64,
                ..FaultPlan::default()
            },
            2 => FaultPlan {
                latency: Duration::from_millis(20 + self.rng.below(300)),
                jitter: Duration::from_millis(self.rng.below(100)),
                ..FaultPlan::default()
            },
            _ => FaultPlan::default(),
        };
        self.faulty.set_plan(self.weather.clone());
    }

    async fn crash(&mut self) {
        let kind = self.rng.below(3);
        if kind == 1 {
            // Dies after 0-5 more store mutations, somewhere inside the next sync.
            let mark = self.history.mark();
            let budget = self.faulty.mutations() + self.rng.below(6);
            self.faulty.set_plan(FaultPlan {
                crash_after_mutations: Some(budget),
                ..self.weather.clone()
            });
            let refusals = self.counts().crash_refusals;
            let pool = self.pool();
            let handle = tokio::spawn(async move { pool.sync_txg().await.map(|_| ()) });
            for _ in 0..POLLS_MAX {
                if handle.is_finished() || self.counts().crash_refusals > refusals {
                    break;
                }
                tokio::task::yield_now().await;
            }
            if handle.is_finished() && self.counts().crash_refusals == refusals {
                match handle.await {
                    Ok(Ok(())) => self.history.ack_through(mark),
                    other => self.fail(format!("sync before the crash point: {other:?}")),
                }
                self.crash_now::<()>(Vec::new()).await;
            } else {
                self.report.crashes_mid_txg += 1;
                self.crash_now(vec![handle]).await;
            }
            return;
        }
        if kind == 2 && self.log.is_some() && self.bad_legs.is_empty() {
            // Cut the power with a log commit written to both legs but not flushed: the commit
            // was never acknowledged, and its torn remains must not be replayed as data.
            // With log_write_ahead the write's record reaches both legs at once and the sync
            // request below is the flush alone. Heads a release left dirty are written first:
            // their flush would make that record durable before the cut.
            let data = self.bytes(4096);
            self.wait_log_idle();
            self.write(0, self.rng.below(256) * 4096, data).await;
            self.wait_log_idle();
            let held = self.log.as_ref().map(|l| l.hold_flushes()).unwrap_or_default();
            let pool = self.pool();
            // The commit writes and flushes on the thread that runs it when the log writer is
            // idle (fardisk-slog `lead`): on a thread of its own, so that the held flush blocks
            // that thread and not the simulation's.
            let handle = tokio::task::spawn_blocking(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .expect("a runtime for the held commit");
                rt.block_on(async move {
                    let _ = pool.sync_request().await;
                });
            });
            tokio::task::yield_now().await;
            let waiting = held.clone();
            let blocked: Vec<bool> = tokio::task::spawn_blocking(move || {
                waiting
                    .iter()
                    .map(|d| d.wait_for_blocked_flushes(1, Duration::from_secs(10)))
                    .collect()
            })
            .await
            .unwrap_or_default();
            // A leg being brought up to date after a crash may not take this commit; it is
            // quiet, so cutting the power now is still the same cut on every replay.
            if !blocked.iter().any(|b| *b) {
                held.iter().for_each(|d| d.release_flushes());
                self.fail(format!(
                    "a log commit never reached its flush (blocked: {blocked:?}, health {:?})",
                    self.pool().health()
                ));
            }
            self.report.crashes_mid_commit += 1;
            self.crash_at_once(vec![handle]).await;
            return;
        }
        self.crash_now::<()>(Vec::new()).await;
    }

    async fn fault_leg(&mut self) {
        if self.log.is_none() || !self.bad_legs.is_empty() {
            return;
        }
        let leg = self.rng.below(2) as usize;
        let fault = [
            LegFault::FailWrites,
            LegFault::FailFlushes,
            LegFault::Vanish,
            LegFault::Rot,
            LegFault::Hang,
        ][self.rng.below(5) as usize];
        if fault == LegFault::Hang {
            return self.hang_leg(leg).await;
        }
        if let Some(log) = &self.log {
            log.inject(leg, fault, &self.rng);
        }
        self.bad_legs.push(leg);
        self.report.leg_faults += 1;
    }

    /// The operator replaces the bad leg with a new device; the pool must accept it and be
    /// ONLINE again once the live records are copied.
    async fn replace_leg(&mut self) {
        let Some(&leg) = self.bad_legs.first() else { return };
        let (old, new) =
            self.log.as_mut().map(|l| l.new_leg_for(leg)).expect("a bad leg means a log");
        if let Err(e) = self.pool().replace_log_leg(&old, &new, false).await {
            self.fail(format!("replacing log leg {old} by {new}: {e}"));
        }
        self.bad_legs.clear();
        self.report.leg_replacements += 1;
        if !matches!(self.pool().health(), PoolHealth::Online | PoolHealth::Suspended(_)) {
            self.fail(format!("after replacing {old} the pool is {:?}", self.pool().health()));
        }
    }

    /// Flips one bit of a stored segment: reads of what it holds fail or are served from a
    /// verified cached copy, never wrong; scrub reports or repairs it. The object is restored
    /// afterwards (the store's own redundancy, outside fardisk).
    async fn corrupt_store_object(&mut self) {
        if self.store_away() {
            return;
        }
        let keys = self.base.list("segments/").await.expect("list the memory store");
        if keys.is_empty() {
            return;
        }
        let (key, _) = keys[self.rng.below(keys.len() as u64) as usize].clone();
        let original = self.base.get(&key).await.expect("get from the memory store");
        let mut bad = original.to_vec();
        let at = self.rng.below(bad.len() as u64) as usize;
        bad[at] ^= 1 << self.rng.below(8);
        self.base
            .put(&key, Bytes::from(bad), PutMode::Overwrite)
            .await
            .expect("put to the memory store");
        self.report.store_corruptions += 1;
        let pool = self.pool();
        for (vol, (_, size)) in VOLUMES.iter().enumerate() {
            for offset in (0..*size).step_by(64 << 10) {
                if let Ok(got) = pool.read(self.vol(vol), offset, 64 << 10).await {
                    if got[..]
                        != self.history.current(vol)[offset as usize..offset as usize + (64 << 10)]
                    {
                        self.fail(format!("wrong bytes read from volume {vol} at {offset} after {key} was corrupted"));
                    }
                }
            }
        }
        if let Err(e) = pool.scrub_start() {
            self.fail(format!("scrub start: {e}"));
        }
        // Polls, not real time: the scrub task runs on this thread between them, and it says it
        // ended only once its last store request (the history event) is made, so the next step
        // never races what is left of it.
        for _ in 0..POLLS_MAX {
            if !matches!(pool.scrub_progress().state, ScrubState::Scanning | ScrubState::Paused) {
                break;
            }
            tokio::task::yield_now().await;
        }
        let p = pool.scrub_progress();
        if p.state != ScrubState::Finished {
            self.fail(format!("scrub after corrupting {key} ended {:?}", p.state));
        }
        if p.checksum_errors + p.missing_blocks + p.read_errors + p.repaired_blocks > 0 {
            self.report.corruptions_caught_by_scrub += 1;
        }
        self.base.put(&key, original, PutMode::Overwrite).await.expect("restore");
    }

    async fn export_import(&mut self) {
        let mark = self.history.mark();
        let pool = self.pool();
        if let Err(e) = pool.export().await {
            self.fail(format!("export: {e}"));
        }
        self.history.ack_through(mark);
        self.report.exports += 1;
        self.pool = None;
        drop(pool);
        self.import().await;
        self.audit_after_import().await;
    }

    fn feed_cache(&mut self) {
        if let Some(cache) = &self.cache {
            if let Some(l2) = cache.l2() {
                // A second passes: the L2ARC's write-rate budget refills.
                self.clock.advance(Duration::from_secs(1));
                l2.write_tick(&cache.arc().feed());
                l2.flush();
            }
        }
    }
}
