//! Log devices: the trait the log writes through, a real file/block-device implementation and
//! an in-memory crash-simulating implementation for tests.

pub mod crash;
pub mod file;
mod volatile;

use std::io;
use std::path::Path;
use std::sync::Arc;

pub use volatile::is_volatile_path;

/// One log leg's storage. Offsets and lengths are whole 512-byte sectors (labels and heads
/// whole 4 KiB units, blocks whole `write_unit_bytes`); buffers passed to `write_at`/`read_at`
/// by the log are 4 KiB aligned (O_DIRECT).
pub trait LogDevice: Send + Sync {
    /// Reads exactly `buf.len()` bytes at `offset_bytes`.
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes all of `buf` at `offset_bytes`. Not durable until `flush` returns.
    fn write_at(&self, offset_bytes: u64, buf: &[u8]) -> io::Result<()>;
    /// Makes every completed write durable (fdatasync).
    fn flush(&self) -> io::Result<()>;
    /// Usable size of the device.
    fn len_bytes(&self) -> u64;
    /// True when the device loses its content at power off (tmpfs, ramfs, RAM disk).
    fn is_volatile(&self) -> bool;
    /// The path the device was opened from (for errors and status).
    fn path(&self) -> &Path;
    /// The smallest write the device makes atomically (its physical sector): a write of whole
    /// units at a unit boundary cannot tear bytes outside itself. Log blocks are padded to it.
    /// 4 KiB unless the device knows better.
    fn write_unit_bytes(&self) -> u64 {
        crate::layout::BLOCK_SIZE_BYTES
    }
}

/// Opens devices by path. The log never opens paths itself, so tests can substitute
/// in-memory devices ([`crash::MemProvider`]).
pub trait DeviceProvider: Send + Sync {
    /// Opens an existing device; `io::ErrorKind::NotFound` when it is absent.
    fn open(&self, path: &Path) -> io::Result<Arc<dyn LogDevice>>;
    /// Opens the device, creating a file of `size_bytes` when it does not exist.
    fn create(&self, path: &Path, size_bytes: u64) -> io::Result<Arc<dyn LogDevice>>;
}
