//! Snapshots, clones, rollback and promote of volumes. A snapshot is a volume's block map frozen
//! at one txg: O(1) to take (one root entry, no data copied) and readable like a volume by its own
//! id. Every change is queued for the next txg sync, which moves the space with it
//! (txg/snapshot_space.rs), and the call returns once that txg's root is published.

use super::names::check_volume_name;
use super::txg::snapshot_space::SnapshotOp;
use super::txg::unique_bytes;
use super::volume::no_volume;
use super::{bad, syncer, Pool};
use crate::blockmap::TreeRef;
use crate::dirty::BLOCK_BYTES;
use crate::error::Result;
use crate::root::{SnapshotEntry, VolumeEntry};

/// A snapshot as `fardisk list -t snapshot` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SnapshotInfo {
    pub id: u32,
    /// `VOLUME@SNAPSHOT`.
    pub full_name: String,
    pub volume: String,
    pub name: String,
    pub txg: u64,
    pub time_ms: u64,
    pub size_bytes: u64,
    /// Logical bytes of the volume's allocated blocks when it was taken.
    pub referenced_bytes: u64,
    /// Volumes cloned from it (it cannot be destroyed while any exists).
    pub clones: Vec<String>,
}

impl Pool {
    /// Every snapshot, oldest first within each volume.
    pub fn snapshots(&self) -> Vec<SnapshotInfo> {
        let meta = self.inner.meta.read();
        let mut out: Vec<SnapshotInfo> =
            meta.snapshots.values().map(|s| info(s, &meta.volumes)).collect();
        out.sort_by(|a, b| (&a.volume, a.txg, &a.name).cmp(&(&b.volume, b.txg, &b.name)));
        out
    }

    /// The snapshot `VOLUME@NAME`, if it exists.
    pub fn snapshot(&self, volume: &str, name: &str) -> Option<SnapshotInfo> {
        let id = self.snapshot_id(volume, name)?;
        let meta = self.inner.meta.read();
        meta.snapshots.get(&id).map(|s| info(s, &meta.volumes))
    }

    /// The id of snapshot `VOLUME@NAME` (cheap: devices check it on every request).
    pub fn snapshot_id(&self, volume: &str, name: &str) -> Option<u32> {
        let meta = self.inner.meta.read();
        let vid = meta.volumes.values().find(|v| v.name == volume)?.id;
        meta.snapshots.values().find(|s| s.volume_id == vid && s.name == name).map(|s| s.id)
    }

    /// Physical bytes only this snapshot holds: what destroying it would free.
    pub async fn snapshot_unique_bytes(&self, id: u32) -> Result<u64> {
        unique_bytes::snapshot_unique_bytes(&self.inner, id).await
    }

    /// Takes `VOLUME@NAME`: the volume as of now, which includes every write acknowledged before
    /// the call. Returns once the snapshot is in a published root.
    pub async fn snapshot_create(&self, volume: &str, name: &str) -> Result<SnapshotInfo> {
        self.check_writable()?;
        check_volume_name(name)?;
        let volume_id =
            self.volume_id(volume).ok_or_else(|| no_volume(&self.inner.name, volume))?;
        let id = {
            let mut meta = self.inner.meta.write();
            let pending = self.inner.txg.pending.lock();
            let queued = pending.snapshot_ops.iter().any(|op| matches!(op, SnapshotOp::Create { volume_id: v, name: n, .. } if *v == volume_id && n == name));
            if queued || meta.snapshots.values().any(|s| s.volume_id == volume_id && s.name == name)
            {
                return Err(bad(format!("snapshot '{volume}@{name}' already exists")));
            }
            let id = meta.root.next_volume_id;
            meta.root.next_volume_id += 1;
            id
        };
        self.queue_and_wait(SnapshotOp::Create { id, volume_id, name: name.to_string() }).await?;
        let meta = self.inner.meta.read();
        let s = meta.snapshots.get(&id).ok_or_else(|| no_volume(&self.inner.name, volume))?;
        Ok(info(s, &meta.volumes))
    }

    /// Destroys `VOLUME@NAME`, freeing what only it held. Refused while a clone needs it.
    pub async fn snapshot_destroy(&self, volume: &str, name: &str) -> Result<()> {
        self.check_writable()?;
        let s = self
            .snapshot(volume, name)
            .ok_or_else(|| no_snapshot(&self.inner.name, volume, name))?;
        if !s.clones.is_empty() {
            return Err(bad(format!(
                "snapshot '{volume}@{name}' has dependent clones ({}); destroy them, or promote one with 'fardisk promote'",
                s.clones.join(", ")
            )));
        }
        if self.inner.meta.read().root.destroying.iter().any(|d| d.origin == Some(s.id)) {
            return Err(bad(format!(
                "snapshot '{volume}@{name}' is the origin of a destroyed clone whose space is still being freed; retry once 'fardisk status' no longer shows destroyed snapshots being walked"
            )));
        }
        self.queue_and_wait(SnapshotOp::Destroy { id: s.id }).await
    }

    /// A writable volume `new_name` that starts as `VOLUME@SNAPSHOT` and shares all its data.
    pub async fn clone_volume(&self, volume: &str, snapshot: &str, new_name: &str) -> Result<u32> {
        self.check_writable()?;
        check_volume_name(new_name)?;
        let s = self
            .snapshot(volume, snapshot)
            .ok_or_else(|| no_snapshot(&self.inner.name, volume, snapshot))?;
        let id = {
            let mut meta = self.inner.meta.write();
            if meta.volumes.values().any(|v| v.name == new_name) {
                return Err(bad(format!(
                    "volume '{new_name}' already exists in pool '{}'",
                    self.inner.name
                )));
            }
            let snap = meta
                .snapshots
                .get(&s.id)
                .cloned()
                .ok_or_else(|| no_snapshot(&self.inner.name, volume, snapshot))?;
            let props =
                meta.volumes.get(&snap.volume_id).map(|v| v.props.clone()).unwrap_or_default();
            let id = meta.root.next_volume_id;
            meta.root.next_volume_id += 1;
            let created_txg = self.open_txg();
            meta.volumes.insert(
                id,
                VolumeEntry {
                    id,
                    name: new_name.to_string(),
                    size_bytes: snap.size_bytes,
                    created_txg,
                    tree: TreeRef { tree_id: id, ..snap.tree },
                    allocated_blocks: snap.allocated_blocks,
                    props,
                    origin: Some(snap.id),
                },
            );
            self.inner.txg.queue_meta_change();
            id
        };
        let target = self.open_txg();
        self.inner.txg.kick();
        syncer::wait_published(&self.inner, target).await?;
        Ok(id)
    }

    /// Makes clone `volume` independent of its origin: it takes over the origin's snapshots up to
    /// and including the one it was cloned from, and the former parent becomes its clone (so the
    /// former parent can then be destroyed).
    pub async fn promote(&self, volume: &str) -> Result<()> {
        self.check_writable()?;
        let id = self.volume_id(volume).ok_or_else(|| no_volume(&self.inner.name, volume))?;
        {
            let meta = self.inner.meta.read();
            let Some(origin) =
                meta.volumes.get(&id).and_then(|v| v.origin).and_then(|o| meta.snapshots.get(&o))
            else {
                return Err(bad(format!("volume '{volume}' is not a clone; nothing to promote")));
            };
            let destroying = |v: u32| meta.root.destroying.iter().any(|d| d.volume_id == v);
            if destroying(id) || destroying(origin.volume_id) {
                return Err(bad(format!(
                    "snapshots of '{volume}' or of its origin's volume are still being destroyed; retry once 'fardisk status' no longer shows destroyed snapshots being walked"
                )));
            }
            let mine: Vec<&str> = meta
                .snapshots
                .values()
                .filter(|s| s.volume_id == id)
                .map(|s| s.name.as_str())
                .collect();
            if let Some(clash) = meta.snapshots.values().find(|s| {
                s.volume_id == origin.volume_id
                    && s.txg <= origin.txg
                    && mine.contains(&s.name.as_str())
            }) {
                return Err(bad(format!(
                    "promoting '{volume}' would give it two snapshots named '{}'; destroy '{volume}@{}' first",
                    clash.name, clash.name
                )));
            }
        }
        self.queue_and_wait(SnapshotOp::Promote { clone_id: id }).await
    }

    /// Rolls `volume` back to `VOLUME@SNAPSHOT`, discarding every write since (including unsynced
    /// ones). Newer snapshots are refused unless `destroy_newer`, which destroys them first.
    /// The caller makes sure nothing has the volume open.
    pub async fn rollback(&self, volume: &str, snapshot: &str, destroy_newer: bool) -> Result<()> {
        self.check_writable()?;
        let s = self
            .snapshot(volume, snapshot)
            .ok_or_else(|| no_snapshot(&self.inner.name, volume, snapshot))?;
        let newer: Vec<SnapshotInfo> =
            self.snapshots().into_iter().filter(|o| o.volume == volume && o.txg > s.txg).collect();
        if !newer.is_empty() {
            let names: Vec<&str> = newer.iter().map(|o| o.full_name.as_str()).collect();
            if !destroy_newer {
                return Err(bad(format!(
                    "'{volume}@{snapshot}' is not the newest snapshot of '{volume}' ({} are newer); use -r to destroy them",
                    names.join(", ")
                )));
            }
            if let Some(c) = newer.iter().find(|o| !o.clones.is_empty()) {
                return Err(bad(format!(
                    "newer snapshot '{}' has dependent clones ({}); destroy or promote them first",
                    c.full_name,
                    c.clones.join(", ")
                )));
            }
            for o in newer.iter().rev() {
                self.queue_and_wait(SnapshotOp::Destroy { id: o.id }).await?;
            }
        }
        let volume_id =
            self.volume_id(volume).ok_or_else(|| no_volume(&self.inner.name, volume))?;
        self.inner.txg.state.lock().open.drop_volume(volume_id);
        self.queue_and_wait(SnapshotOp::Rollback { volume_id, snapshot_id: s.id }).await
    }

    /// Destroys a volume together with its snapshots (none may have clones).
    pub async fn volume_destroy_recursive(&self, volume: &str) -> Result<()> {
        self.check_writable()?;
        let snaps: Vec<SnapshotInfo> =
            self.snapshots().into_iter().filter(|s| s.volume == volume).collect();
        if let Some(c) = snaps.iter().find(|s| !s.clones.is_empty()) {
            return Err(bad(format!(
                "snapshot '{}' has dependent clones ({}); destroy or promote them first",
                c.full_name,
                c.clones.join(", ")
            )));
        }
        for s in snaps.iter().rev() {
            self.queue_and_wait(SnapshotOp::Destroy { id: s.id }).await?;
        }
        self.volume_destroy(volume)?;
        self.sync_txg().await.map(|_| ())
    }

    /// Queues `op` for the open txg and waits until that txg's root is published.
    async fn queue_and_wait(&self, op: SnapshotOp) -> Result<()> {
        let target = {
            let mut pending = self.inner.txg.pending.lock();
            pending.snapshot_ops.push(op);
            // Same lock order as the sync's freeze: the txg that takes `pending` is this one.
            self.inner.txg.state.lock().open_txg
        };
        self.inner.txg.kick();
        syncer::wait_published(&self.inner, target).await
    }
}

fn info(s: &SnapshotEntry, volumes: &std::collections::BTreeMap<u32, VolumeEntry>) -> SnapshotInfo {
    let volume = volumes.get(&s.volume_id).map(|v| v.name.clone()).unwrap_or_default();
    SnapshotInfo {
        id: s.id,
        full_name: format!("{volume}@{}", s.name),
        volume,
        name: s.name.clone(),
        txg: s.txg,
        time_ms: s.time_ms,
        size_bytes: s.size_bytes,
        referenced_bytes: s.allocated_blocks * BLOCK_BYTES,
        clones: volumes
            .values()
            .filter(|v| v.origin == Some(s.id))
            .map(|v| v.name.clone())
            .collect(),
    }
}

pub(crate) fn no_snapshot(pool: &str, volume: &str, name: &str) -> crate::error::Error {
    bad(format!(
        "pool '{pool}' has no snapshot '{volume}@{name}' (see 'fardisk snapshot list {pool}')"
    ))
}
