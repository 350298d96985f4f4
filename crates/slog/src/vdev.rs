//! One log vdev at run time: its legs, its ring, and the I/O that keeps legs identical.
//!
//! Every write goes to all online legs in parallel (leg_io.rs); a commit's block is followed by
//! a flush on each, a block written ahead (records of plain writes, not yet asked to be durable)
//! is not, and the next commit's flush covers it. A leg whose write or flush fails is FAULTED and the
//! vdev carries on with the others (DEGRADED).
//!
//! A head is only ever written in a cycle that flushes: the space behind a head is reused as
//! soon as the head counts as durable, so a head that could still be lost at a power cut would
//! let a new block overwrite blocks that the surviving older head still points to.
//!
//! Two locks: `inner` (legs and head slots) is held across a whole write cycle, so only one
//! writer touches the devices; `ring` is only ever held for bookkeeping, never across I/O, so
//! `release_through_txg`, `status` and space queries never wait for a device. Lock order:
//! `inner`, then `ring`. Only the writer moves the tail and the durable head; a release only
//! pops live blocks, which cannot invalidate a placement made against the durable head.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::block::{block_len_at, encode_block, BlockContext};
use crate::clock::Clock;
use crate::config::{VdevConfig, VdevKind};
use crate::device::LogDevice;
use crate::head::LogHead;
use crate::label::DeviceLabel;
use crate::layout::{clamp_write_unit, BLOCK_SIZE_BYTES, HEAD_SLOT_OFFSETS_BYTES};
use crate::leg_io::{LegDeadline, LegTarget, LegThreads, LegWrite};
use crate::record::{DecodedRecord, LogRecord};
use crate::ring::{ChainPoint, Extent, Ring};
use crate::scan::{read_block_at, ReadBlockError, RingBounds};
use crate::stats::StatsCounters;
use crate::status::{vdev_state, ErrorClass, HealthState, LegHealth, VdevStatus};
use crate::window::ReadWindow;

/// One leg (one device) of a vdev.
pub(crate) struct Leg {
    pub path: PathBuf,
    pub device: Option<Arc<dyn LogDevice>>,
    pub health: Arc<LegHealth>,
}

impl Leg {
    pub fn online_device(&self) -> Option<&Arc<dyn LogDevice>> {
        self.device.as_ref().filter(|_| self.health.is_online())
    }
}

/// Identity of the writer that stamps blocks and heads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Session {
    pub writer_epoch: u64,
    pub epoch_first_seq: u64,
}

/// The device side of a vdev, held across I/O.
pub(crate) struct VdevInner {
    pub legs: Vec<Leg>,
    pub head_generation: u64,
    pub next_head_slot: usize,
    /// The first record sequence number of the oldest block written ahead on this vdev and not
    /// yet flushed (`None`: everything written is durable). If no leg can flush it, that is
    /// where the log's history may break.
    pub unflushed_first_seq: Option<u64>,
}

pub(crate) struct Vdev {
    pub guid: u64,
    pub kind: VdevKind,
    pub label: DeviceLabel,
    pub inner: Mutex<VdevInner>,
    /// Ring bookkeeping; never held across I/O.
    pub ring: Mutex<Ring>,
    pub removing: AtomicBool,
    pub removed: AtomicBool,
    /// Paths and health of the legs, readable while a write cycle holds `inner`.
    legs_view: Mutex<Vec<(PathBuf, Arc<LegHealth>)>>,
    space_used_bytes: AtomicU64,
    space_total_bytes: AtomicU64,
    /// Blocks are padded to this (the largest atomic write unit of the legs), so a torn block
    /// write never reaches an earlier block. Recomputed when the legs change.
    unit_bytes: AtomicU64,
    /// The threads that write a mirror's legs, kept across cycles (leg_io.rs).
    leg_threads: LegThreads,
    /// The log's clock: when each leg's write cycle started, for `status` and the deadline.
    clock: Arc<dyn Clock>,
    /// How long a mirror's cycle waits for a leg after another answered it (the log's
    /// `leg_timeout_ms`, shared by its vdevs and changed at run time).
    leg_timeout_ms: Arc<AtomicU64>,
}

/// What a write needs from the log as a whole.
pub(crate) struct WriteCtx<'a> {
    pub session: Session,
    pub stats: &'a StatsCounters,
    /// The global release point (every lower sequence number is released). It is read only
    /// after the head position it goes with, so a head never moves past released records
    /// while claiming a lower release point (which would look like a gap at replay).
    pub release_seq: &'a dyn Fn() -> u64,
}

/// Why a block could not be written to a vdev.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteFailure {
    NoSpace,
    AllLegsFailed,
}

impl Vdev {
    pub fn new(
        guid: u64,
        kind: VdevKind,
        label: DeviceLabel,
        inner: VdevInner,
        ring: Ring,
        clock: Arc<dyn Clock>,
        leg_timeout_ms: Arc<AtomicU64>,
    ) -> Self {
        let legs_view = Mutex::new(legs_view(&inner));
        let unit_bytes = AtomicU64::new(write_unit_bytes(&inner.legs));
        let vdev = Self {
            unit_bytes,
            guid,
            kind,
            label,
            legs_view,
            inner: Mutex::new(inner),
            ring: Mutex::new(ring),
            removing: AtomicBool::new(false),
            removed: AtomicBool::new(false),
            space_used_bytes: AtomicU64::new(0),
            space_total_bytes: AtomicU64::new(0),
            leg_threads: LegThreads::default(),
            clock,
            leg_timeout_ms,
        };
        vdev.update_space(&vdev.ring.lock());
        vdev
    }

    /// The unit this vdev's blocks are padded to.
    pub fn unit_bytes(&self) -> u64 {
        self.unit_bytes.load(Ordering::Relaxed)
    }

    pub fn bounds(&self) -> RingBounds {
        RingBounds {
            start_bytes: self.label.ring_start_bytes,
            end_bytes: self.label.ring_end_bytes,
            vdev_guid: self.guid,
        }
    }

    pub fn config(&self) -> VdevConfig {
        VdevConfig { vdev_guid: self.guid, kind: self.kind, legs: self.leg_paths() }
    }

    pub fn leg_paths(&self) -> Vec<PathBuf> {
        self.legs_view.lock().iter().map(|(path, _)| path.clone()).collect()
    }

    pub fn update_space(&self, ring: &Ring) {
        self.space_used_bytes.store(ring.used_bytes(), Ordering::Relaxed);
        self.space_total_bytes.store(ring.len_bytes(), Ordering::Relaxed);
    }

    pub fn space_used_bytes(&self) -> u64 {
        self.space_used_bytes.load(Ordering::Relaxed)
    }

    pub fn space_total_bytes(&self) -> u64 {
        self.space_total_bytes.load(Ordering::Relaxed)
    }

    /// True when new batches may go here.
    pub fn accepts_writes(&self, inner: &VdevInner) -> bool {
        !self.removing.load(Ordering::Acquire)
            && inner.legs.iter().any(|l| l.online_device().is_some())
    }

    pub fn status(&self) -> VdevStatus {
        let legs: Vec<_> = self
            .legs_view
            .lock()
            .iter()
            .map(|(path, health)| health.snapshot(path.clone(), self.clock.mono_ms()))
            .collect();
        let state = vdev_state(
            &legs,
            self.removing.load(Ordering::Acquire),
            self.removed.load(Ordering::Acquire),
        );
        VdevStatus {
            vdev_guid: self.guid,
            kind: self.kind,
            state,
            legs,
            space_used_bytes: self.space_used_bytes(),
            space_total_bytes: self.space_total_bytes(),
        }
    }

    /// Writes `writes` to every online leg and flushes each, legs in parallel. Returns how
    /// many legs succeeded; failed legs are FAULTED.
    pub fn write_cycle(
        &self,
        inner: &mut VdevInner,
        writes: &[LegWrite<'_>],
        stats: &StatsCounters,
    ) -> usize {
        let ok = self.leg_cycle(inner, writes, true, stats);
        if ok > 0 {
            inner.unflushed_first_seq = None;
        }
        ok
    }

    /// Flushes every online leg if a block was written ahead since the last flush (true when
    /// it flushed). Err with the first unflushed record's sequence number when no leg could.
    pub fn flush_written_ahead(
        &self,
        inner: &mut VdevInner,
        stats: &StatsCounters,
    ) -> Result<bool, u64> {
        let Some(first_seq) = inner.unflushed_first_seq else {
            return Ok(false);
        };
        if self.write_cycle(inner, &[], stats) == 0 {
            return Err(first_seq);
        }
        Ok(true)
    }

    /// The I/O of one cycle: `writes` on every online leg, then a flush when `flush`.
    fn leg_cycle(
        &self,
        inner: &VdevInner,
        writes: &[LegWrite<'_>],
        flush: bool,
        stats: &StatsCounters,
    ) -> usize {
        let targets: Vec<LegTarget> = inner
            .legs
            .iter()
            .enumerate()
            .filter_map(|(i, l)| {
                l.online_device().map(|d| LegTarget {
                    index: i,
                    device: Arc::clone(d),
                    health: Arc::clone(&l.health),
                })
            })
            .collect();
        let now_ms = self.clock.mono_ms();
        for target in &targets {
            target.health.io_started(now_ms);
        }
        let deadline = LegDeadline {
            clock: self.clock.as_ref(),
            started_ms: now_ms,
            timeout_ms: self.leg_timeout_ms.load(Ordering::Relaxed),
        };
        let results = self.leg_threads.run(&targets, writes, flush, &deadline);
        let mut ok = 0;
        for (index, result) in results {
            let leg = &inner.legs[index];
            match result {
                Ok(()) => {
                    ok += 1;
                    if flush {
                        StatsCounters::add(&stats.leg_flushes, 1);
                    }
                }
                Err(err) if err.kind() == std::io::ErrorKind::TimedOut => {
                    tracing::warn!(path = %leg.path.display(), error = %err, "log leg did not answer while its mirror did; leg FAULTED, sync writes go on without it");
                    leg.health.time_out();
                }
                Err(err) => {
                    tracing::warn!(path = %leg.path.display(), error = %err, "log leg write failed; leg FAULTED");
                    leg.health.fault(ErrorClass::Write);
                }
            }
        }
        ok
    }

    fn next_head(&self, inner: &mut VdevInner, ctx: &WriteCtx<'_>) -> (LogHead, usize) {
        inner.head_generation += 1;
        let point = self.ring.lock().mem_head();
        let head = LogHead {
            generation: inner.head_generation,
            vdev_guid: self.guid,
            point,
            release_seq: (ctx.release_seq)(),
            writer_epoch: ctx.session.writer_epoch,
            epoch_first_seq: ctx.session.epoch_first_seq,
        };
        (head, inner.next_head_slot)
    }

    fn head_written(&self, inner: &mut VdevInner, head: &LogHead, slot: usize) {
        self.ring.lock().durable_head = head.point;
        inner.next_head_slot = 1 - slot;
    }

    /// Writes and flushes the in-memory head so the space behind it can be reused.
    pub fn persist_head(&self, inner: &mut VdevInner, ctx: &WriteCtx<'_>) -> bool {
        let (head, slot) = self.next_head(inner, ctx);
        let buf = head.encode();
        let ok = self.write_cycle(inner, &[(HEAD_SLOT_OFFSETS_BYTES[slot], &buf)], ctx.stats);
        if ok > 0 {
            self.head_written(inner, &head, slot);
        }
        ok > 0
    }

    /// Appends one block holding `records` (numbered from `first_seq`) to the ring and, when
    /// `flush`, makes it (and every block written ahead before it) durable on every online leg.
    /// A head write that is due rides along in the same flush (safe: the block only uses space
    /// that is free behind the old durable head); a block written ahead carries no head.
    pub fn write_block(
        &self,
        inner: &mut VdevInner,
        first_seq: u64,
        records: &[&LogRecord],
        flush: bool,
        ctx: &WriteCtx<'_>,
    ) -> Result<Extent, WriteFailure> {
        if !self.accepts_writes(inner) {
            return Err(WriteFailure::AllLegsFailed);
        }
        let payload: u64 = records.iter().map(|r| r.encoded_len_bytes()).sum();
        let unit_bytes = self.unit_bytes();
        let tail = self.ring.lock().tail.offset_bytes;
        let len = block_len_at(tail, payload, unit_bytes);
        let placed = {
            let ring = self.ring.lock();
            ring.place(len, ring.durable_head)
        };
        let offset = match placed {
            Some(offset) => offset,
            None => self.make_room(inner, len, ctx)?,
        };
        // At the ring start (aligned) the block needs no realigning padding: never longer.
        let len = block_len_at(offset, payload, unit_bytes);
        let (point, head_due) = {
            let ring = self.ring.lock();
            (ChainPoint { offset_bytes: offset, ..ring.tail }, flush && ring.head_dirty())
        };
        let block_ctx = BlockContext {
            vdev_guid: self.guid,
            point,
            release_seq: (ctx.release_seq)().min(first_seq),
            writer_epoch: ctx.session.writer_epoch,
            epoch_first_seq: ctx.session.epoch_first_seq,
            unit_bytes,
        };
        let (buf, header) = encode_block(&block_ctx, first_seq, records);
        let head = head_due.then(|| self.next_head(inner, ctx));
        let head_buf = head.map(|(h, _)| h.encode());
        let mut writes: Vec<LegWrite<'_>> = Vec::with_capacity(2);
        if let (Some((_, slot)), Some(hb)) = (head, head_buf.as_ref()) {
            writes.push((HEAD_SLOT_OFFSETS_BYTES[slot], hb));
        }
        writes.push((offset, &buf));
        let ok = if flush {
            self.write_cycle(inner, &writes, ctx.stats)
        } else {
            self.leg_cycle(inner, &writes, false, ctx.stats)
        };
        if ok == 0 {
            return Err(WriteFailure::AllLegsFailed);
        }
        if !flush {
            inner.unflushed_first_seq.get_or_insert(first_seq);
        }
        if let Some((h, slot)) = head {
            self.head_written(inner, &h, slot);
        }
        let extent = Extent {
            offset_bytes: offset,
            len_bytes: len,
            block_seq: header.block_seq,
            prev_chain: header.prev_chain,
            header_checksum: header.header_checksum,
            first_seq,
            record_count: records.len() as u64,
            txg_max: header.txg_max,
        };
        let mut ring = self.ring.lock();
        ring.append(extent.clone());
        self.update_space(&ring);
        StatsCounters::add(&ctx.stats.bytes_logged, len);
        Ok(extent)
    }

    /// Makes released space reusable by persisting the head first; `NoSpace` if even that
    /// would not make room.
    fn make_room(
        &self,
        inner: &mut VdevInner,
        len: u64,
        ctx: &WriteCtx<'_>,
    ) -> Result<u64, WriteFailure> {
        let fits_after_persist = {
            let ring = self.ring.lock();
            ring.place(len, ring.mem_head()).is_some()
        };
        if !fits_after_persist {
            return Err(WriteFailure::NoSpace);
        }
        if !self.persist_head(inner, ctx) {
            return Err(WriteFailure::AllLegsFailed);
        }
        let ring = self.ring.lock();
        ring.place(len, ring.durable_head).ok_or(WriteFailure::NoSpace)
    }

    /// Reads and verifies a live block from the first leg that has it intact; damaged copies
    /// count as checksum errors on their leg. `None` when no leg has a good copy.
    /// `windows` holds what each leg's walk read ahead (one per leg of `inner`, from
    /// [`Vdev::read_windows`]): a walk of the live extents in order reads each leg sequentially.
    pub fn read_extent(
        &self,
        inner: &VdevInner,
        windows: &mut [ReadWindow],
        extent: &Extent,
    ) -> Option<Vec<DecodedRecord>> {
        for (leg, window) in inner.legs.iter().zip(windows.iter_mut()) {
            let Some(device) = leg.online_device() else { continue };
            match read_block_at(device.as_ref(), window, self.bounds(), extent.point()) {
                Ok(block) if block.header.header_checksum == extent.header_checksum => {
                    return Some(block.records)
                }
                Ok(_) | Err(ReadBlockError::Block(_)) => {
                    tracing::warn!(path = %leg.path.display(), offset = extent.offset_bytes, "log block checksum error");
                    leg.health.add_checksum_errors(1);
                }
                Err(ReadBlockError::Io(err)) => {
                    tracing::warn!(path = %leg.path.display(), error = %err, "log leg read failed; leg FAULTED");
                    leg.health.fault(ErrorClass::Read);
                }
            }
        }
        None
    }

    /// The live blocks that hold records (not epoch markers), in chain order: what a replay reads.
    pub fn live_record_extents<B: FromIterator<Extent>>(&self) -> B {
        self.ring.lock().live.iter().filter(|e| e.record_count > 0).cloned().collect()
    }

    /// One empty read-ahead window per leg of `inner`, for [`Vdev::read_extent`].
    pub fn read_windows(&self, inner: &VdevInner) -> Vec<ReadWindow> {
        inner.legs.iter().map(|_| ReadWindow::new(self.bounds().end_bytes)).collect()
    }

    /// Call after changing `inner.legs`.
    pub fn refresh_legs_view(&self, inner: &VdevInner) {
        *self.legs_view.lock() = legs_view(inner);
        self.unit_bytes.store(write_unit_bytes(&inner.legs), Ordering::Relaxed);
    }

    /// Marks the vdev removed. Its devices close when the last reference to it goes (the
    /// writer may still hold one for a moment), so this never waits for I/O.
    pub fn finish_removal(&self) {
        for (_, health) in self.legs_view.lock().iter() {
            health.set_state(HealthState::Removed);
        }
        self.removed.store(true, Ordering::Release);
    }
}

/// The write unit of a vdev: the largest of its legs' (a mirror's block must be atomic on
/// every leg); 4 KiB when no leg is open.
fn write_unit_bytes(legs: &[Leg]) -> u64 {
    legs.iter()
        .filter_map(|l| l.device.as_ref())
        .map(|d| clamp_write_unit(d.write_unit_bytes()))
        .max()
        .unwrap_or(BLOCK_SIZE_BYTES)
}

fn legs_view(inner: &VdevInner) -> Vec<(PathBuf, Arc<LegHealth>)> {
    inner.legs.iter().map(|l| (l.path.clone(), Arc::clone(&l.health))).collect()
}
