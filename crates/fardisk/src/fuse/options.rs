//! Mount options of the FUSE front end and their bounds.

use std::time::{Duration, SystemTime};

/// Largest write the kernel may send in one request (and the largest read reply we build):
/// 1 MiB is what the kernel allows by default (256 pages), so memory per request is known.
pub const MAX_WRITE_BYTES_DEFAULT: u32 = 1 << 20;
/// Ceiling for `max_write_bytes`; the kernel's `fuse.max_pages_limit` default is 256 pages.
const MAX_WRITE_BYTES_CEILING: u32 = 1 << 20;
/// Ceiling for /dev/fuse worker threads: each owns a receive buffer of max_write + 4 KiB.
const THREADS_MAX: usize = 16;
/// Ceiling for ring entries per io_uring queue: each owns a max_write payload buffer.
const URING_QUEUE_DEPTH_MAX: usize = 256;

/// How a pool's volumes are mounted. The defaults are the measured choice recorded in
/// docs/design/0002-fuse-caching.md.
#[derive(Debug, Clone)]
pub struct FuseOptions {
    /// Let users other than the mounting one reach the directory (kernel permission checks
    /// on the 0600 images still apply: `default_permissions` is always set).
    pub allow_other: bool,
    /// Kernel write-back caching (FUSE_WRITEBACK_CACHE): writes are acknowledged from the
    /// page cache and sent later; fsync still waits for them and then calls `flush()`.
    pub writeback_cache: bool,
    /// Open images with FOPEN_DIRECT_IO: no page cache for the image, every read and write
    /// goes to the device.
    pub direct_io: bool,
    /// /dev/fuse worker threads (each with its own FUSE_DEV_IOC_CLONE of the connection).
    /// Data requests are served on the tokio runtime; these threads read, parse and
    /// dispatch. With io_uring they still carry FORGET and INTERRUPT.
    pub threads: usize,
    /// Exchange requests through io_uring when the kernel offers it (Linux 6.14+ with
    /// `/sys/module/fuse/parameters/enable_uring` = Y); /dev/fuse otherwise. See
    /// docs/design/0004-fuse-path-profile.md.
    pub uring: bool,
    /// Ring entries (requests in flight) per io_uring queue; one queue per possible CPU.
    pub uring_queue_depth: usize,
    /// Data requests running at once; further ones wait in the kernel queue. Memory used by
    /// request buffers is bounded by this times `max_write_bytes`.
    pub requests_in_flight_max: usize,
    /// Let the kernel split one direct I/O into several concurrent requests
    /// (FUSE_ASYNC_DIO); a loop device in direct-io mode then keeps several in flight.
    pub async_dio: bool,
    /// Largest read or write request the kernel sends.
    pub max_write_bytes: u32,
    /// Kernel's limit on background requests (readahead, write-back) it queues to us.
    pub max_background: u16,
    /// How long the kernel may cache attributes and names; short so that volumes created,
    /// destroyed or resized while mounted show up quickly.
    pub attr_ttl: Duration,
    /// Open file handles at once (bounds the handle table); opens beyond get EMFILE.
    pub open_files_max: usize,
    /// Most volumes the inode table remembers; beyond it, names no longer listed are dropped.
    pub volumes_max: usize,
    /// atime/mtime/ctime shown for the directory and every image (the caller passes the
    /// pool's import time; time is injected, never read here).
    pub timestamp: SystemTime,
    /// Which engine issues the file handles: 0 for one that owns its mount, the generation
    /// under a holder (a successor recognises and adopts its predecessors' handles).
    pub handle_epoch: u64,
    /// Every write and fallocate is durable (in the intent log, or without one in the store)
    /// before its reply, as if sent with FUA. Set under a holder: a request the engine has
    /// answered is never sent again, so a write acknowledged from memory would die with this
    /// engine while the kernel goes on as if it were written, and the next fsync, answered by
    /// the successor, would succeed without it (an acknowledged commit lost, seen in e2e 54).
    pub writes_durable_before_reply: bool,
}

impl Default for FuseOptions {
    fn default() -> FuseOptions {
        FuseOptions {
            allow_other: false,
            writeback_cache: false,
            direct_io: true,
            threads: 2,
            uring: false,
            uring_queue_depth: 32,
            requests_in_flight_max: 64,
            async_dio: true,
            max_write_bytes: MAX_WRITE_BYTES_DEFAULT,
            max_background: 64,
            attr_ttl: Duration::from_secs(1),
            open_files_max: 4096,
            volumes_max: 65_536,
            timestamp: SystemTime::UNIX_EPOCH,
            handle_epoch: 0,
            writes_durable_before_reply: false,
        }
    }
}

impl FuseOptions {
    /// A copy with every limit forced into its workable range (a zero limit would hang
    /// every request forever rather than fail).
    pub fn normalized(&self) -> FuseOptions {
        FuseOptions {
            threads: self.threads.clamp(1, THREADS_MAX),
            uring_queue_depth: self.uring_queue_depth.clamp(1, URING_QUEUE_DEPTH_MAX),
            requests_in_flight_max: self.requests_in_flight_max.clamp(1, 1 << 16),
            max_write_bytes: self.max_write_bytes.clamp(4096, MAX_WRITE_BYTES_CEILING),
            max_background: self.max_background.max(1),
            open_files_max: self.open_files_max.max(1),
            volumes_max: self.volumes_max.max(1),
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalized_lifts_zero_limits() {
        let options = FuseOptions {
            threads: 0,
            requests_in_flight_max: 0,
            max_write_bytes: 0,
            max_background: 0,
            open_files_max: 0,
            volumes_max: 0,
            ..FuseOptions::default()
        }
        .normalized();
        assert_eq!(options.threads, 1);
        assert_eq!(options.requests_in_flight_max, 1);
        assert_eq!(options.max_write_bytes, 4096);
        assert_eq!(options.max_background, 1);
        assert_eq!(options.open_files_max, 1);
        assert_eq!(options.volumes_max, 1);
    }

    #[test]
    fn normalized_caps_large_limits() {
        let options =
            FuseOptions { threads: 1000, max_write_bytes: u32::MAX, ..FuseOptions::default() }
                .normalized();
        assert_eq!(options.threads, THREADS_MAX);
        assert_eq!(options.max_write_bytes, MAX_WRITE_BYTES_CEILING);
    }
}
