//! Configuration types: what the operator asks for (`VdevSpec`), what the pool remembers
//! (`VdevConfig`), and the options of `format` and `open`.

use std::path::PathBuf;
use std::sync::Arc;

use crate::clock::{Clock, SystemClock};
use crate::device::file::FileProvider;
use crate::device::DeviceProvider;
use crate::layout::DEFAULT_FILE_SIZE_BYTES;

/// A log vdev as the operator names it: one device, or a mirror of several.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum VdevSpec {
    Single(PathBuf),
    Mirror(Vec<PathBuf>),
}

impl VdevSpec {
    pub fn legs(&self) -> Vec<PathBuf> {
        match self {
            VdevSpec::Single(path) => vec![path.clone()],
            VdevSpec::Mirror(paths) => paths.clone(),
        }
    }

    pub fn kind(&self) -> VdevKind {
        match self {
            VdevSpec::Single(_) => VdevKind::Single,
            VdevSpec::Mirror(_) => VdevKind::Mirror,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum VdevKind {
    Single,
    Mirror,
}

/// A formatted log vdev as the pool configuration stores it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VdevConfig {
    pub vdev_guid: u64,
    pub kind: VdevKind,
    /// Leg paths in leg-index order.
    pub legs: Vec<PathBuf>,
}

/// Options of [`crate::IntentLog::format`].
#[derive(Clone)]
pub struct FormatOptions {
    pub provider: Arc<dyn DeviceProvider>,
    /// Size of files created because they did not exist.
    pub size_bytes: u64,
    /// Overwrite a device that carries a label of another pool or role.
    pub force: bool,
    /// Injected randomness for the vdev guid. Pass a fresh random value in production: two
    /// formats with the same seed, pool and paths produce the same guid.
    pub guid_seed: u64,
}

impl FormatOptions {
    pub fn new(provider: Arc<dyn DeviceProvider>, guid_seed: u64) -> Self {
        Self { provider, size_bytes: DEFAULT_FILE_SIZE_BYTES, force: false, guid_seed }
    }
}

impl Default for FormatOptions {
    fn default() -> Self {
        Self::new(Arc::new(FileProvider::default()), 0)
    }
}

/// What `open` does about a leg whose device is absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissingPolicy {
    /// Fail with `LogError::Missing` (the engine refuses the import).
    Refuse,
    /// Open without it: the leg is UNAVAIL, its vdev DEGRADED or FAULTED. Replay then stops
    /// at the first record that only the missing devices held (consistent but stale).
    Degrade,
}

/// Options of [`crate::IntentLog::open`].
#[derive(Clone)]
pub struct OpenOptions {
    pub provider: Arc<dyn DeviceProvider>,
    pub clock: Arc<dyn Clock>,
    /// Group commit: the most bytes of records one device write carries.
    pub max_batch_bytes: u64,
    /// Group commit: the most callers queued or in flight; later callers wait for a slot.
    pub max_waiters: usize,
    pub missing: MissingPolicy,
    /// The writer epoch of this import (e.g. the engine's fencing epoch). The log uses the
    /// larger of this and one more than any epoch found on the devices.
    pub writer_epoch: u64,
    /// How long a mirror's write cycle waits for a leg once another leg has answered it, in
    /// the clock's milliseconds; past it the leg is FAULTED and commits go on without it
    /// (leg_io.rs). Changed at run time with `IntentLog::set_leg_timeout_ms`.
    pub leg_timeout_ms: u64,
}

/// The default `leg_timeout_ms`: far beyond any healthy flush (well under a millisecond; a
/// loaded disk's worst seen here is under a second), so only a device that stopped answering
/// is taken out of service, and short enough that a database's commits stall once, for
/// seconds, rather than until a person comes.
pub const LEG_TIMEOUT_MS_DEFAULT: u64 = 10_000;

impl OpenOptions {
    pub fn new(provider: Arc<dyn DeviceProvider>) -> Self {
        Self {
            provider,
            clock: Arc::new(SystemClock::new()),
            max_batch_bytes: 1024 * 1024,
            max_waiters: 1024,
            missing: MissingPolicy::Refuse,
            writer_epoch: 0,
            leg_timeout_ms: LEG_TIMEOUT_MS_DEFAULT,
        }
    }
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self::new(Arc::new(FileProvider::default()))
    }
}
