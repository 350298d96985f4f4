//! The INIT handshake: what the filesystem asks for, what the kernel offers, and what the
//! connection then runs with ([`Negotiated`], which a successor needs to serve the same
//! connection without a new INIT).

use crate::abi::{self, init_flags, Pod};

/// What the kernel offered in its INIT request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelInit {
    pub major: u32,
    pub minor: u32,
    pub max_readahead_bytes: u32,
    /// INIT flags, bits 32..63 from flags2.
    pub flags: u64,
}

impl KernelInit {
    pub(crate) fn from_wire(init: &abi::InitIn) -> KernelInit {
        let mut flags = u64::from(init.flags);
        if flags & init_flags::INIT_EXT != 0 {
            flags |= u64::from(init.flags2) << 32;
        }
        KernelInit {
            major: init.major,
            minor: init.minor,
            max_readahead_bytes: init.max_readahead,
            flags,
        }
    }

    pub fn offers(&self, flag: u64) -> bool {
        self.flags & flag != 0
    }
}

/// What the filesystem asks of the kernel at INIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitOptions {
    /// Largest WRITE (and READ reply) the kernel sends; rounded to whole pages.
    pub max_write_bytes: u32,
    pub max_readahead_bytes: u32,
    /// Background requests (readahead, write-back) the kernel queues to us at most.
    pub max_background: u16,
    /// Flags asked for when the kernel offers them (`abi::init_flags`).
    pub flags: u64,
    /// Flags without which the mount must fail (asked for explicitly by the user).
    pub required_flags: u64,
}

impl Default for InitOptions {
    fn default() -> InitOptions {
        InitOptions {
            max_write_bytes: 1 << 20,
            max_readahead_bytes: 1 << 20,
            max_background: 64,
            flags: 0,
            required_flags: 0,
        }
    }
}

/// Why INIT could not be answered as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitError {
    Version { major: u32, minor: u32 },
    Missing { flags: u64 },
}

impl std::fmt::Display for InitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InitError::Version { major, minor } => write!(
                f,
                "kernel speaks FUSE {major}.{minor}; fardisk needs {}.{} or newer",
                abi::MAJOR,
                abi::MINOR_MIN
            ),
            InitError::Missing { flags } => {
                write!(f, "the kernel lacks required FUSE capabilities {flags:#x}")
            }
        }
    }
}

/// What the connection runs with after INIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// The protocol minor both sides use.
    pub minor: u32,
    /// What the kernel offered.
    pub kernel_flags: u64,
    /// What we asked for and the kernel offered.
    pub flags: u64,
    pub max_write_bytes: u32,
    pub max_readahead_bytes: u32,
    pub max_pages: u16,
}

impl Negotiated {
    /// Requests go through io_uring once every queue has registered.
    pub fn over_io_uring(&self) -> bool {
        self.flags & init_flags::OVER_IO_URING != 0
    }

    /// The kernel can resend requests a predecessor read and did not answer.
    pub fn has_resend(&self) -> bool {
        self.kernel_flags & init_flags::HAS_RESEND != 0
    }

    /// Bytes a buffer needs to hold any request: the largest WRITE and its headers.
    pub fn request_buffer_bytes(&self) -> usize {
        let page = page_bytes() as usize;
        (self.max_write_bytes as usize + page).max(abi::MIN_READ_BUFFER_BYTES)
    }

    /// Bytes a ring entry's payload buffer needs (the kernel refuses smaller ones).
    pub fn ring_payload_bytes(&self) -> usize {
        let pages = usize::from(self.max_pages) * page_bytes() as usize;
        (self.max_write_bytes as usize).max(pages).max(abi::MIN_READ_BUFFER_BYTES)
    }

    /// A checked encoding for handing the connection to a successor process, which needs it
    /// to serve without INIT: magic, version, fields (native order, as the ABI), crc32c.
    pub fn to_bytes(&self) -> [u8; NEGOTIATED_BYTES] {
        let mut bytes = [0u8; NEGOTIATED_BYTES];
        bytes[0..8].copy_from_slice(NEGOTIATED_MAGIC);
        bytes[8..12].copy_from_slice(&NEGOTIATED_VERSION.to_le_bytes());
        bytes[12..16].copy_from_slice(&self.minor.to_le_bytes());
        bytes[16..24].copy_from_slice(&self.kernel_flags.to_le_bytes());
        bytes[24..32].copy_from_slice(&self.flags.to_le_bytes());
        bytes[32..36].copy_from_slice(&self.max_write_bytes.to_le_bytes());
        bytes[36..40].copy_from_slice(&self.max_readahead_bytes.to_le_bytes());
        bytes[40..42].copy_from_slice(&self.max_pages.to_le_bytes());
        let crc = checksum(&bytes[..NEGOTIATED_BYTES - 4]);
        bytes[NEGOTIATED_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// The value [`Negotiated::to_bytes`] wrote; None when magic, version or checksum differ.
    pub fn from_bytes(bytes: &[u8]) -> Option<Negotiated> {
        if bytes.len() != NEGOTIATED_BYTES || &bytes[0..8] != NEGOTIATED_MAGIC {
            return None;
        }
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or([0; 4]));
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]));
        if u32_at(8) != NEGOTIATED_VERSION
            || u32_at(NEGOTIATED_BYTES - 4) != checksum(&bytes[..NEGOTIATED_BYTES - 4])
        {
            return None;
        }
        Some(Negotiated {
            minor: u32_at(12),
            kernel_flags: u64_at(16),
            flags: u64_at(24),
            max_write_bytes: u32_at(32),
            max_readahead_bytes: u32_at(36),
            max_pages: u16::from_le_bytes([bytes[40], bytes[41]]),
        })
    }
}

pub const NEGOTIATED_BYTES: usize = 48;
const NEGOTIATED_MAGIC: &[u8; 8] = b"FDFUSENG";
const NEGOTIATED_VERSION: u32 = 1;

/// CRC-32C (Castagnoli), bitwise: 44 bytes once per hand-over need no table.
fn checksum(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0x82f6_3b78 } else { crc >> 1 };
        }
    }
    !crc
}

pub(crate) fn page_bytes() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 {
        page as u32
    } else {
        4096
    }
}

/// The INIT reply for `kernel` given `options` (and `want_uring`), or why there is none.
pub(crate) fn negotiate(
    kernel: &KernelInit,
    options: &InitOptions,
    want_uring: bool,
) -> Result<(abi::InitOut, Negotiated), InitError> {
    if kernel.major != abi::MAJOR || kernel.minor < abi::MINOR_MIN {
        return Err(InitError::Version { major: kernel.major, minor: kernel.minor });
    }
    let missing = options.required_flags & !kernel.flags;
    if missing != 0 {
        return Err(InitError::Missing { flags: missing });
    }
    let mut wanted = options.flags
        | options.required_flags
        | init_flags::BIG_WRITES
        | init_flags::MAX_PAGES
        | init_flags::INIT_EXT;
    if want_uring {
        wanted |= init_flags::OVER_IO_URING;
    }
    let flags = wanted & kernel.flags;
    let page = page_bytes();
    let pages_max = if flags & init_flags::MAX_PAGES != 0 { 256 } else { 32 };
    let max_pages = options.max_write_bytes.div_ceil(page).clamp(1, pages_max);
    let max_write_bytes = (max_pages * page).min(options.max_write_bytes.max(page));
    let max_readahead_bytes = options.max_readahead_bytes.min(kernel.max_readahead_bytes);
    let max_background = options.max_background.max(1);
    let out = abi::InitOut {
        major: abi::MAJOR,
        minor: kernel.minor.min(abi::MINOR),
        max_readahead: max_readahead_bytes,
        flags: flags as u32,
        max_background,
        congestion_threshold: (u32::from(max_background) * 3 / 4).max(1) as u16,
        max_write: max_write_bytes,
        time_gran: 1,
        max_pages: max_pages as u16,
        flags2: (flags >> 32) as u32,
        ..Default::default()
    };
    let negotiated = Negotiated {
        minor: out.minor,
        kernel_flags: kernel.flags,
        flags,
        max_write_bytes,
        max_readahead_bytes,
        max_pages: max_pages as u16,
    };
    debug_assert_eq!(out.as_bytes().len(), 64);
    Ok((out, negotiated))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(flags: u64) -> KernelInit {
        KernelInit { major: 7, minor: 44, max_readahead_bytes: 128 * 1024, flags }
    }

    #[test]
    fn grants_only_what_was_offered_and_asked() {
        let offered = init_flags::ASYNC_DIO
            | init_flags::MAX_PAGES
            | init_flags::INIT_EXT
            | init_flags::BIG_WRITES
            | init_flags::OVER_IO_URING
            | init_flags::HAS_RESEND;
        let options = InitOptions {
            flags: init_flags::ASYNC_DIO | init_flags::WRITEBACK_CACHE,
            ..InitOptions::default()
        };
        let (out, negotiated) = negotiate(&kernel(offered), &options, true).expect("init");
        assert!(negotiated.over_io_uring());
        assert!(negotiated.has_resend());
        assert_eq!(negotiated.flags & init_flags::WRITEBACK_CACHE, 0, "not offered");
        assert_eq!(out.flags2, (init_flags::OVER_IO_URING >> 32) as u32);
        assert_eq!(out.minor, abi::MINOR);
        assert_eq!(out.max_readahead, 128 * 1024, "the smaller of the two");
        assert_eq!(negotiated.max_write_bytes, 1 << 20);
        let (_, without) = negotiate(&kernel(offered), &options, false).expect("init");
        assert!(!without.over_io_uring());
    }

    #[test]
    fn required_flags_and_old_kernels_fail() {
        let options =
            InitOptions { required_flags: init_flags::WRITEBACK_CACHE, ..InitOptions::default() };
        assert!(matches!(negotiate(&kernel(0), &options, false), Err(InitError::Missing { .. })));
        let old = KernelInit { minor: 12, ..kernel(0) };
        assert!(matches!(
            negotiate(&old, &InitOptions::default(), false),
            Err(InitError::Version { .. })
        ));
    }

    #[test]
    fn without_max_pages_writes_are_capped_at_32_pages() {
        let (out, negotiated) =
            negotiate(&kernel(init_flags::BIG_WRITES), &InitOptions::default(), false)
                .expect("init");
        assert_eq!(negotiated.max_pages, 32);
        assert_eq!(out.max_write, 32 * page_bytes());
    }

    #[test]
    fn negotiated_round_trips_and_refuses_damage() {
        let negotiated = Negotiated {
            minor: 42,
            kernel_flags: 0xdead_beef_0000_0001,
            flags: 7,
            max_write_bytes: 1 << 20,
            max_readahead_bytes: 4096,
            max_pages: 256,
        };
        let bytes = negotiated.to_bytes();
        assert_eq!(Negotiated::from_bytes(&bytes), Some(negotiated));
        for bit in 0..NEGOTIATED_BYTES * 8 {
            let mut damaged = bytes;
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(Negotiated::from_bytes(&damaged), None, "flipped bit {bit}");
        }
        assert_eq!(Negotiated::from_bytes(&bytes[..40]), None);
    }
}
