//! Log devices backed by a regular file or a block device.
//!
//! Writes use O_DIRECT where the file system accepts it, so a log write does not first land in
//! the page cache (and does not evict the database's pages); when O_DIRECT is refused (some
//! file systems) the device falls back to buffered I/O, which is still correct because every
//! commit ends with fdatasync.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use super::{is_volatile_path, DeviceProvider, LogDevice};
use crate::aligned::{is_aligned, AlignedBuf};

/// A file or block device used as a log leg.
pub struct FileDevice {
    path: PathBuf,
    file: RwLock<File>,
    direct: AtomicBool,
    len_bytes: u64,
    volatile: bool,
    write_unit_bytes: u64,
}

impl FileDevice {
    /// Opens an existing file or block device.
    pub fn open(path: &Path, direct_io: bool) -> io::Result<Self> {
        let (file, direct) = open_file(path, direct_io)?;
        Self::from_file(path, file, direct)
    }

    /// Opens `path`, first creating a preallocated file of `size_bytes` if it does not exist.
    pub fn create(path: &Path, size_bytes: u64, direct_io: bool) -> io::Result<Self> {
        if !path.exists() {
            create_preallocated(path, size_bytes)?;
        }
        Self::open(path, direct_io)
    }

    fn from_file(path: &Path, mut file: File, direct: bool) -> io::Result<Self> {
        // Seeking to the end works for regular files and block devices alike.
        let len_bytes = file.seek(SeekFrom::End(0))?;
        let write_unit_bytes = physical_sector_bytes(&file.metadata()?);
        Ok(Self {
            write_unit_bytes,
            path: path.to_path_buf(),
            file: RwLock::new(file),
            direct: AtomicBool::new(direct),
            len_bytes,
            volatile: is_volatile_path(path),
        })
    }

    /// True while the device uses O_DIRECT.
    pub fn is_direct(&self) -> bool {
        self.direct.load(Ordering::Relaxed)
    }

    /// Some file systems accept O_DIRECT at open and refuse it at the first I/O (EINVAL):
    /// reopen buffered once and carry on.
    fn fall_back_to_buffered(&self) -> io::Result<()> {
        let (file, _) = open_file(&self.path, false)?;
        *self.file.write() = file;
        self.direct.store(false, Ordering::Relaxed);
        tracing::warn!(path = %self.path.display(), "O_DIRECT refused; using buffered I/O with fdatasync");
        Ok(())
    }

    fn with_retry<T>(&self, mut op: impl FnMut(&File) -> io::Result<T>) -> io::Result<T> {
        let result = op(&self.file.read());
        match result {
            Err(err) if self.is_direct() && err.raw_os_error() == Some(libc::EINVAL) => {
                self.fall_back_to_buffered()?;
                op(&self.file.read())
            }
            other => other,
        }
    }
}

impl LogDevice for FileDevice {
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()> {
        if self.is_direct() && !is_aligned(buf) {
            let mut bounce = AlignedBuf::zeroed(buf.len());
            self.with_retry(|file| file.read_exact_at(&mut bounce, offset_bytes))?;
            buf.copy_from_slice(&bounce[..buf.len()]);
            return Ok(());
        }
        self.with_retry(|file| file.read_exact_at(buf, offset_bytes))
    }

    fn write_at(&self, offset_bytes: u64, buf: &[u8]) -> io::Result<()> {
        if self.is_direct() && !is_aligned(buf) {
            let bounce = AlignedBuf::copy_from(buf);
            return self.with_retry(|file| file.write_all_at(&bounce[..buf.len()], offset_bytes));
        }
        self.with_retry(|file| file.write_all_at(buf, offset_bytes))
    }

    fn flush(&self) -> io::Result<()> {
        let file = self.file.read();
        file.sync_data()?;
        // A deleted file still takes writes through our descriptor, but nothing could ever read
        // them back at the next import: the leg is gone, and must say so (one statx per flush).
        if link_count(&file)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} was deleted", self.path.display()),
            ));
        }
        Ok(())
    }

    fn len_bytes(&self) -> u64 {
        self.len_bytes
    }

    fn is_volatile(&self) -> bool {
        self.volatile
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn write_unit_bytes(&self) -> u64 {
        self.write_unit_bytes
    }
}

/// The file's link count, asked of the kernel alone (`statx` with `STATX_NLINK`).
///
/// Why not `fstat`: it also fetches the file's change time, and since Linux 6.13 (multigrain
/// timestamps) a fetched change time makes the file's next write take a fine-grained time, which
/// always differs from the one stored. Every log write then changed the inode, and on a host file
/// system where `fdatasync` writes a changed inode (ext4 without a journal) every commit cost the
/// disk one more request between the log block and the flush (docs/design/0004). Asked for the
/// link count alone, the kernel leaves the times unfetched, and writes within one clock tick keep
/// the tick's time and the inode clean. A kernel without `statx` (before 4.11) has no multigrain
/// times either, so the `fstat` fallback costs nothing there; where a filter refuses `statx`
/// on a newer kernel, the fallback keeps the check at the old cost.
fn link_count(file: &File) -> io::Result<u64> {
    use std::os::fd::AsRawFd;
    // SAFETY: statx writes into a zeroed struct we own.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: the descriptor is open for the call's length, the path is an empty NUL-terminated
    // string (AT_EMPTY_PATH: the descriptor itself), and `stx` is a valid, writable statx.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_NLINK,
            &mut stx,
        )
    };
    if rc == 0 && stx.stx_mask & libc::STATX_NLINK != 0 {
        return Ok(u64::from(stx.stx_nlink));
    }
    // No statx (ENOSYS), or a seccomp filter that refuses it (EPERM in some container
    // profiles): fstat answers too, at the inode write's cost; a real error it reports itself.
    Ok(std::os::unix::fs::MetadataExt::nlink(&file.metadata()?))
}

/// The physical sector size of the block device that holds `meta` (itself, for a block device
/// node; the file system's device for a file), from sysfs; 4 KiB when unknown (tmpfs, network
/// file systems, no sysfs). Like ZFS's ashift, what the device reports decides how small a log
/// block may be.
fn physical_sector_bytes(meta: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let dev = if meta.file_type().is_block_device() { meta.rdev() } else { meta.dev() };
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let base = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    // A partition has no queue/ of its own: its disk's is one level up.
    [base.join("queue/physical_block_size"), base.join("../queue/physical_block_size")]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(crate::layout::BLOCK_SIZE_BYTES, crate::layout::clamp_write_unit)
}

fn open_file(path: &Path, direct_io: bool) -> io::Result<(File, bool)> {
    if direct_io {
        match OpenOptions::new().read(true).write(true).custom_flags(libc::O_DIRECT).open(path) {
            Ok(file) => return Ok((file, true)),
            Err(err) if err.raw_os_error() == Some(libc::EINVAL) => {}
            Err(err) => return Err(err),
        }
    }
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    Ok((file, false))
}

/// Zeros written per call while creating a log file.
const CREATE_CHUNK_BYTES: usize = 1 << 20;

/// Creates the file with every block written once, so that fdatasync after a log write never
/// has to commit file-system metadata: neither a newly allocated extent (a sparse file) nor the
/// conversion of an unwritten one (`posix_fallocate`), which on ext4 cost a journal commit per
/// sync write for the whole first pass over the ring (measured: `bench/run.sh sync-writes`).
fn create_preallocated(path: &Path, size_bytes: u64) -> io::Result<()> {
    let file = OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
    let zeros = vec![0u8; CREATE_CHUNK_BYTES];
    let mut offset = 0u64;
    while offset < size_bytes {
        let n = (size_bytes - offset).min(CREATE_CHUNK_BYTES as u64) as usize;
        file.write_all_at(&zeros[..n], offset)?;
        offset += n as u64;
    }
    file.sync_all()?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        File::open(parent)?.sync_all()?;
    }
    Ok(())
}

/// Opens real files and block devices.
#[derive(Clone, Debug)]
pub struct FileProvider {
    pub direct_io: bool,
}

impl Default for FileProvider {
    fn default() -> Self {
        Self { direct_io: true }
    }
}

impl DeviceProvider for FileProvider {
    fn open(&self, path: &Path) -> io::Result<Arc<dyn LogDevice>> {
        Ok(Arc::new(FileDevice::open(path, self.direct_io)?))
    }

    fn create(&self, path: &Path, size_bytes: u64) -> io::Result<Arc<dyn LogDevice>> {
        Ok(Arc::new(FileDevice::create(path, size_bytes, self.direct_io)?))
    }
}
