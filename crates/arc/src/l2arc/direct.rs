//! Reads of a cache device that bypass the kernel's page cache (O_DIRECT).
//!
//! The L2ARC is a cache of its own: reading it through the page cache would keep a second
//! copy of every block in RAM, evict the database's pages to make room for it, and make the
//! device look faster than it is. O_DIRECT needs the buffer, offset and length aligned to the
//! device's logical block; entries sit at arbitrary byte offsets inside a log block, so a read
//! is widened to whole 4 KiB units and the wanted bytes copied out.
//!
//! Some file systems (tmpfs among them) refuse O_DIRECT at open or at the first read; the
//! device then falls back to buffered reads, and says so in its stats.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// O_DIRECT's alignment for every device this runs on (4 KiB sectors or smaller).
pub(crate) const DIRECT_ALIGN_BYTES: u64 = 4096;

/// A zeroed heap buffer aligned to [`DIRECT_ALIGN_BYTES`], freed on drop.
struct AlignedBuf {
    ptr: *mut u8,
    layout: Layout,
}

impl AlignedBuf {
    fn zeroed(len_bytes: usize) -> Self {
        let layout = Layout::from_size_align(len_bytes.max(1), DIRECT_ALIGN_BYTES as usize)
            .expect("aligned layout of a positive size is valid");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Self { ptr, layout }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for layout.size() initialised bytes and uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
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
        reader.read_exact_at(0, DIRECT_ALIGN_BYTES as usize).ok()?;
        Some(reader)
    }

    /// Reads exactly `len` bytes at `offset`: one aligned read that covers them.
    pub(crate) fn read_exact_at(&self, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
        let start = offset - offset % DIRECT_ALIGN_BYTES;
        let end = (offset + len as u64).div_ceil(DIRECT_ALIGN_BYTES) * DIRECT_ALIGN_BYTES;
        let mut buf = AlignedBuf::zeroed((end - start) as usize);
        let wide = buf.as_mut_slice();
        self.file.read_exact_at(wide, start)?;
        let skip = (offset - start) as usize;
        Ok(wide[skip..skip + len].to_vec())
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
