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

impl VolumeDevice {
    pub fn new(pool: Pool, name: &str) -> Option<VolumeDevice> {
        let volume_id = pool.volume_id(name)?;
        Some(VolumeDevice { pool, volume_id, name: name.to_string(), read_only: false })
    }

    fn check_open(&self) -> Result<(), DeviceError> {
        // A volume destroyed and re-created under the same name is a different volume.
        if self.pool.volume_id(&self.name) != Some(self.volume_id) {
            return Err(DeviceError::Io(format!("volume {} was destroyed", self.name)));
        }
        Ok(())
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

    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), DeviceError> {
        self.check_open()?;
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
        self.check_open()?;
        self.pool.zero(self.volume_id, offset, length_bytes as u64).await.map_err(device_error)?;
        Ok(())
    }

    async fn write_zeroes(&self, offset: u64, length_bytes: u32, _may_trim: bool, fua: bool) -> Result<(), DeviceError> {
        // Zeros are always stored as holes: NO_HOLE cannot be honoured more cheaply than this,
        // and reads of a hole return zeros, which is all NO_HOLE promises a reader.
        self.check_open()?;
        self.pool.zero(self.volume_id, offset, length_bytes as u64).await.map_err(device_error)?;
        if fua {
            self.pool.sync_request().await.map_err(device_error)?;
        }
        Ok(())
    }

    async fn cache(&self, offset: u64, length_bytes: u32) -> Result<(), DeviceError> {
        self.check_open()?;
        self.pool.read(self.volume_id, offset, length_bytes).await.map_err(device_error)?;
        Ok(())
    }

    async fn block_status(&self, offset: u64, length_bytes: u32) -> Result<Vec<Extent>, DeviceError> {
        self.check_open()?;
        let runs = self.pool.extents(self.volume_id, offset, length_bytes as u64).await.map_err(device_error)?;
        Ok(runs.into_iter().map(|(len, allocated)| Extent { length_bytes: len, hole: !allocated, zero: !allocated }).collect())
    }
}

/// Every volume of a pool, by name.
#[derive(Debug, Clone)]
pub struct PoolExports {
    pub pool: Pool,
}

impl ExportProvider for PoolExports {
    fn list(&self) -> Vec<ExportInfo> {
        self.pool
            .volume_entries()
            .into_iter()
            .map(|v| ExportInfo { name: v.name.clone(), description: format!("fardisk volume {}/{}", self.pool.name(), v.name) })
            .collect()
    }

    fn open(&self, name: &str) -> Option<Arc<dyn BlockDevice>> {
        VolumeDevice::new(self.pool.clone(), name).map(|d| Arc::new(d) as Arc<dyn BlockDevice>)
    }
}
