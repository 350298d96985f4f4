//! Health of log vdevs and legs, in the shape of `zpool status`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

use crate::config::VdevKind;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthState {
    Online,
    /// A mirror with at least one leg out of service.
    Degraded,
    /// Out of service after an I/O error, a vanished device or damage.
    Faulted,
    /// The device was absent when the log was opened.
    Unavail,
    /// `remove_vdev` was called; waiting for its records to be released.
    Removing,
    Removed,
}

impl HealthState {
    pub fn name(self) -> &'static str {
        match self {
            HealthState::Online => "ONLINE",
            HealthState::Degraded => "DEGRADED",
            HealthState::Faulted => "FAULTED",
            HealthState::Unavail => "UNAVAIL",
            HealthState::Removing => "REMOVING",
            HealthState::Removed => "REMOVED",
        }
    }

    fn code(self) -> u8 {
        match self {
            HealthState::Online => 0,
            HealthState::Degraded => 1,
            HealthState::Faulted => 2,
            HealthState::Unavail => 3,
            HealthState::Removing => 4,
            HealthState::Removed => 5,
        }
    }

    fn from_code(code: u8) -> Self {
        match code {
            0 => HealthState::Online,
            1 => HealthState::Degraded,
            2 => HealthState::Faulted,
            3 => HealthState::Unavail,
            4 => HealthState::Removing,
            _ => HealthState::Removed,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegStatus {
    pub path: PathBuf,
    pub state: HealthState,
    pub read_errors: u64,
    pub write_errors: u64,
    pub checksum_errors: u64,
    /// Write cycles a mirror gave up waiting for on this leg (`leg_timeout_ms` after they
    /// began, another leg having answered): each took the leg out of service.
    pub timeouts: u64,
    /// The device does not survive a power cut (tmpfs, ramfs, RAM disk).
    pub volatile: bool,
    /// How long the write cycle under way on this leg (its writes and flush) has waited for the
    /// device, in milliseconds of the log's clock; `None` when none is under way. A leg that
    /// does not answer holds commits until the cycle gives up on it (a mirror's other leg
    /// answered, `leg_timeout_ms` passed) or for as long as it hangs (its vdev's only leg), so
    /// this is what `status` shows when sync writes stall on a hung device. It stays set on a
    /// leg given up on until the device answers.
    pub io_waiting_ms: Option<u64>,
}

/// From this long on, `status` calls a leg's unanswered write cycle out: a healthy device
/// answers a log write and flush in well under a millisecond, and a database's commits wait
/// for it.
pub const LEG_IO_STALLED_MS: u64 = 2_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VdevStatus {
    pub vdev_guid: u64,
    pub kind: VdevKind,
    pub state: HealthState,
    pub legs: Vec<LegStatus>,
    pub space_used_bytes: u64,
    pub space_total_bytes: u64,
}

/// Per-leg health, readable without taking the vdev lock (status never waits for I/O).
#[derive(Debug)]
pub(crate) struct LegHealth {
    state: AtomicU8,
    read_errors: AtomicU64,
    write_errors: AtomicU64,
    checksum_errors: AtomicU64,
    timeouts: AtomicU64,
    volatile: AtomicBool,
    /// When the write cycle under way on this leg started (the log clock's monotonic ms, plus
    /// one so that 0 means none is under way).
    io_started_ms_plus_one: AtomicU64,
}

/// Which counter an error goes to.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ErrorClass {
    Read,
    Write,
}

impl LegHealth {
    pub fn new(state: HealthState, volatile: bool) -> Self {
        Self {
            state: AtomicU8::new(state.code()),
            read_errors: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            checksum_errors: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            volatile: AtomicBool::new(volatile),
            io_started_ms_plus_one: AtomicU64::new(0),
        }
    }

    /// A write cycle on this leg starts at `now_ms` (monotonic).
    pub fn io_started(&self, now_ms: u64) {
        self.io_started_ms_plus_one.store(now_ms.saturating_add(1), Ordering::Release);
    }

    /// The leg answered its cycle (with success or an error).
    pub fn io_finished(&self) {
        self.io_started_ms_plus_one.store(0, Ordering::Release);
    }

    pub fn state(&self) -> HealthState {
        HealthState::from_code(self.state.load(Ordering::Acquire))
    }

    pub fn set_state(&self, state: HealthState) {
        self.state.store(state.code(), Ordering::Release);
    }

    pub fn is_online(&self) -> bool {
        self.state() == HealthState::Online
    }

    /// Counts an I/O error and takes the leg out of service.
    pub fn fault(&self, class: ErrorClass) {
        match class {
            ErrorClass::Read => self.read_errors.fetch_add(1, Ordering::Relaxed),
            ErrorClass::Write => self.write_errors.fetch_add(1, Ordering::Relaxed),
        };
        self.set_state(HealthState::Faulted);
    }

    /// Counts a write cycle given up on at its deadline and takes the leg out of service.
    pub fn time_out(&self) {
        self.timeouts.fetch_add(1, Ordering::Relaxed);
        self.set_state(HealthState::Faulted);
    }

    pub fn add_checksum_errors(&self, count: u64) {
        self.checksum_errors.fetch_add(count, Ordering::Relaxed);
    }

    /// The leg's status at `now_ms` (monotonic, the clock `io_started` was given).
    pub fn snapshot(&self, path: PathBuf, now_ms: u64) -> LegStatus {
        let started = self.io_started_ms_plus_one.load(Ordering::Acquire);
        LegStatus {
            path,
            state: self.state(),
            read_errors: self.read_errors.load(Ordering::Relaxed),
            write_errors: self.write_errors.load(Ordering::Relaxed),
            checksum_errors: self.checksum_errors.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            volatile: self.volatile.load(Ordering::Relaxed),
            io_waiting_ms: (started > 0).then(|| now_ms.saturating_sub(started - 1)),
        }
    }
}

/// A vdev's state from its legs' states.
pub(crate) fn vdev_state(legs: &[LegStatus], removing: bool, removed: bool) -> HealthState {
    if removed {
        return HealthState::Removed;
    }
    if removing {
        return HealthState::Removing;
    }
    let online = legs.iter().filter(|l| l.state == HealthState::Online).count();
    match online {
        0 => HealthState::Faulted,
        n if n == legs.len() => HealthState::Online,
        _ => HealthState::Degraded,
    }
}
