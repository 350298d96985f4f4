//! Reads of a cache device that bypass the kernel's page cache (O_DIRECT).
//!
//! The L2ARC is a cache of its own: reading it through the page cache would keep a second
//! copy of every block in RAM, evict the database's pages to make room for it, and make the
//! device look faster than it is. O_DIRECT needs the buffer, offset and length aligned to the
//! device's logical block. Cached blocks start on 4 KiB unit boundaries and take whole units,
//! so a read is exactly the units of one block, into an aligned buffer that is handed out as
//! `Bytes` without a copy.
//!
//! Some file systems (tmpfs among them) refuse O_DIRECT at open or at the first read; the
//! device then falls back to buffered reads, and says so in its stats.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// O_DIRECT's alignment for every device this runs on (4 KiB sectors or smaller).
pub(crate) const DIRECT_ALIGN_BYTES: u64 = 4096;

/// One-unit buffers kept for the next read when dropped, instead of going back to the
/// allocator (4 MiB at most). Every L2ARC hit needs one and every ARC eviction of such a block
/// ends one; an aligned allocation and its free cost about a tenth of a cached read's CPU in
/// `cache-reads` (glibc splits and re-merges chunks around each aligned block).
const SPARE_UNIT_BUFFERS_MAX: usize = 1024;

/// A spare buffer's address (only ever touched again by the one `AlignedBuf` that takes it).
struct Spare(*mut u8);
// SAFETY: a spare buffer is owned by the list alone until popped; nothing else points into it.
unsafe impl Send for Spare {}

static SPARE_UNIT_BUFFERS: parking_lot::Mutex<Vec<Spare>> = parking_lot::const_mutex(Vec::new());

fn unit_layout() -> Layout {
    Layout::from_size_align(DIRECT_ALIGN_BYTES as usize, DIRECT_ALIGN_BYTES as usize)
        .expect("one aligned unit is a valid layout")
}

/// How many one-unit buffers wait for reuse (for tests and the memory bound).
#[cfg(test)]
pub(crate) fn spare_unit_buffers() -> usize {
    SPARE_UNIT_BUFFERS.lock().len()
}

/// A heap buffer aligned to [`DIRECT_ALIGN_BYTES`], freed on drop (a one-unit buffer may be
/// kept for the next read instead, see [`SPARE_UNIT_BUFFERS_MAX`]).
pub(crate) struct AlignedBuf {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: the buffer owns its allocation exclusively (no aliasing pointer escapes except through
// `&self`/`&mut self` borrows), so moving it to another thread is sound.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only reads through `as_ref`, which hands out `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A buffer of `len_bytes` whose contents are not initialised: only for a read that fills
    /// it through a raw pointer, and only read after the read filled every byte.
    pub(crate) fn for_raw_read(len_bytes: usize) -> Self {
        let layout = Layout::from_size_align(len_bytes.max(1), DIRECT_ALIGN_BYTES as usize)
            .expect("aligned layout of a positive size is valid");
        if layout == unit_layout() {
            if let Some(spare) = SPARE_UNIT_BUFFERS.lock().pop() {
                // Its old bytes are never read: the read fills the buffer first.
                return Self { ptr: spare.0, layout };
            }
        }
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Self { ptr, layout }
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }

    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }

    /// A buffer of `len_bytes`, zeroed (so it is initialised memory before a read fills it).
    pub(crate) fn zeroed(len_bytes: usize) -> Self {
        let layout = Layout::from_size_align(len_bytes.max(1), DIRECT_ALIGN_BYTES as usize)
            .expect("aligned layout of a positive size is valid");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Self { ptr, layout }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for layout.size() initialised bytes and uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: ptr is valid for layout.size() initialised bytes; the borrow is shared.
        unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.layout == unit_layout() {
            let mut spare = SPARE_UNIT_BUFFERS.lock();
            if spare.len() < SPARE_UNIT_BUFFERS_MAX {
                spare.push(Spare(self.ptr));
                return;
            }
        }
        // SAFETY: allocated by `for_raw_read` or `zeroed` (or taken from the spares, which only
        // ever hold such allocations) with this layout.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

/// A second, read-only handle on the device file opened with O_DIRECT.
pub(crate) struct DirectReader {
    file: File,
}

impl DirectReader {
    /// Opens `path` for direct reads and proves one works (reads the first sector); `None`
    /// when the file system refuses O_DIRECT.
    pub(crate) fn open(path: &Path) -> Option<Self> {
        let file = OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path).ok()?;
        let reader = Self { file };
        let mut first = AlignedBuf::zeroed(DIRECT_ALIGN_BYTES as usize);
        reader.read_exact_into(&mut first, 0).ok()?;
        Some(reader)
    }

    /// Fills `buf` (aligned) from `offset` (aligned); returns the bytes read, all of them.
    pub(crate) fn read_into(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.file.read_exact_at(buf, offset)?;
        Ok(buf.len())
    }

    /// Fills `buf` from `offset` (both aligned to [`DIRECT_ALIGN_BYTES`]).
    pub(crate) fn read_exact_into(&self, buf: &mut AlignedBuf, offset: u64) -> std::io::Result<()> {
        debug_assert!(offset.is_multiple_of(DIRECT_ALIGN_BYTES));
        self.file.read_exact_at(buf.as_mut_slice(), offset)
    }

    /// Reads exactly `len` bytes at `offset`: one aligned read that covers them.
    #[cfg(test)]
    fn read_exact_at(&self, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
        let start = offset - offset % DIRECT_ALIGN_BYTES;
        let end = (offset + len as u64).div_ceil(DIRECT_ALIGN_BYTES) * DIRECT_ALIGN_BYTES;
        let mut buf = AlignedBuf::zeroed((end - start) as usize);
        self.read_exact_into(&mut buf, start)?;
        let skip = (offset - start) as usize;
        Ok(buf.as_mut_slice()[skip..skip + len].to_vec())
    }
}

impl std::os::fd::AsRawFd for DirectReader {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }
}

/// True when an I/O error means "this file does not take O_DIRECT I/O" rather than damage.
pub(crate) fn is_direct_refusal(err: &std::io::Error) -> bool {
    err.raw_os_error() == Some(libc::EINVAL)
}

/// Writes back and then drops the page-cache copy of `[offset, offset + len)`: the block was
/// written through the page cache (its entries sit at unaligned offsets), but reads of it go
/// around the page cache, so keeping the pages would only waste memory.
pub(crate) fn drop_cached_range(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: plain syscalls on a file descriptor we own; both only advise the kernel.
    unsafe {
        let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        if libc::sync_file_range(fd, offset as i64, len as i64, flags) == 0 {
            libc::posix_fadvise(fd, offset as i64, len as i64, libc::POSIX_FADV_DONTNEED);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dropped one-unit buffers are kept for reuse up to the bound and no further; other sizes
    /// go back to the allocator. (Other tests of this crate drop buffers too, so only the bound
    /// and the reuse of a kept buffer's memory are checked, not exact counts.)
    #[test]
    fn spare_unit_buffers_are_reused_and_bounded() {
        let many: Vec<AlignedBuf> = (0..SPARE_UNIT_BUFFERS_MAX + 50)
            .map(|_| AlignedBuf::for_raw_read(DIRECT_ALIGN_BYTES as usize))
            .collect();
        drop(many);
        assert!(spare_unit_buffers() <= SPARE_UNIT_BUFFERS_MAX);
        assert!(spare_unit_buffers() > 0, "dropped unit buffers are kept");
        let mut reused = AlignedBuf::for_raw_read(DIRECT_ALIGN_BYTES as usize);
        assert_eq!(reused.as_mut_ptr() as usize % DIRECT_ALIGN_BYTES as usize, 0);
        reused.as_mut_slice().fill(7);
        assert!(reused.as_ref().iter().all(|b| *b == 7));
        let two_units = AlignedBuf::for_raw_read(2 * DIRECT_ALIGN_BYTES as usize);
        assert_eq!(two_units.len(), 2 * DIRECT_ALIGN_BYTES as usize);
    }

    #[test]
    fn unaligned_reads_return_exactly_the_bytes_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        // /tmp may be tmpfs (no O_DIRECT); the target directory is on a real file system.
        let path = dir.path().join("dev");
        let data: Vec<u8> =
            (0..5 * DIRECT_ALIGN_BYTES as usize).map(|i| (i * 7 + i / 4096) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let Some(reader) = DirectReader::open(&path) else {
            eprintln!("O_DIRECT refused on {}; nothing to check", path.display());
            return;
        };
        for (offset, len) in [(0u64, 1usize), (4095, 2), (100, 8000), (4096, 4096), (12000, 8480)] {
            let got = reader.read_exact_at(offset, len).unwrap();
            assert_eq!(
                got,
                &data[offset as usize..offset as usize + len],
                "offset {offset} len {len}"
            );
        }
        assert!(
            reader.read_exact_at(5 * DIRECT_ALIGN_BYTES - 10, 20).is_err(),
            "a read past the end is short"
        );
    }
}
