//! A request buffer whose pages are in RAM before the first read, and stay there.
//!
//! Why: the kernel copies a request into the reader's buffer through get_user_pages. A page
//! that is not mapped yet (a fresh allocation is only reserved address space) takes the slow
//! path, and that gives up with EINTR when the reading process has a fatal signal pending.
//! fuse_dev_do_read then ends the request with EIO, where a copy that succeeded would have
//! left it in the processing list for FUSE_NOTIFY_RESEND to hand to the next engine. So an
//! engine SIGKILLed while it read a large WRITE into untouched pages failed that write: under
//! a holder, ext4 over the loop device saw an I/O error and PostgreSQL PANICked on its next
//! fsync (e2e 62 in the CI run of 5d6d641). Pages that are present and writable take the fast
//! path, which does not look at signals, so the copy completes and the request is resent.
//!
//! Each buffer is therefore written page by page when it is made and locked in RAM (mlock) so
//! that reclaim cannot take a page back. The lock is best effort: without CAP_IPC_LOCK a
//! RLIMIT_MEMLOCK too small for the buffers leaves them touched but unlocked, which holds
//! until memory pressure swaps them out. What remains is the kernel's own: a page briefly
//! unmapped while compaction migrates it.

use std::alloc::Layout;
use std::ops::{Deref, DerefMut};

/// A zero-filled, page-aligned buffer of `len` bytes, resident and (if allowed) locked.
pub(crate) struct ResidentBuffer {
    pointer: *mut u8,
    len: usize,
    layout: Layout,
    locked: bool,
}

// SAFETY: the buffer is owned memory reached only through &self / &mut self.
unsafe impl Send for ResidentBuffer {}

impl ResidentBuffer {
    /// None only when the allocation itself fails.
    pub(crate) fn new(len: usize) -> Option<ResidentBuffer> {
        let page = page_bytes();
        let size = len.max(1).div_ceil(page) * page;
        let layout = Layout::from_size_align(size, page).ok()?;
        // SAFETY: the layout has a non-zero size.
        let pointer = unsafe { std::alloc::alloc_zeroed(layout) };
        if pointer.is_null() {
            return None;
        }
        // A volatile write per page: a zeroed allocation may be untouched address space, and a
        // plain write of the zero it already holds could be optimised away.
        for offset in (0..size).step_by(page) {
            // SAFETY: offset < size, inside the allocation.
            unsafe { std::ptr::write_volatile(pointer.add(offset), 0) };
        }
        // SAFETY: the range is our own page-aligned allocation.
        let locked = unsafe { libc::mlock(pointer.cast(), size) } == 0;
        if !locked {
            tracing::debug!(
                bytes = size,
                "fuse: cannot lock a request buffer in RAM ({}); it stays touched but unlocked",
                std::io::Error::last_os_error()
            );
        }
        Some(ResidentBuffer { pointer, len, layout, locked })
    }

    /// Whether mlock took (for tests and the debug log).
    #[cfg(test)]
    pub(crate) fn locked(&self) -> bool {
        self.locked
    }
}

impl Deref for ResidentBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` bytes of our allocation, initialised (zeroed) at creation.
        unsafe { std::slice::from_raw_parts(self.pointer, self.len) }
    }
}

impl DerefMut for ResidentBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self is the only way in.
        unsafe { std::slice::from_raw_parts_mut(self.pointer, self.len) }
    }
}

impl Drop for ResidentBuffer {
    fn drop(&mut self) {
        // SAFETY: the allocation is ours, page-aligned and whole pages, so unlocking it unlocks
        // no page another allocation shares; it is freed with the layout it was made with.
        unsafe {
            if self.locked {
                libc::munlock(self.pointer.cast(), self.layout.size());
            }
            std::alloc::dealloc(self.pointer, self.layout);
        }
    }
}

fn page_bytes() -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 {
        page as usize
    } else {
        4096
    }
}

/// How many of the pages of `bytes` are resident (mincore), and how many pages it spans.
#[cfg(test)]
pub(crate) fn resident_pages(bytes: &[u8]) -> (usize, usize) {
    let page = page_bytes();
    let start = bytes.as_ptr() as usize / page * page;
    let end = (bytes.as_ptr() as usize + bytes.len()).div_ceil(page) * page;
    let pages = (end - start) / page;
    let mut vector = vec![0u8; pages];
    // SAFETY: [start, end) is mapped (it holds `bytes`); the vector has one byte per page.
    let rc = unsafe { libc::mincore(start as *mut libc::c_void, end - start, vector.as_mut_ptr()) };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    (vector.iter().filter(|v| **v & 1 == 1).count(), pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_buffer_is_resident_before_its_first_read() {
        // The size of a device worker's buffer at the default max_write (1 MiB) and more.
        for len in [4096 + 1, (1 << 20) + 4096, 8 << 20] {
            let buffer = ResidentBuffer::new(len).expect("allocate");
            assert_eq!(buffer.len(), len);
            assert!(buffer.iter().all(|b| *b == 0));
            let (resident, pages) = resident_pages(&buffer);
            assert_eq!(
                resident, pages,
                "{len} bytes: every page must be in RAM before the kernel copies into it"
            );
        }
    }

    #[test]
    fn a_root_process_locks_its_request_buffers() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("not root: RLIMIT_MEMLOCK may refuse the lock; skipped");
            return;
        }
        assert!(ResidentBuffer::new(1 << 20).expect("allocate").locked());
    }

    #[test]
    fn writes_through_the_buffer_stay_inside_it() {
        let mut buffer = ResidentBuffer::new(10_000).expect("allocate");
        buffer[9_999] = 7;
        buffer[0] = 1;
        assert_eq!((buffer[0], buffer[9_999], buffer.len()), (1, 7, 10_000));
    }
}
