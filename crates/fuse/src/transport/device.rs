//! The /dev/fuse transport: worker threads, each reading requests from its own file (a
//! FUSE_DEV_IOC_CLONE of the session's, or the session's own) into a buffer it reuses, and
//! replies written with one writev of the header and the body.
//!
//! A request read from a file is answered on that file: the kernel keeps it in that file's
//! processing list. That is also what FUSE_NOTIFY_RESEND walks after a predecessor died,
//! and why a file that closes (a clone of a killed process) ends its requests with
//! ECONNABORTED instead: only requests read on files that stay open can be resent.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::resident::ResidentBuffer;
use crate::abi::{self, Pod};
use crate::reply::Body;
use crate::request;
use crate::session::{Dispatch, SessionShared};

/// One open /dev/fuse file and the way to write replies on it.
#[derive(Debug)]
pub(crate) struct DeviceChannel {
    pub(crate) fd: OwnedFd,
    /// Set once this process begins to hand the file's connection to a successor
    /// ([`crate::Session::begin_handover`]); never cleared.
    handing_over: AtomicBool,
}

impl DeviceChannel {
    pub(crate) fn new(fd: OwnedFd) -> DeviceChannel {
        DeviceChannel { fd, handing_over: AtomicBool::new(false) }
    }

    pub(crate) fn begin_handover(&self) {
        self.handing_over.store(true, Ordering::SeqCst);
    }

    /// Whether a request read on this file and dropped unanswered is left in the kernel (in
    /// the file's processing list, for FUSE_NOTIFY_RESEND to give to the successor) rather
    /// than answered EIO.
    pub(crate) fn leaves_dropped_requests(&self) -> bool {
        self.handing_over.load(Ordering::SeqCst)
    }

    pub(crate) fn send(&self, unique: u64, opcode: u32, error: i32, body: Body<'_>) {
        match write_reply(&self.fd, unique, error, &body) {
            Ok(()) => {}
            // The request was interrupted or the connection aborted: nobody waits for it.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                tracing::debug!(unique, opcode, "fuse: reply to a request the kernel dropped");
            }
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {}
            Err(e) => tracing::warn!(unique, opcode, "fuse: cannot write a reply: {e}"),
        }
    }
}

/// Parts of a reply below which each goes out as its own iovec (Linux's IOV_MAX is 1024, one is
/// the header's).
const IOV_MAX_PARTS: usize = 1023;

/// Writes one reply (or, with `unique` 0, a notification whose code is `error`).
pub(crate) fn write_reply(
    fd: &OwnedFd,
    unique: u64,
    error: i32,
    body: &Body<'_>,
) -> io::Result<()> {
    let header = abi::OutHeader {
        len: (std::mem::size_of::<abi::OutHeader>() + body.len()) as u32,
        error,
        unique,
    };
    let body_bytes: &[u8] = match body {
        Body::Empty | Body::Parts(_) => &[],
        Body::Slice(bytes) => bytes,
        Body::Data(bytes) => bytes,
    };
    let header_iov =
        libc::iovec { iov_base: header.as_bytes().as_ptr() as *mut libc::c_void, iov_len: 16 };
    let one = [
        header_iov,
        libc::iovec {
            iov_base: body_bytes.as_ptr() as *mut libc::c_void,
            iov_len: body_bytes.len(),
        },
    ];
    // Parts: one iovec each after the header. A READ is at most max_pages (256) blocks, far
    // below IOV_MAX (1024); more parts than that are joined first.
    let joined;
    let many: Vec<libc::iovec>;
    let (iov, count): (&[libc::iovec], usize) = match body {
        Body::Parts(parts) if parts.len() < IOV_MAX_PARTS => {
            many = std::iter::once(header_iov)
                .chain(parts.iter().map(|p| libc::iovec {
                    iov_base: p.as_ptr() as *mut libc::c_void,
                    iov_len: p.len(),
                }))
                .collect();
            (&many, many.len())
        }
        Body::Parts(parts) => {
            joined = parts.concat();
            many = vec![
                header_iov,
                libc::iovec {
                    iov_base: joined.as_ptr() as *mut libc::c_void,
                    iov_len: joined.len(),
                },
            ];
            (&many, 2)
        }
        _ => (&one, if body_bytes.is_empty() { 1 } else { 2 }),
    };
    // SAFETY: every iovec points at a live buffer of the given length for the whole call.
    let written = unsafe { libc::writev(fd.as_raw_fd(), iov.as_ptr(), count as libc::c_int) };
    if written < 0 {
        return Err(io::Error::last_os_error());
    }
    if written as usize != header.len as usize {
        return Err(io::Error::other(format!("short reply write: {written} of {}", header.len)));
    }
    Ok(())
}

/// Reads one request into `buffer`; Ok(None) when the read should simply be retried.
pub(crate) fn read_request(fd: &OwnedFd, buffer: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: `buffer` is valid for writes of its length for the whole call.
    let n = unsafe { libc::read(fd.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len()) };
    if n >= 0 {
        return Ok(Some(n as usize));
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        // ENOENT: the request was interrupted before we read it; EINTR/EAGAIN: try again.
        Some(libc::ENOENT) | Some(libc::EINTR) | Some(libc::EAGAIN) => Ok(None),
        _ => Err(error),
    }
}

/// The loop of one worker thread: until the connection goes away (ENODEV on unmount).
pub(crate) fn serve(channel: Arc<DeviceChannel>, shared: Arc<SessionShared>, buffer_bytes: usize) {
    // Resident before the first read: a request the kernel cannot copy into it is ended with
    // EIO when this process is being killed, instead of being resent to the next engine.
    let Some(mut buffer) = ResidentBuffer::new(buffer_bytes) else {
        tracing::warn!(
            bytes = buffer_bytes,
            "fuse: cannot allocate a request buffer; this worker stops"
        );
        return;
    };
    loop {
        let n = match read_request(&channel.fd, &mut buffer) {
            Ok(Some(n)) => n,
            Ok(None) => continue,
            Err(e) => {
                if !matches!(e.raw_os_error(), Some(libc::ENODEV) | Some(libc::ECONNABORTED)) {
                    tracing::warn!("fuse: reading /dev/fuse failed: {e}; this worker stops");
                }
                break;
            }
        };
        shared.stats.requests_device.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match request::parse(&buffer[..n]) {
            Ok(parsed) => shared.dispatch(&parsed, Dispatch::Device(&channel)),
            Err(malformed) => shared.malformed(&buffer[..n], malformed, Dispatch::Device(&channel)),
        }
    }
}
