//! fardisk-slog: the separate intent log (SLOG) of fardisk.
//!
//! Sync writes (fsync, NBD FLUSH, FUA) are made durable on local log devices in well under a
//! millisecond while the far-away object store catches up in transaction groups. The design
//! follows the ZFS intent log:
//!
//! * records carry a global sequence number and a checksum chained from the previous record;
//!   replay follows the chain and stops at the first break, so a torn write is never replayed;
//! * commit batches are packed into blocks padded to the devices' atomic write unit (physical
//!   sector, 512 B to 4 KiB: format version 2) and written sequentially into a ring on
//!   each log vdev (one device, or a mirror written in parallel); a double-buffered head
//!   records where the oldest live block is;
//! * callers arriving while a flush runs share the next device write (group commit);
//! * space is released per txg once the engine has published it.
//!
//! The byte layouts are in docs/format/slog.md.
//!
//! # Contract with the engine
//!
//! * At import: `IntentLog::open`, then `replay(last_published_txg)`; apply the records in the
//!   order returned and continue with txgs above `Replay::txg_max` (the replayed records stay
//!   in the log until a `release_through_txg` covers their txg).
//! * On a sync request: `commit(records written since the last commit)`; acknowledge the
//!   request only after it returns `Ok`. Every earlier commit is durable by then too.
//! * After txg T is published in the object store: `release_through_txg(T)`.
//! * `LogFull`, `NoHealthyLeg` and `AwaitingRelease` all mean: make the data durable through a
//!   txg sync instead (then release and retry). The records of a commit that returned an
//!   error are not in the log; a later commit does not cover them.
//! * A commit carries at most one block (< 4 GiB and no larger than the ring); split larger
//!   sync requests or sync the txg.

mod admin;
mod aligned;
mod block;
mod checksum;
pub mod clock;
#[cfg(test)]
mod codec_tests;
mod config;
pub mod device;
mod error;
mod format;
// The device decoders for the cargo-fuzz targets in fuzz/ (not an API).
#[doc(hidden)]
pub mod fuzz_api;
mod head;
mod intent_log;
pub mod label;
pub mod layout;
mod le;
mod leg_io;
mod merge;
mod open;
mod queue;
mod record;
mod release;
mod replay;
mod replay_stream;
mod resync;
mod ring;
pub mod rng;
mod scan;
mod shared;
mod stats;
mod status;
mod vdev;
mod window;
mod writer;

pub use admin::RemoveOutcome;
pub use aligned::AlignedBuf;
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{
    FormatOptions, MissingPolicy, OpenOptions, VdevConfig, VdevKind, VdevSpec,
    LEG_TIMEOUT_MS_DEFAULT,
};
pub use device::crash::{CrashDevice, MemProvider};
pub use device::file::{FileDevice, FileProvider};
pub use device::{DeviceProvider, LogDevice};
pub use error::{ErrorKind, LogError};
pub use intent_log::{IntentLog, QueuedCommit, WrittenAhead};
pub use label::{DeviceLabel, Role};
pub use queue::CommitReceipt;
pub use record::{LogRecord, RecordKind};
pub use replay::{Replay, ReplayedRecord};
pub use replay_stream::{ReplayEnd, ReplayStream};
pub use ring::ChainPoint;
pub use stats::{LatencyBucket, LogStats, LATENCY_BUCKETS_US};
pub use status::{HealthState, LegStatus, VdevStatus, LEG_IO_STALLED_MS};
