//! One log vdev at run time: its legs, its ring, and the I/O that keeps legs identical.
//!
//! Every write goes to all online legs in parallel and is followed by a flush on each; a leg
//! whose write or flush fails is FAULTED and the vdev carries on with the others (DEGRADED).
//! The vdev mutex is held across a write cycle so the ring and the legs never disagree.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::block::{encode_block, BlockContext};
use crate::config::{VdevConfig, VdevKind};
use crate::device::LogDevice;
use crate::head::LogHead;
use crate::label::DeviceLabel;
use crate::layout::HEAD_SLOT_OFFSETS_BYTES;
use crate::record::{DecodedRecord, LogRecord};
use crate::ring::{ChainPoint, Extent, Ring};
use crate::scan::{read_block_at, ReadBlockError, RingBounds};
use crate::stats::StatsCounters;
use crate::status::{vdev_state, ErrorClass, HealthState, LegHealth, VdevStatus};

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

pub(crate) struct VdevInner {
    pub legs: Vec<Leg>,
    pub ring: Ring,
    pub head_generation: u64,
    pub next_head_slot: usize,
}

pub(crate) struct Vdev {
    pub guid: u64,
    pub kind: VdevKind,
    pub label: DeviceLabel,
    pub inner: Mutex<VdevInner>,
    pub removing: AtomicBool,
    pub removed: AtomicBool,
    /// Paths and health of the legs, readable while a write cycle holds `inner`.
    legs_view: Mutex<Vec<(PathBuf, Arc<LegHealth>)>>,
    space_used_bytes: AtomicU64,
    space_total_bytes: AtomicU64,
}

/// Why a block could not be written to a vdev.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteFailure {
    NoSpace,
    AllLegsFailed,
}

/// One write of a cycle: bytes at an offset.
pub(crate) type LegWrite<'a> = (u64, &'a [u8]);

impl Vdev {
    pub fn new(guid: u64, kind: VdevKind, label: DeviceLabel, inner: VdevInner) -> Self {
        let legs_view = Mutex::new(legs_view(&inner));
        let vdev = Self {
            guid,
            kind,
            label,
            legs_view,
            inner: Mutex::new(inner),
            removing: AtomicBool::new(false),
            removed: AtomicBool::new(false),
            space_used_bytes: AtomicU64::new(0),
            space_total_bytes: AtomicU64::new(0),
        };
        vdev.update_space(&vdev.inner.lock());
        vdev
    }

    pub fn bounds(&self) -> RingBounds {
        RingBounds { start_bytes: self.label.ring_start_bytes, end_bytes: self.label.ring_end_bytes, vdev_guid: self.guid }
    }

    pub fn config(&self, inner: &VdevInner) -> VdevConfig {
        VdevConfig { vdev_guid: self.guid, kind: self.kind, legs: inner.legs.iter().map(|l| l.path.clone()).collect() }
    }

    pub fn update_space(&self, inner: &VdevInner) {
        self.space_used_bytes.store(inner.ring.used_bytes(), Ordering::Relaxed);
        self.space_total_bytes.store(inner.ring.len_bytes(), Ordering::Relaxed);
    }

    pub fn space_used_bytes(&self) -> u64 {
        self.space_used_bytes.load(Ordering::Relaxed)
    }

    pub fn space_total_bytes(&self) -> u64 {
        self.space_total_bytes.load(Ordering::Relaxed)
    }

    /// True when new batches may go here.
    pub fn accepts_writes(&self, inner: &VdevInner) -> bool {
        !self.removing.load(Ordering::Acquire) && inner.legs.iter().any(|l| l.online_device().is_some())
    }

    pub fn status(&self) -> VdevStatus {
        let legs: Vec<_> = self.legs_view.lock().iter().map(|(path, health)| health.snapshot(path.clone())).collect();
        let state = vdev_state(&legs, self.removing.load(Ordering::Acquire), self.removed.load(Ordering::Acquire));
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
    pub fn write_cycle(&self, inner: &VdevInner, writes: &[LegWrite<'_>], stats: &StatsCounters) -> usize {
        let targets: Vec<(usize, Arc<dyn LogDevice>)> =
            inner.legs.iter().enumerate().filter_map(|(i, l)| l.online_device().map(|d| (i, Arc::clone(d)))).collect();
        let results = run_on_legs(&targets, |device| {
            for (offset, bytes) in writes {
                device.write_at(*offset, bytes)?;
            }
            device.flush()
        });
        let mut ok = 0;
        for (index, result) in results {
            let leg = &inner.legs[index];
            match result {
                Ok(()) => {
                    ok += 1;
                    StatsCounters::add(&stats.leg_flushes, 1);
                }
                Err(err) => {
                    tracing::warn!(path = %leg.path.display(), error = %err, "log leg write failed; leg FAULTED");
                    leg.health.fault(ErrorClass::Write);
                }
            }
        }
        ok
    }

    fn next_head(&self, inner: &mut VdevInner, release_seq: u64, session: Session) -> (LogHead, usize) {
        inner.head_generation += 1;
        let slot = inner.next_head_slot;
        let head = LogHead {
            generation: inner.head_generation,
            vdev_guid: self.guid,
            point: inner.ring.mem_head(),
            release_seq,
            writer_epoch: session.writer_epoch,
            epoch_first_seq: session.epoch_first_seq,
        };
        (head, slot)
    }

    fn head_written(inner: &mut VdevInner, head: &LogHead, slot: usize) {
        inner.ring.durable_head = head.point;
        inner.next_head_slot = 1 - slot;
    }

    /// Writes and flushes the in-memory head so the space behind it can be reused.
    pub fn persist_head(&self, inner: &mut VdevInner, release_seq: u64, session: Session, stats: &StatsCounters) -> bool {
        let (head, slot) = self.next_head(inner, release_seq, session);
        let buf = head.encode();
        let ok = self.write_cycle(inner, &[(HEAD_SLOT_OFFSETS_BYTES[slot], &buf)], stats);
        if ok > 0 {
            Self::head_written(inner, &head, slot);
        }
        ok > 0
    }

    /// Appends one block holding `records` (numbered from `first_seq`) to the ring and makes
    /// it durable on every online leg. A head write that is due rides along in the same flush
    /// (safe: the block only uses space that is free behind the old durable head).
    pub fn write_block(
        &self,
        inner: &mut VdevInner,
        first_seq: u64,
        records: &[&LogRecord],
        release_seq: u64,
        session: Session,
        stats: &StatsCounters,
    ) -> Result<Extent, WriteFailure> {
        if !self.accepts_writes(inner) {
            return Err(WriteFailure::AllLegsFailed);
        }
        let payload: u64 = records.iter().map(|r| r.encoded_len_bytes()).sum();
        let len = crate::block::block_len_for_payload(payload);
        let offset = match inner.ring.place(len, inner.ring.durable_head) {
            Some(offset) => offset,
            None => self.make_room(inner, len, release_seq, session, stats)?,
        };
        let point = ChainPoint { offset_bytes: offset, ..inner.ring.tail };
        let ctx = BlockContext { vdev_guid: self.guid, point, release_seq, writer_epoch: session.writer_epoch, epoch_first_seq: session.epoch_first_seq };
        let (buf, header) = encode_block(&ctx, first_seq, records);
        let head = inner.ring.head_dirty().then(|| self.next_head(inner, release_seq, session));
        let head_buf = head.map(|(h, _)| h.encode());
        let mut writes: Vec<LegWrite<'_>> = Vec::with_capacity(2);
        if let (Some((_, slot)), Some(hb)) = (head, head_buf.as_ref()) {
            writes.push((HEAD_SLOT_OFFSETS_BYTES[slot], hb));
        }
        writes.push((offset, &buf));
        if self.write_cycle(inner, &writes, stats) == 0 {
            return Err(WriteFailure::AllLegsFailed);
        }
        if let Some((h, slot)) = head {
            Self::head_written(inner, &h, slot);
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
        inner.ring.append(extent.clone());
        self.update_space(inner);
        StatsCounters::add(&stats.bytes_logged, len);
        Ok(extent)
    }

    /// Makes released space reusable by persisting the head first; `NoSpace` if even that
    /// would not make room.
    fn make_room(&self, inner: &mut VdevInner, len: u64, release_seq: u64, session: Session, stats: &StatsCounters) -> Result<u64, WriteFailure> {
        if inner.ring.place(len, inner.ring.mem_head()).is_none() {
            return Err(WriteFailure::NoSpace);
        }
        if !self.persist_head(inner, release_seq, session, stats) {
            return Err(WriteFailure::AllLegsFailed);
        }
        inner.ring.place(len, inner.ring.durable_head).ok_or(WriteFailure::NoSpace)
    }

    /// Reads and verifies a live block from the first leg that has it intact; damaged copies
    /// count as checksum errors on their leg. `None` when no leg has a good copy.
    pub fn read_extent(&self, inner: &VdevInner, extent: &Extent) -> Option<Vec<DecodedRecord>> {
        for leg in &inner.legs {
            let Some(device) = leg.online_device() else { continue };
            match read_block_at(device.as_ref(), self.bounds(), extent.point()) {
                Ok(block) if block.header.header_checksum == extent.header_checksum => return Some(block.records),
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

    /// Call after changing `inner.legs`.
    pub fn refresh_legs_view(&self, inner: &VdevInner) {
        *self.legs_view.lock() = legs_view(inner);
    }

    /// Marks the vdev removed and drops its devices.
    pub fn finish_removal(&self) {
        let mut inner = self.inner.lock();
        for leg in &mut inner.legs {
            leg.device = None;
            leg.health.set_state(HealthState::Removed);
        }
        self.removed.store(true, Ordering::Release);
    }
}

fn legs_view(inner: &VdevInner) -> Vec<(PathBuf, Arc<LegHealth>)> {
    inner.legs.iter().map(|l| (l.path.clone(), Arc::clone(&l.health))).collect()
}

/// Runs `op` on every target device, in parallel when there is more than one.
pub(crate) fn run_on_legs<F>(targets: &[(usize, Arc<dyn LogDevice>)], op: F) -> Vec<(usize, io::Result<()>)>
where
    F: Fn(&dyn LogDevice) -> io::Result<()> + Sync,
{
    if let [(index, device)] = targets {
        return vec![(*index, op(device.as_ref()))];
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = targets.iter().map(|(index, device)| (*index, scope.spawn(|| op(device.as_ref())))).collect();
        handles
            .into_iter()
            .map(|(index, handle)| (index, handle.join().unwrap_or_else(|_| Err(io::Error::other("leg I/O thread panicked")))))
            .collect()
    })
}
