//! A [`MemDevice`] with 512-byte sectors, for tests: like a real disk it refuses a request whose
//! offset or length is not a whole number of sectors (a short tail that ends exactly at the end
//! of a device whose size is not a whole number of sectors is allowed), and counts the refusals,
//! so a test can prove that a front end's read-modify-write never sends an unaligned request.
//! Reads yield once between reading and returning, so concurrent read-modify-write cycles
//! interleave unless the front end serialises them.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::device::{BlockDevice, DeviceError, Extent};
use crate::mem_device::MemDevice;

pub const SECTOR_BYTES: u64 = 512;

pub struct SectorDevice {
    pub inner: MemDevice,
    /// Requests refused for being unaligned.
    pub refused: AtomicU64,
}

impl SectorDevice {
    pub fn new(size_bytes: u64) -> SectorDevice {
        SectorDevice { inner: MemDevice::new(size_bytes), refused: AtomicU64::new(0) }
    }

    fn check(&self, offset: u64, length: u64) -> Result<(), DeviceError> {
        let at_end = offset.checked_add(length) == Some(self.inner.size_bytes());
        if !offset.is_multiple_of(SECTOR_BYTES) || (!length.is_multiple_of(SECTOR_BYTES) && !at_end)
        {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(DeviceError::InvalidArgument(format!("unaligned {offset}+{length}")));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl BlockDevice for SectorDevice {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn min_block_bytes(&self) -> u32 {
        SECTOR_BYTES as u32
    }
    async fn read(&self, offset: u64, length: u32) -> Result<Bytes, DeviceError> {
        self.check(offset, u64::from(length))?;
        let data = self.inner.read(offset, length).await?;
        tokio::task::yield_now().await;
        Ok(data)
    }
    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), DeviceError> {
        self.check(offset, data.len() as u64)?;
        self.inner.write(offset, data, fua).await
    }
    async fn flush(&self) -> Result<(), DeviceError> {
        self.inner.flush().await
    }
    async fn trim(&self, offset: u64, length: u32) -> Result<(), DeviceError> {
        self.check(offset, u64::from(length))?;
        self.inner.trim(offset, length).await
    }
    async fn write_zeroes(
        &self,
        offset: u64,
        length: u32,
        may_trim: bool,
        fua: bool,
    ) -> Result<(), DeviceError> {
        self.check(offset, u64::from(length))?;
        self.inner.write_zeroes(offset, length, may_trim, fua).await
    }
    async fn cache(&self, offset: u64, length: u32) -> Result<(), DeviceError> {
        self.inner.cache(offset, length).await
    }
    async fn block_status(&self, offset: u64, length: u32) -> Result<Vec<Extent>, DeviceError> {
        self.inner.block_status(offset, length).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unaligned_requests_are_refused_and_counted() {
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let device = SectorDevice::new(4096 + 100);
        rt.block_on(async {
            assert!(device.read(0, 512).await.is_ok());
            assert!(device.read(1, 512).await.is_err());
            assert!(device.write(512, Bytes::from(vec![1u8; 100]), false).await.is_err());
            assert!(device.read(4096, 100).await.is_ok(), "the short tail at the end");
            assert!(device.trim(0, 4096).await.is_ok());
        });
        assert_eq!(device.refused.load(Ordering::SeqCst), 2);
    }
}
