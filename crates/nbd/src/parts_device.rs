//! A [`MemDevice`] that answers reads in parts, for tests: each part `part_bytes` long (the last
//! shorter) and cut from a buffer of its own, as the engine answers with its 4 KiB blocks
//! ([`BlockDevice::read_parts`]), so a front end that sends the parts as they are (FUSE's writev,
//! the ring entry's copies) is tested with many of them. With `short_by_one_part` the answer
//! leaves its last part out, a device bug the front end must report, not turn into a hole.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;

use crate::device::{BlockDevice, DeviceError, Extent};
use crate::mem_device::MemDevice;

pub struct PartsDevice {
    pub inner: MemDevice,
    pub part_bytes: usize,
    /// Reads answered in parts.
    pub parts_reads: AtomicU64,
    /// Leave the last part of each answer out.
    pub short_by_one_part: AtomicBool,
}

impl PartsDevice {
    pub fn new(size_bytes: u64, part_bytes: usize) -> PartsDevice {
        PartsDevice {
            inner: MemDevice::new(size_bytes),
            part_bytes: part_bytes.max(1),
            parts_reads: AtomicU64::new(0),
            short_by_one_part: AtomicBool::new(false),
        }
    }
}

#[async_trait::async_trait]
impl BlockDevice for PartsDevice {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    async fn read(&self, offset: u64, length: u32) -> Result<Bytes, DeviceError> {
        self.inner.read(offset, length).await
    }
    async fn read_parts(&self, offset: u64, length: u32) -> Result<Vec<Bytes>, DeviceError> {
        self.parts_reads.fetch_add(1, Ordering::SeqCst);
        let all = self.inner.read(offset, length).await?;
        let mut parts: Vec<Bytes> =
            all.chunks(self.part_bytes).map(Bytes::copy_from_slice).collect();
        if self.short_by_one_part.load(Ordering::SeqCst) {
            parts.pop();
        }
        Ok(parts)
    }
    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), DeviceError> {
        self.inner.write(offset, data, fua).await
    }
    async fn flush(&self) -> Result<(), DeviceError> {
        self.inner.flush().await
    }
    async fn trim(&self, offset: u64, length: u32) -> Result<(), DeviceError> {
        self.inner.trim(offset, length).await
    }
    async fn write_zeroes(
        &self,
        offset: u64,
        length: u32,
        may_trim: bool,
        fua: bool,
    ) -> Result<(), DeviceError> {
        self.inner.write_zeroes(offset, length, may_trim, fua).await
    }
    async fn cache(&self, offset: u64, length: u32) -> Result<(), DeviceError> {
        self.inner.cache(offset, length).await
    }
    async fn block_status(&self, offset: u64, length: u32) -> Result<Vec<Extent>, DeviceError> {
        self.inner.block_status(offset, length).await
    }
}
