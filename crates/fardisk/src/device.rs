//! The block-device face of a volume, shared by the NBD server and the FUSE image: maps requests
//! onto the pool and pool errors onto device errors in one place.

use bytes::Bytes;
use fardisk_engine::{Error, ErrorKind, Pool};
use fardisk_nbd::{BlockDevice, DeviceError, ExportInfo, ExportProvider, Extent};
use std::sync::Arc;

pub fn device_error(e: Error) -> DeviceError {
    match e.kind() {
        ErrorKind::BadInput => DeviceError::InvalidArgument(e.to_string()),
        ErrorKind::Fenced => DeviceError::ReadOnly,
        _ => DeviceError::Io(e.to_string()),
    }
}

#[derive(Debug)]
pub struct VolumeDevice {
    pool: Pool,
    volume_id: u32,
    name: String,
    read_only: bool,
}

/// Devices alive per (pool guid, volume id): an open image file or NBD connection holds one, so
/// rollback can refuse a volume that is in use.
static OPEN_DEVICES: std::sync::Mutex<std::collections::BTreeMap<(u128, u32), usize>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// How many devices (open image files, NBD connections, lookups in flight) use volume `id`.
pub fn open_count(pool: &Pool, id: u32) -> usize {
    OPEN_DEVICES.lock().map(|m| m.get(&(pool.guid(), id)).copied().unwrap_or(0)).unwrap_or(0)
}

impl Drop for VolumeDevice {
    fn drop(&mut self) {
        if let Ok(mut m) = OPEN_DEVICES.lock() {
            let key = (self.pool.guid(), self.volume_id);
            if let Some(n) = m.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&key);
                }
            }
        }
    }
}

impl VolumeDevice {
    /// `name` is a volume, or `VOLUME@SNAPSHOT` for a snapshot, served read-only.
    pub fn new(pool: Pool, name: &str) -> Option<VolumeDevice> {
        let (volume_id, snapshot) = id_of(&pool, name)?;
        let read_only = snapshot || pool.read_only_txg().is_some();
        if let Ok(mut m) = OPEN_DEVICES.lock() {
            *m.entry((pool.guid(), volume_id)).or_default() += 1;
        }
        Some(VolumeDevice { pool, volume_id, name: name.to_string(), read_only })
    }

    fn check_writable(&self) -> Result<(), DeviceError> {
        if self.read_only {
            return Err(DeviceError::ReadOnly);
        }
        self.check_open()
    }

    fn check_open(&self) -> Result<(), DeviceError> {
        // A volume destroyed and re-created under the same name is a different volume: ids are
        // never reused (one counter for volumes and snapshots), so the id still being there is
        // the check. It runs on every request: a map lookup by id, not a scan of the volume
        // names (issue #19's profile).
        if self.pool.volume_size(self.volume_id).is_none() {
            return Err(DeviceError::Io(format!("volume {} was destroyed", self.name)));
        }
        Ok(())
    }
}

/// The id a device name stands for, and whether it is a (read-only) snapshot.
fn id_of(pool: &Pool, name: &str) -> Option<(u32, bool)> {
    match name.split_once('@') {
        Some((vol, snap)) => pool.snapshot_id(vol, snap).map(|id| (id, true)),
        None => pool.volume_id(name).map(|id| (id, false)),
    }
}

#[async_trait::async_trait]
impl BlockDevice for VolumeDevice {
    fn size_bytes(&self) -> u64 {
        self.pool.volume_size(self.volume_id).unwrap_or(0)
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    async fn read(&self, offset: u64, length_bytes: u32) -> Result<Bytes, DeviceError> {
        self.check_open()?;
        self.pool.read(self.volume_id, offset, length_bytes).await.map_err(device_error)
    }

    async fn read_parts(&self, offset: u64, length_bytes: u32) -> Result<Vec<Bytes>, DeviceError> {
        self.check_open()?;
        self.pool.read_parts(self.volume_id, offset, length_bytes).await.map_err(device_error)
    }

    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), DeviceError> {
        self.check_writable()?;
        self.pool.write(self.volume_id, offset, data).await.map_err(device_error)?;
        if fua {
            self.pool.sync_request().await.map_err(device_error)?;
        }
        Ok(())
    }

    async fn flush(&self) -> Result<(), DeviceError> {
        self.pool.sync_request().await.map_err(device_error)
    }

    async fn trim(&self, offset: u64, length_bytes: u32) -> Result<(), DeviceError> {
        self.check_writable()?;
        self.pool.zero(self.volume_id, offset, length_bytes as u64).await.map_err(device_error)?;
        Ok(())
    }

    async fn write_zeroes(
        &self,
        offset: u64,
        length_bytes: u32,
        _may_trim: bool,
        fua: bool,
    ) -> Result<(), DeviceError> {
        // Zeros are always stored as holes: NO_HOLE cannot be honoured more cheaply than this,
        // and reads of a hole return zeros, which is all NO_HOLE promises a reader.
        self.check_writable()?;
        self.pool.zero(self.volume_id, offset, length_bytes as u64).await.map_err(device_error)?;
        if fua {
            self.pool.sync_request().await.map_err(device_error)?;
        }
        Ok(())
    }

    async fn cache(&self, offset: u64, length_bytes: u32) -> Result<(), DeviceError> {
        self.check_open()?;
        // Read only to fill the caches: the parts, not one buffer built from them.
        self.pool.read_parts(self.volume_id, offset, length_bytes).await.map_err(device_error)?;
        Ok(())
    }

    async fn block_status(
        &self,
        offset: u64,
        length_bytes: u32,
    ) -> Result<Vec<Extent>, DeviceError> {
        self.check_open()?;
        let runs = self
            .pool
            .extents(self.volume_id, offset, length_bytes as u64)
            .await
            .map_err(device_error)?;
        Ok(runs
            .into_iter()
            .map(|(len, allocated)| Extent {
                length_bytes: len,
                hole: !allocated,
                zero: !allocated,
            })
            .collect())
    }
}

/// Every volume of a pool, by name.
#[derive(Debug, Clone)]
pub struct PoolExports {
    pub pool: Pool,
}

impl ExportProvider for PoolExports {
    fn list(&self) -> Vec<ExportInfo> {
        let pool = self.pool.name();
        let mut out: Vec<ExportInfo> = self
            .pool
            .volume_entries()
            .into_iter()
            .map(|v| ExportInfo {
                name: v.name.clone(),
                description: format!("fardisk volume {pool}/{}", v.name),
            })
            .collect();
        out.extend(self.pool.snapshots().into_iter().map(|s| ExportInfo {
            description: format!("fardisk snapshot {pool}/{} (read-only)", s.full_name),
            name: s.full_name,
        }));
        out
    }

    fn open(&self, name: &str) -> Option<Arc<dyn BlockDevice>> {
        VolumeDevice::new(self.pool.clone(), name).map(|d| Arc::new(d) as Arc<dyn BlockDevice>)
    }
}
