//! Heap buffers aligned to the 4 KiB device unit, as O_DIRECT requires.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use crate::layout::{BLOCK_SIZE_BYTES, SECTOR_SIZE_BYTES};

const ALIGN_BYTES: usize = BLOCK_SIZE_BYTES as usize;
const SECTOR_BYTES: usize = SECTOR_SIZE_BYTES as usize;

/// A zero-initialised buffer whose address is a multiple of 4 KiB and whose length is a
/// multiple of 4 KiB (`zeroed`) or of a 512-byte sector (`zeroed_sectors`, for log blocks on
/// devices that write sectors atomically).
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// The allocation: `len` rounded up to 4 KiB.
    cap: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len_bytes` rounded up to a whole number of 4 KiB units (at least one unit).
    pub fn zeroed(len_bytes: usize) -> Self {
        Self::with_len(len_bytes.max(1).div_ceil(ALIGN_BYTES) * ALIGN_BYTES)
    }

    /// Allocates `len_bytes` rounded up to a whole number of 512-byte sectors (at least one).
    pub fn zeroed_sectors(len_bytes: usize) -> Self {
        Self::with_len(len_bytes.max(1).div_ceil(SECTOR_BYTES) * SECTOR_BYTES)
    }

    fn with_len(len: usize) -> Self {
        let cap = len.div_ceil(ALIGN_BYTES) * ALIGN_BYTES;
        let layout = Self::layout(cap);
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Self { ptr, len, cap }
    }

    /// A copy of `bytes`, zero padded to the next 4 KiB unit.
    pub fn copy_from(bytes: &[u8]) -> Self {
        let mut buf = Self::zeroed(bytes.len());
        buf[..bytes.len()].copy_from_slice(bytes);
        buf
    }

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len, ALIGN_BYTES)
            .expect("4 KiB multiple with 4 KiB alignment is a valid layout")
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised bytes for the lifetime of self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for len initialised bytes and uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with exactly this layout.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.cap)) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

/// True when a buffer can be handed to an O_DIRECT read or write as is: a 4 KiB aligned
/// address and whole 512-byte sectors (a device with 4 KiB logical sectors refuses a sector
/// multiple with EINVAL, and `FileDevice` falls back to buffered I/O).
pub fn is_aligned(buf: &[u8]) -> bool {
    (buf.as_ptr() as usize).is_multiple_of(ALIGN_BYTES) && buf.len().is_multiple_of(SECTOR_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_and_aligns() {
        let buf = AlignedBuf::zeroed(1);
        assert_eq!(buf.len(), 4096);
        assert!(is_aligned(&buf));
        let copy = AlignedBuf::copy_from(&[7u8; 5000]);
        assert_eq!(copy.len(), 8192);
        assert_eq!(copy[4999], 7);
        assert_eq!(copy[5000], 0);
        assert!(!is_aligned(&copy[1..]));
        let sectors = AlignedBuf::zeroed_sectors(4288);
        assert_eq!(sectors.len(), 4608);
        assert!(is_aligned(&sectors));
    }
}
