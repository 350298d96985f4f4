//! The storage side of the server: what an export must implement. The NBD server turns
//! protocol requests into calls on [`BlockDevice`] and maps [`DeviceError`] to NBD error
//! values in exactly one place, [`DeviceError::nbd_errno`].

use crate::wire::consts::{NBD_EINVAL, NBD_EIO, NBD_ENOSPC, NBD_ENOTSUP, NBD_EPERM, NBD_ESHUTDOWN};

/// One run of the allocation map reported by [`BlockDevice::block_status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub length_bytes: u64,
    /// Not allocated in the backing store (NBD_STATE_HOLE).
    pub hole: bool,
    /// Reads as zeroes (NBD_STATE_ZERO).
    pub zero: bool,
}

/// Failure of a device operation, small enough that each kind maps to one NBD errno.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("I/O error: {0}")]
    Io(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("no space: {0}")]
    NoSpace(String),
    #[error("export is read-only")]
    ReadOnly,
    #[error("not supported: {0}")]
    NotSupported(String),
    #[error("device is shutting down")]
    Shutdown,
}

impl DeviceError {
    /// The NBD error value sent to the client for this error.
    pub fn nbd_errno(&self) -> u32 {
        match self {
            DeviceError::Io(_) => NBD_EIO,
            DeviceError::InvalidArgument(_) => NBD_EINVAL,
            DeviceError::NoSpace(_) => NBD_ENOSPC,
            DeviceError::ReadOnly => NBD_EPERM,
            DeviceError::NotSupported(_) => NBD_ENOTSUP,
            DeviceError::Shutdown => NBD_ESHUTDOWN,
        }
    }
}

/// A byte-addressable volume served over NBD. The server has already checked every
/// range against `size_bytes()` and every length against its limits before calling.
#[async_trait::async_trait]
pub trait BlockDevice: Send + Sync + 'static {
    fn size_bytes(&self) -> u64;

    /// Alignment below which I/O is inefficient (NBD preferred block size).
    fn preferred_block_bytes(&self) -> u32 {
        4096
    }

    /// Smallest addressable unit (NBD minimum block size, a power of two, 1 or 512
    /// typically). Requests not aligned to it are refused with EINVAL.
    fn min_block_bytes(&self) -> u32 {
        1
    }

    fn read_only(&self) -> bool {
        false
    }

    async fn read(&self, offset: u64, length_bytes: u32) -> Result<bytes::Bytes, DeviceError>;

    /// The same bytes as [`BlockDevice::read`], as parts in order, for a caller that writes them
    /// out with one vectored write instead of needing them in one buffer. A device that holds
    /// its data in pieces (blocks) returns them without copying; by default, one part.
    async fn read_parts(
        &self,
        offset: u64,
        length_bytes: u32,
    ) -> Result<Vec<bytes::Bytes>, DeviceError> {
        Ok(vec![self.read(offset, length_bytes).await?])
    }

    /// With `fua`, returns only once the data is durable.
    async fn write(&self, offset: u64, data: bytes::Bytes, fua: bool) -> Result<(), DeviceError>;

    /// Makes every write acknowledged before this call durable (for every connection:
    /// the server advertises MULTI_CONN).
    async fn flush(&self) -> Result<(), DeviceError>;

    async fn trim(&self, offset: u64, length_bytes: u32) -> Result<(), DeviceError>;

    /// Zeroes the range; `may_trim == false` (NBD_CMD_FLAG_NO_HOLE) asks for allocated
    /// zeroes rather than a hole.
    async fn write_zeroes(
        &self,
        offset: u64,
        length_bytes: u32,
        may_trim: bool,
        fua: bool,
    ) -> Result<(), DeviceError>;

    /// Cheap zeroing available? (for NBD_CMD_FLAG_FAST_ZERO: the server replies ENOTSUP
    /// without calling `write_zeroes` when false)
    fn fast_zero(&self) -> bool {
        true
    }

    /// Prefetch hint (NBD_CMD_CACHE). Never asked for more than the server's
    /// `max_request_bytes` at once: a longer request arrives in pieces, one after the other,
    /// so an implementation may read the range into a buffer.
    async fn cache(&self, offset: u64, length_bytes: u32) -> Result<(), DeviceError>;

    /// Allocation status for base:allocation, covering at least the first byte of the
    /// range. Extents past the range are allowed; the server clips them.
    async fn block_status(
        &self,
        offset: u64,
        length_bytes: u32,
    ) -> Result<Vec<Extent>, DeviceError>;
}
