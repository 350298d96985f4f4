//! The requests the CLI sends the daemon: one variant per command, with typed arguments. On the
//! wire a request is `{"cmd": "volume_create", "args": {"name": "pg", "size_bytes": 8589934592},
//! "cmdline": "fardisk volume create tank/pg 8G"}`; commands without arguments have no `args`.

use crate::vdev_format::VdevArg;
use fardisk_engine::pool::{split_snapshot_name, HISTORY_KEPT};
use serde::{Deserialize, Serialize};

/// What `fardisk scrub` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScrubAction {
    /// Start a scrub, or resume a paused one.
    #[default]
    Start,
    Pause,
    Stop,
}

/// A snapshot of a volume, `VOLUME@SNAPSHOT` on the wire (checked when it is made or read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SnapshotTarget {
    pub volume: String,
    pub snapshot: String,
}

impl SnapshotTarget {
    /// `VOLUME@SNAPSHOT`, or the engine's refusal.
    pub fn parse(text: &str) -> Result<SnapshotTarget, fardisk_engine::Error> {
        let (volume, snapshot) = split_snapshot_name(text)?;
        Ok(SnapshotTarget { volume: volume.to_string(), snapshot: snapshot.to_string() })
    }
}

impl TryFrom<String> for SnapshotTarget {
    type Error = String;
    fn try_from(text: String) -> Result<SnapshotTarget, String> {
        SnapshotTarget::parse(&text).map_err(|e| e.to_string())
    }
}

impl From<SnapshotTarget> for String {
    fn from(t: SnapshotTarget) -> String {
        format!("{}@{}", t.volume, t.snapshot)
    }
}

fn history_limit_default() -> u64 {
    HISTORY_KEPT as u64
}

/// One request per command the daemon serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", content = "args", rename_all = "snake_case")]
pub enum Request {
    /// Is a daemon there? Answers with its pid.
    Ping,
    /// `status --json` of this pool.
    Status,
    /// `arcstat --json`.
    Arcstat,
    /// Save the hot set now.
    HotsetSave,
    /// Commit the open txg and wait for it.
    Sync,
    /// Drain to the store and stop; answered once the export finished.
    Export,
    VolumeCreate {
        name: String,
        size_bytes: u64,
    },
    VolumeDestroy {
        name: String,
        /// With the volume's snapshots.
        #[serde(default)]
        recursive: bool,
    },
    VolumeResize {
        name: String,
        size_bytes: u64,
    },
    /// Every property with its value and source.
    Get,
    Set {
        property: String,
        value: String,
    },
    Scrub {
        #[serde(default)]
        action: ScrubAction,
    },
    History {
        /// The newest this many events.
        #[serde(default = "history_limit_default")]
        limit: u64,
    },
    SnapshotCreate {
        target: SnapshotTarget,
    },
    SnapshotDestroy {
        target: SnapshotTarget,
    },
    SnapshotList,
    Clone {
        target: SnapshotTarget,
        /// The new volume.
        name: String,
    },
    Promote {
        name: String,
    },
    Rollback {
        target: SnapshotTarget,
        /// Also destroy the volume's snapshots newer than `target`.
        #[serde(default)]
        recursive: bool,
    },
    VdevAdd {
        #[serde(flatten)]
        vdev: VdevArg,
        /// Relabel devices that carry another pool's label.
        #[serde(default)]
        force: bool,
    },
    VdevRemove {
        path: String,
    },
    VdevReplace {
        old: String,
        new: String,
        #[serde(default)]
        force: bool,
    },
}

/// What the daemon needs to know about a command besides its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registration {
    /// The name on the wire (`"cmd"`).
    pub name: &'static str,
    /// A success is recorded in the pool history, as the client's command line.
    pub history: bool,
}

const fn reg(name: &'static str, history: bool) -> Registration {
    Registration { name, history }
}

impl Request {
    /// Every command's registration, in one place: a new command does not compile until it
    /// says whether it enters the history.
    pub fn registration(&self) -> Registration {
        match self {
            Request::Ping => reg("ping", false),
            Request::Status => reg("status", false),
            Request::Arcstat => reg("arcstat", false),
            Request::HotsetSave => reg("hotset_save", false),
            Request::Sync => reg("sync", false),
            // The daemon records the export itself, with what stopped it.
            Request::Export => reg("export", false),
            Request::VolumeCreate { .. } => reg("volume_create", true),
            Request::VolumeDestroy { .. } => reg("volume_destroy", true),
            Request::VolumeResize { .. } => reg("volume_resize", true),
            Request::Get => reg("get", false),
            Request::Set { .. } => reg("set", true),
            Request::Scrub { .. } => reg("scrub", true),
            Request::History { .. } => reg("history", false),
            Request::SnapshotCreate { .. } => reg("snapshot_create", true),
            Request::SnapshotDestroy { .. } => reg("snapshot_destroy", true),
            Request::SnapshotList => reg("snapshot_list", false),
            Request::Clone { .. } => reg("clone", true),
            Request::Promote { .. } => reg("promote", true),
            Request::Rollback { .. } => reg("rollback", true),
            Request::VdevAdd { .. } => reg("vdev_add", true),
            Request::VdevRemove { .. } => reg("vdev_remove", true),
            Request::VdevReplace { .. } => reg("vdev_replace", true),
        }
    }
}

/// A request as it travels: the request and the client's command line (for the history).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    #[serde(flatten)]
    pub request: Request,
    #[serde(default)]
    pub cmdline: String,
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
