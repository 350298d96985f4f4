//! Test devices beyond MemDevice: one whose flush waits for the test's permission, and one
//! that models a power cut by keeping what a flush made durable apart from what was merely
//! written. The one that refuses requests not aligned to 512 bytes is `fardisk_nbd::SectorDevice`
//! (shared with the FUSE unit tests).

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use fardisk_nbd::{BlockDevice, DeviceError, Extent, MemDevice};
use tokio::sync::Semaphore;

/// Flush blocks until the test calls `release_flush`.
pub struct GatedDevice {
    pub inner: MemDevice,
    permits: Semaphore,
    pub flushes_started: AtomicU64,
    pub flushes_finished: AtomicU64,
}

impl GatedDevice {
    pub fn new(size_bytes: u64) -> GatedDevice {
        GatedDevice {
            inner: MemDevice::new(size_bytes),
            permits: Semaphore::new(0),
            flushes_started: AtomicU64::new(0),
            flushes_finished: AtomicU64::new(0),
        }
    }

    pub fn release_flush(&self) {
        self.permits.add_permits(1);
    }
}

#[async_trait::async_trait]
impl BlockDevice for GatedDevice {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    async fn read(&self, offset: u64, length: u32) -> Result<Bytes, DeviceError> {
        self.inner.read(offset, length).await
    }
    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), DeviceError> {
        self.inner.write(offset, data, fua).await
    }
    async fn flush(&self) -> Result<(), DeviceError> {
        self.flushes_started.fetch_add(1, Ordering::SeqCst);
        self.permits.acquire().await.map_err(|_| DeviceError::Shutdown)?.forget();
        self.flushes_finished.fetch_add(1, Ordering::SeqCst);
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

enum Pending {
    Write(u64, Bytes),
    Trim(u64, u32),
    Zero(u64, u32, bool),
}

/// Most un-flushed operations kept; a test exceeding it has a runaway writer.
const PENDING_MAX: usize = 1 << 20;

/// Reads see every write; `durable` holds only what a flush (or a FUA write, modelled as
/// flush-then-write) made durable: the image a power cut would leave.
pub struct CrashDevice {
    current: MemDevice,
    durable: MemDevice,
    pending: tokio::sync::Mutex<Vec<Pending>>,
    pub flushes: AtomicU64,
}

impl CrashDevice {
    pub fn new(size_bytes: u64) -> CrashDevice {
        CrashDevice {
            current: MemDevice::new(size_bytes),
            durable: MemDevice::new(size_bytes),
            pending: tokio::sync::Mutex::new(Vec::new()),
            flushes: AtomicU64::new(0),
        }
    }

    /// The bytes that would survive a power cut now.
    pub fn durable_image(&self) -> Vec<u8> {
        self.durable.contents(0, self.durable.size_bytes()).expect("whole device")
    }

    async fn record(&self, pending: &mut Vec<Pending>, op: Pending) {
        assert!(pending.len() < PENDING_MAX, "CrashDevice: {PENDING_MAX} writes without a flush");
        pending.push(op);
    }

    async fn drain(&self, pending: &mut Vec<Pending>) -> Result<(), DeviceError> {
        for op in pending.drain(..) {
            match op {
                Pending::Write(offset, data) => self.durable.write(offset, data, false).await?,
                Pending::Trim(offset, length) => self.durable.trim(offset, length).await?,
                Pending::Zero(offset, length, may_trim) => {
                    self.durable.write_zeroes(offset, length, may_trim, false).await?
                }
            }
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl BlockDevice for CrashDevice {
    fn size_bytes(&self) -> u64 {
        self.current.size_bytes()
    }
    async fn read(&self, offset: u64, length: u32) -> Result<Bytes, DeviceError> {
        self.current.read(offset, length).await
    }
    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), DeviceError> {
        let mut pending = self.pending.lock().await;
        self.current.write(offset, data.clone(), false).await?;
        self.record(&mut pending, Pending::Write(offset, data)).await;
        if fua {
            self.drain(&mut pending).await?;
        }
        Ok(())
    }
    async fn flush(&self) -> Result<(), DeviceError> {
        let mut pending = self.pending.lock().await;
        self.flushes.fetch_add(1, Ordering::SeqCst);
        self.drain(&mut pending).await
    }
    async fn trim(&self, offset: u64, length: u32) -> Result<(), DeviceError> {
        let mut pending = self.pending.lock().await;
        self.current.trim(offset, length).await?;
        self.record(&mut pending, Pending::Trim(offset, length)).await;
        Ok(())
    }
    async fn write_zeroes(
        &self,
        offset: u64,
        length: u32,
        may_trim: bool,
        fua: bool,
    ) -> Result<(), DeviceError> {
        let mut pending = self.pending.lock().await;
        self.current.write_zeroes(offset, length, may_trim, false).await?;
        self.record(&mut pending, Pending::Zero(offset, length, may_trim)).await;
        if fua {
            self.drain(&mut pending).await?;
        }
        Ok(())
    }
    async fn cache(&self, offset: u64, length: u32) -> Result<(), DeviceError> {
        self.current.cache(offset, length).await
    }
    async fn block_status(&self, offset: u64, length: u32) -> Result<Vec<Extent>, DeviceError> {
        self.current.block_status(offset, length).await
    }
}
