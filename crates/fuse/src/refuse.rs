//! Answering every request of a connection with one error: what a mount does once no server
//! can come back for it (fardisk's holder after its re-import bound). Without this the
//! mount's users wait in the kernel for as long as some process keeps the connection open;
//! with it they get the error at once, and the connection stays up so nothing else (a loop
//! device over an image, an open file) turns the error into a different one.
//!
//! Deliberately minimal: the header is all it reads of a request, and it holds no state.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use crate::abi::{self, opcode};
use crate::reply::Body;
use crate::transport::device::{read_request, write_reply};
use crate::Errno;

/// How long one poll of the device waits before `keep_going` is asked again.
const POLL_MS: i32 = 100;

/// Why [`refuse_all`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefuseEnd {
    /// `keep_going` said stop.
    Stopped,
    /// The kernel ended the connection (unmounted, or aborted).
    Gone,
}

/// Answers every request read on `device` with `errno` until `keep_going()` is false or the
/// connection ends; `answered` counts the replies. First asks the kernel to send again
/// (FUSE_NOTIFY_RESEND) what a dead predecessor had read on this file and not answered, so
/// those requests get the error too instead of waiting forever. `buffer_bytes` must hold the
/// largest request (a WRITE of the negotiated `max_write`): a shorter buffer makes the kernel
/// fail that request by itself.
pub fn refuse_all(
    device: &OwnedFd,
    buffer_bytes: usize,
    errno: Errno,
    answered: &std::sync::atomic::AtomicU64,
    keep_going: &dyn Fn() -> bool,
) -> io::Result<RefuseEnd> {
    if let Err(e) = write_reply(device, 0, abi::NOTIFY_RESEND, &Body::Empty) {
        // A kernel before 6.9: requests the predecessor read stay unanswered; new ones are
        // still refused below.
        tracing::debug!(error = %e, "fuse: FUSE_NOTIFY_RESEND refused");
    }
    let mut buffer = vec![0u8; buffer_bytes.max(abi::MIN_READ_BUFFER_BYTES)];
    let mut poll =
        libc::pollfd { fd: device.as_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 };
    loop {
        if !keep_going() {
            return Ok(RefuseEnd::Stopped);
        }
        poll.revents = 0;
        // SAFETY: one valid pollfd for the length of the call.
        let ready = unsafe { libc::poll(&mut poll, 1, POLL_MS) };
        if ready < 0 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(error);
        }
        if ready == 0 {
            continue;
        }
        if poll.revents & (libc::POLLERR | libc::POLLHUP) != 0 && poll.revents & libc::POLLIN == 0 {
            return Ok(RefuseEnd::Gone);
        }
        let n = match read_request(device, &mut buffer) {
            Ok(Some(n)) => n,
            Ok(None) => continue,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENODEV) | Some(libc::ECONNABORTED)) => {
                return Ok(RefuseEnd::Gone)
            }
            Err(e) => return Err(e),
        };
        let Some(header) = crate::request::parse_header(&buffer[..n]) else { continue };
        if !needs_reply(header.opcode) {
            continue;
        }
        match write_reply(device, header.unique, errno.wire(), &Body::Empty) {
            Ok(()) => {
                answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            // Interrupted meanwhile: nobody waits for it.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(RefuseEnd::Gone),
            Err(e) => return Err(e),
        }
        if header.opcode == opcode::DESTROY {
            return Ok(RefuseEnd::Gone);
        }
    }
}

/// FORGET and BATCH_FORGET expect no reply at all; an INTERRUPT's only useful replies are
/// EAGAIN and ENOSYS, and the request it names gets the error anyway.
fn needs_reply(op: u32) -> bool {
    !matches!(op, opcode::FORGET | opcode::BATCH_FORGET | opcode::INTERRUPT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgets_and_interrupts_get_no_reply() {
        assert!(!needs_reply(opcode::FORGET));
        assert!(!needs_reply(opcode::BATCH_FORGET));
        assert!(!needs_reply(opcode::INTERRUPT));
        for op in [opcode::READ, opcode::WRITE, opcode::FSYNC, opcode::GETATTR, opcode::DESTROY] {
            assert!(needs_reply(op), "opcode {op}");
        }
    }
}
