//! The kernel's FUSE ABI: opcodes, flags and the structs that cross /dev/fuse and the
//! io_uring ring entries, laid out as `include/uapi/linux/fuse.h` (the BSD-2-licensed uapi
//! header) defines them.
//!
//! The kernel reads and writes these structs in the host's native byte order and layout,
//! so they are `#[repr(C)]` with every padding field spelled out (the header pads each to
//! 64 bits), and their sizes are checked at compile time against the header's. Values move
//! between them and byte buffers only through [`Pod`], whose implementations are limited to
//! plain integer structs without implicit padding.
//!
//! Protocol: we speak 7.[`MINOR`] and accept kernels from 7.[`MINOR_MIN`] on; the reply to
//! INIT carries the smaller of the kernel's minor and ours.

/// Major version of the protocol (the kernel refuses any other).
pub const MAJOR: u32 = 7;
/// The minor version we implement: 7.42 added FUSE_OVER_IO_URING.
pub const MINOR: u32 = 42;
/// Oldest kernel minor we serve: 7.23 gave init_out its 64-byte layout and time_gran.
pub const MINOR_MIN: u32 = 23;
/// The root directory's node id.
pub const ROOT_ID: u64 = 1;
/// The kernel requires read buffers of at least this many bytes.
pub const MIN_READ_BUFFER_BYTES: usize = 8192;

/// Request opcodes (`enum fuse_opcode`).
pub mod opcode {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const ACCESS: u32 = 34;
    pub const INTERRUPT: u32 = 36;
    pub const DESTROY: u32 = 38;
    pub const BATCH_FORGET: u32 = 42;
    pub const FALLOCATE: u32 = 43;
    pub const READDIRPLUS: u32 = 44;
}

/// INIT flags (`flags` holds bits 0..31, `flags2` bits 32..63 shifted down).
pub mod init_flags {
    pub const ASYNC_READ: u64 = 1 << 0;
    pub const BIG_WRITES: u64 = 1 << 5;
    pub const DO_READDIRPLUS: u64 = 1 << 13;
    pub const ASYNC_DIO: u64 = 1 << 15;
    pub const WRITEBACK_CACHE: u64 = 1 << 16;
    pub const PARALLEL_DIROPS: u64 = 1 << 18;
    pub const MAX_PAGES: u64 = 1 << 22;
    pub const INIT_EXT: u64 = 1 << 30;
    pub const DIRECT_IO_ALLOW_MMAP: u64 = 1 << 36;
    /// The kernel can resend requests a previous server read but did not answer
    /// (FUSE_NOTIFY_RESEND); resent requests carry [`super::UNIQUE_RESEND`].
    pub const HAS_RESEND: u64 = 1 << 39;
    /// Requests may be exchanged through io_uring (Linux 6.14+, `enable_uring`).
    pub const OVER_IO_URING: u64 = 1 << 41;
}

/// Flags of the OPEN reply.
pub mod fopen {
    pub const DIRECT_IO: u32 = 1 << 0;
    pub const KEEP_CACHE: u32 = 1 << 1;
    /// No FLUSH on close(): nothing is buffered to flush, and a FLUSH is a round trip that
    /// waits for a server (a process exec'ing with an image open sends one per inherited
    /// descriptor, which deadlocks if that process is the server about to start).
    pub const NOFLUSH: u32 = 1 << 5;
    pub const PARALLEL_DIRECT_WRITES: u32 = 1 << 6;
}

/// `fuse_setattr_in.valid` bits.
pub mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const FH: u32 = 1 << 6;
}

/// GETATTR carries a file handle.
pub const GETATTR_FH: u32 = 1 << 0;
/// FSYNC of data only (fdatasync).
pub const FSYNC_FDATASYNC: u32 = 1 << 0;
/// Set in `unique` of a request the kernel sends again after FUSE_NOTIFY_RESEND.
pub const UNIQUE_RESEND: u64 = 1 << 63;
/// Notification code of FUSE_NOTIFY_RESEND (Linux 6.9+): resend every request read and
/// not yet answered on this connection's devices.
pub const NOTIFY_RESEND: i32 = 7;
/// `ioctl(fd, FUSE_DEV_IOC_CLONE, &session_fd)`: `_IOR(229, 0, uint32_t)`.
pub const DEV_IOC_CLONE: libc::c_ulong = 0x8004_e500;

/// io_uring commands (`enum fuse_uring_cmd`).
pub const URING_CMD_REGISTER: u32 = 1;
pub const URING_CMD_COMMIT_AND_FETCH: u32 = 2;
/// Sizes of the first two parts of a ring entry's header buffer.
pub const URING_IN_OUT_HEADER_BYTES: usize = 128;
pub const URING_OP_IN_OUT_BYTES: usize = 128;

/// Plain-old-data: a `#[repr(C)]` struct of integers with no implicit padding, so every
/// byte pattern of its size is a valid value and its bytes can be read and written.
///
/// # Safety
/// Implement only for such structs (the compile-time size checks below guard the layouts).
pub unsafe trait Pod: Copy + Sized {
    /// The value at the start of `bytes`, or None when `bytes` is too short.
    fn read_from(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < std::mem::size_of::<Self>() {
            return None;
        }
        // SAFETY: the length is checked above, `Self: Pod` accepts every byte pattern, and
        // read_unaligned has no alignment requirement.
        Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<Self>()) })
    }

    /// The value's bytes, as the kernel reads them.
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: `Self: Pod` has no padding, so all of its size_of bytes are initialised.
        unsafe {
            std::slice::from_raw_parts(
                (self as *const Self).cast::<u8>(),
                std::mem::size_of::<Self>(),
            )
        }
    }
}

macro_rules! pod_structs {
    ($($(#[$meta:meta])* pub struct $name:ident ($size:expr) { $($field:ident : $ty:ty),* $(,)? })*) => {
        $(
            $(#[$meta])*
            #[repr(C)]
            #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
            pub struct $name { $(pub $field: $ty),* }
            // SAFETY: integer fields only; the size check proves there is no implicit padding.
            unsafe impl Pod for $name {}
            const _: () = assert!(std::mem::size_of::<$name>() == $size);
            const _: () = assert!(std::mem::size_of::<$name>() == 0 $(+ std::mem::size_of::<$ty>())*);
        )*
    };
}

pod_structs! {
    /// Every request starts with this.
    pub struct InHeader (40) {
        len: u32, opcode: u32, unique: u64, nodeid: u64, uid: u32, gid: u32, pid: u32,
        total_extlen: u16, padding: u16,
    }
    /// Every reply and notification starts with this.
    pub struct OutHeader (16) { len: u32, error: i32, unique: u64 }
    /// INIT request; kernels before 7.36 send only the first 16 bytes.
    pub struct InitIn (64) {
        major: u32, minor: u32, max_readahead: u32, flags: u32, flags2: u32, unused: [u32; 11],
    }
    pub struct InitOut (64) {
        major: u32, minor: u32, max_readahead: u32, flags: u32, max_background: u16,
        congestion_threshold: u16, max_write: u32, time_gran: u32, max_pages: u16,
        map_alignment: u16, flags2: u32, max_stack_depth: u32, request_timeout: u16,
        unused: [u16; 11],
    }
    pub struct Attr (88) {
        ino: u64, size: u64, blocks: u64, atime: u64, mtime: u64, ctime: u64, atimensec: u32,
        mtimensec: u32, ctimensec: u32, mode: u32, nlink: u32, uid: u32, gid: u32, rdev: u32,
        blksize: u32, flags: u32,
    }
    pub struct AttrOut (104) { attr_valid: u64, attr_valid_nsec: u32, dummy: u32, attr: Attr }
    pub struct EntryOut (128) {
        nodeid: u64, generation: u64, entry_valid: u64, attr_valid: u64, entry_valid_nsec: u32,
        attr_valid_nsec: u32, attr: Attr,
    }
    pub struct GetattrIn (16) { getattr_flags: u32, dummy: u32, fh: u64 }
    pub struct SetattrIn (88) {
        valid: u32, padding: u32, fh: u64, size: u64, lock_owner: u64, atime: u64, mtime: u64,
        ctime: u64, atimensec: u32, mtimensec: u32, ctimensec: u32, mode: u32, unused4: u32,
        uid: u32, gid: u32, unused5: u32,
    }
    pub struct OpenIn (8) { flags: u32, open_flags: u32 }
    pub struct OpenOut (16) { fh: u64, open_flags: u32, backing_id: i32 }
    pub struct ReleaseIn (24) { fh: u64, flags: u32, release_flags: u32, lock_owner: u64 }
    pub struct FlushIn (24) { fh: u64, unused: u32, padding: u32, lock_owner: u64 }
    pub struct ReadIn (40) {
        fh: u64, offset: u64, size: u32, read_flags: u32, lock_owner: u64, flags: u32, padding: u32,
    }
    pub struct WriteIn (40) {
        fh: u64, offset: u64, size: u32, write_flags: u32, lock_owner: u64, flags: u32, padding: u32,
    }
    pub struct WriteOut (8) { size: u32, padding: u32 }
    pub struct Kstatfs (80) {
        blocks: u64, bfree: u64, bavail: u64, files: u64, ffree: u64, bsize: u32, namelen: u32,
        frsize: u32, padding: u32, spare: [u32; 6],
    }
    pub struct FsyncIn (16) { fh: u64, fsync_flags: u32, padding: u32 }
    pub struct AccessIn (8) { mask: u32, padding: u32 }
    pub struct InterruptIn (8) { unique: u64 }
    pub struct ForgetIn (8) { nlookup: u64 }
    pub struct BatchForgetIn (8) { count: u32, dummy: u32 }
    pub struct ForgetOne (16) { nodeid: u64, nlookup: u64 }
    pub struct FallocateIn (32) { fh: u64, offset: u64, length: u64, mode: u32, padding: u32 }
    /// A directory entry's fixed part; the name follows, the whole padded to 8 bytes.
    pub struct Dirent (24) { ino: u64, off: u64, namelen: u32, kind: u32 }
    /// The third part of a ring entry's header buffer.
    pub struct UringEntInOut (32) {
        flags: u64, commit_id: u64, payload_sz: u32, padding: u32, reserved: u64,
    }
    /// The command area of an IORING_OP_URING_CMD SQE for /dev/fuse.
    pub struct UringCmdReq (24) { flags: u64, commit_id: u64, qid: u16, padding: [u8; 6] }
}

/// A ring entry's header buffer: the fuse in/out header, the opcode's own header, and the
/// entry's in/out part (`struct fuse_uring_req_header`, 288 bytes).
pub const URING_HEADER_BYTES: usize =
    URING_IN_OUT_HEADER_BYTES + URING_OP_IN_OUT_BYTES + std::mem::size_of::<UringEntInOut>();
const _: () = assert!(URING_HEADER_BYTES == 288);
/// Where [`UringEntInOut`] sits in the header buffer.
pub const URING_ENT_IN_OUT_OFFSET: usize = URING_IN_OUT_HEADER_BYTES + URING_OP_IN_OUT_BYTES;

/// Offset of a directory entry's name, and the alignment of every entry.
pub const DIRENT_NAME_OFFSET: usize = std::mem::size_of::<Dirent>();
pub const DIRENT_ALIGN: usize = 8;

/// `fuse_direntplus`: an entry_out followed by a dirent.
pub const DIRENTPLUS_NAME_OFFSET: usize = std::mem::size_of::<EntryOut>() + DIRENT_NAME_OFFSET;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_round_trips_and_refuses_short_buffers() {
        let header =
            InHeader { len: 56, opcode: opcode::FSYNC, unique: 9, nodeid: 3, ..Default::default() };
        let bytes = header.as_bytes().to_vec();
        assert_eq!(bytes.len(), 40);
        assert_eq!(InHeader::read_from(&bytes), Some(header));
        assert_eq!(InHeader::read_from(&bytes[..39]), None);
    }

    #[test]
    fn layout_matches_the_uapi_header_offsets() {
        // Spot checks of offsets the kernel relies on (from include/uapi/linux/fuse.h).
        let out = InitOut { max_write: 0x0102_0304, flags2: 0x0a0b_0c0d, ..Default::default() };
        let bytes = out.as_bytes();
        assert_eq!(&bytes[20..24], &0x0102_0304u32.to_ne_bytes(), "max_write at 20");
        assert_eq!(&bytes[32..36], &0x0a0b_0c0du32.to_ne_bytes(), "flags2 at 32");
        let cmd = UringCmdReq { commit_id: 7, qid: 3, ..Default::default() };
        assert_eq!(&cmd.as_bytes()[16..18], &3u16.to_ne_bytes(), "qid at 16");
        assert_eq!(URING_ENT_IN_OUT_OFFSET, 256);
    }
}
