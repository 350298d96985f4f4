//! The pool's metadata in memory: the root the next txg will record, with the volumes (ahead of
//! the last published root: creates, resizes and properties show at once) and the snapshots (as
//! of the last sync, which alone changes them). Properties are read from here on every write
//! that depends on one (`sync`, `logbias`).

use crate::root::{Root, SnapshotEntry, VolumeEntry};
use std::collections::BTreeMap;

/// Everything the in-memory pool knows that the next root will record.
#[derive(Debug)]
pub(crate) struct Meta {
    pub root: Root,
    /// Volumes by id, as of now (ahead of the last published root).
    pub volumes: BTreeMap<u32, VolumeEntry>,
    /// Snapshots by id, as of the last sync (only the sync changes them).
    pub snapshots: BTreeMap<u32, SnapshotEntry>,
}

impl Meta {
    pub fn new(root: &Root) -> Meta {
        Meta {
            root: root.clone(),
            volumes: root.volumes.iter().map(|v| (v.id, v.clone())).collect(),
            snapshots: root.snapshots.iter().map(|s| (s.id, s.clone())).collect(),
        }
    }

    /// A property of the volume if it sets one, else of the pool.
    pub fn prop(&self, volume_id: Option<u32>, key: &str) -> Option<String> {
        if let Some(v) =
            volume_id.and_then(|id| self.volumes.get(&id)).and_then(|v| v.props.get(key))
        {
            return Some(v.clone());
        }
        self.root.props.get(key).cloned()
    }

    /// `sync=always`: every write is a sync request.
    pub fn sync_always(&self) -> bool {
        self.prop(None, "sync").as_deref() == Some("always")
    }

    /// `sync=disabled`: sync requests return at once (unsafe, as in ZFS; for benchmarks only).
    pub fn sync_disabled(&self) -> bool {
        self.prop(None, "sync").as_deref() == Some("disabled")
    }

    /// `logbias=throughput` on the volume (or the pool): big writes skip the log.
    pub fn logbias_throughput(&self, volume_id: u32) -> bool {
        self.prop(Some(volume_id), "logbias").as_deref() == Some("throughput")
    }

    /// Snapshot names of a volume (volume destroy refuses while any exists).
    pub fn snapshot_names_of(&self, volume_id: u32) -> Vec<String> {
        self.snapshots
            .values()
            .filter(|s| s.volume_id == volume_id)
            .map(|s| s.name.clone())
            .collect()
    }
}
