//! Volumes: thin-provisioned block devices of a fixed virtual size with 4 KiB logical blocks
//! (like zvols). Changes are visible at once and recorded by the next txg's root.

use super::names::check_volume_name;
use super::{bad, Pool};
use crate::blockmap::TreeRef;
use crate::dirty::BLOCK_BYTES;
use crate::error::{Error, Result};
use crate::root::VolumeEntry;
use std::collections::BTreeMap;

/// 16 TiB: the size the issue asks for, and what a 4-level map of 4 KiB blocks addresses.
pub const VOLUME_BYTES_MAX: u64 = 16 << 40;

fn check_size(size_bytes: u64) -> Result<()> {
    if size_bytes == 0 || !size_bytes.is_multiple_of(BLOCK_BYTES) || size_bytes > VOLUME_BYTES_MAX {
        return Err(bad(format!(
            "volume size {size_bytes} bytes must be a positive multiple of 4096 up to 16 TiB"
        )));
    }
    Ok(())
}

impl Pool {
    pub fn volume_id(&self, name: &str) -> Option<u32> {
        self.inner.meta.read().volumes.values().find(|v| v.name == name).map(|v| v.id)
    }

    /// Size of a volume, or of a snapshot by its id.
    pub fn volume_size(&self, id: u32) -> Option<u64> {
        let meta = self.inner.meta.read();
        meta.volumes
            .get(&id)
            .map(|v| v.size_bytes)
            .or_else(|| meta.snapshots.get(&id).map(|s| s.size_bytes))
    }

    pub fn volume_entries(&self) -> Vec<VolumeEntry> {
        self.inner.meta.read().volumes.values().cloned().collect()
    }

    pub fn volume_create(&self, name: &str, size_bytes: u64) -> Result<u32> {
        self.check_writable()?;
        check_volume_name(name)?;
        check_size(size_bytes)?;
        let mut meta = self.inner.meta.write();
        if meta.volumes.values().any(|v| v.name == name) {
            return Err(bad(format!(
                "volume '{name}' already exists in pool '{}'",
                self.inner.name
            )));
        }
        let id = meta.root.next_volume_id;
        meta.root.next_volume_id += 1;
        let created_txg = self.open_txg();
        let entry = VolumeEntry {
            id,
            name: name.to_string(),
            size_bytes,
            created_txg,
            tree: TreeRef::empty(id, size_bytes / BLOCK_BYTES),
            allocated_blocks: 0,
            props: BTreeMap::new(),
            origin: None,
        };
        meta.volumes.insert(id, entry);
        self.inner.txg.queue_meta_change();
        Ok(id)
    }

    /// Destroys a volume; its space is freed by the next sync.
    pub fn volume_destroy(&self, name: &str) -> Result<()> {
        self.check_writable()?;
        let id = self.volume_id(name).ok_or_else(|| no_volume(&self.inner.name, name))?;
        let snaps = self.inner.meta.read().snapshot_names_of(id);
        if !snaps.is_empty() {
            return Err(bad(format!(
                "volume '{name}' has {} snapshot(s) ({}); destroy them first, or use -r",
                snaps.len(),
                snaps.iter().map(|s| format!("{name}@{s}")).collect::<Vec<_>>().join(", ")
            )));
        }
        let entry = self
            .inner
            .meta
            .write()
            .volumes
            .remove(&id)
            .ok_or_else(|| Error::Bug("volume vanished".into()))?;
        self.inner.txg.state.lock().open.drop_volume(id);
        let mut p = self.inner.txg.pending.lock();
        p.destroyed.push(entry);
        p.meta_changed = true;
        Ok(())
    }

    /// Grows or shrinks a volume. Shrinking frees the blocks past the new end at the next sync.
    pub fn volume_resize(&self, name: &str, size_bytes: u64) -> Result<()> {
        self.check_writable()?;
        check_size(size_bytes)?;
        let id = self.volume_id(name).ok_or_else(|| no_volume(&self.inner.name, name))?;
        let mut meta = self.inner.meta.write();
        let v = meta.volumes.get_mut(&id).ok_or_else(|| no_volume(&self.inner.name, name))?;
        if size_bytes < v.size_bytes {
            // The blocks past the new end are trimmed, so a later grow reads zeros there.
            self.inner.txg.state.lock().open.trim(
                id,
                size_bytes / BLOCK_BYTES,
                v.size_bytes / BLOCK_BYTES,
            );
        }
        v.size_bytes = size_bytes;
        self.inner.txg.queue_meta_change();
        Ok(())
    }

    pub fn volume_set_prop(&self, name: &str, key: &str, value: &str) -> Result<()> {
        let value = crate::props::canonical_volume_prop(key, value)?;
        let id = self.volume_id(name).ok_or_else(|| no_volume(&self.inner.name, name))?;
        let mut meta = self.inner.meta.write();
        if let Some(v) = meta.volumes.get_mut(&id) {
            v.props.insert(key.to_string(), value);
        }
        self.inner.txg.queue_meta_change();
        Ok(())
    }

    /// Pool properties as stored in the root (explicitly set ones only).
    pub fn props(&self) -> BTreeMap<String, String> {
        self.inner.meta.read().root.props.clone()
    }

    /// Sets a pool property; a size given with a suffix (`16M`) is stored in bytes.
    pub fn set_prop(&self, key: &str, value: &str) -> Result<()> {
        let value = crate::props::canonical_prop(key, value, true)?;
        self.check_writable()?;
        let mut config = self.inner.config.write();
        config.apply_props(&BTreeMap::from([(key.to_string(), value.clone())]))?;
        if let Some(log) = self.inner.intent.log() {
            log.set_leg_timeout_ms(config.log_leg_timeout_ms);
        }
        drop(config);
        self.inner.meta.write().root.props.insert(key.to_string(), value);
        self.inner.txg.queue_meta_change();
        self.inner.txg.kick();
        Ok(())
    }
}

pub(crate) fn no_volume(pool: &str, name: &str) -> Error {
    bad(format!("pool '{pool}' has no volume '{name}' (see 'fardisk volume list {pool}')"))
}
