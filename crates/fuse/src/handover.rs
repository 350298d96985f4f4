//! Passing open descriptors between processes over a unix socket (SCM_RIGHTS), with a
//! small message beside them: how a holder hands a live /dev/fuse connection (and its
//! [`crate::Negotiated`]) to a new engine process.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// Most descriptors one message carries.
pub const FDS_MAX: usize = 16;
/// Most bytes of the message beside them.
pub const MESSAGE_BYTES_MAX: usize = 4096;

/// Sends `message` with `fds` attached (the receiver gets its own copies).
pub fn send_fds(socket: &UnixStream, message: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if fds.len() > FDS_MAX || message.is_empty() || message.len() > MESSAGE_BYTES_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "1..4096 bytes and at most 16 descriptors",
        ));
    }
    let mut control = [0u8; control_bytes()];
    let fd_bytes = std::mem::size_of_val(fds);
    let iov =
        libc::iovec { iov_base: message.as_ptr() as *mut libc::c_void, iov_len: message.len() };
    // SAFETY: msghdr is plain data; zeroed is a valid starting value.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &iov as *const libc::iovec as *mut libc::iovec;
    header.msg_iovlen = 1;
    if !fds.is_empty() {
        header.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE only computes a size.
        header.msg_controllen = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
        // SAFETY: the control buffer is large enough for one cmsg of `fd_bytes` (checked
        // by control_bytes() for FDS_MAX), so CMSG_FIRSTHDR and CMSG_DATA stay inside it.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&header);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as usize;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(cmsg),
                fd_bytes,
            );
        }
    }
    // SAFETY: header points at live buffers for the whole call.
    let sent = unsafe { libc::sendmsg(socket.as_raw_fd(), &header, libc::MSG_NOSIGNAL) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    if sent as usize != message.len() {
        return Err(io::Error::other("short sendmsg"));
    }
    Ok(())
}

/// Receives one message sent by [`send_fds`]: its bytes and its descriptors.
pub fn recv_fds(socket: &UnixStream) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut message = vec![0u8; MESSAGE_BYTES_MAX];
    let mut control = [0u8; control_bytes()];
    let iov = libc::iovec { iov_base: message.as_mut_ptr().cast(), iov_len: message.len() };
    // SAFETY: msghdr is plain data; zeroed is a valid starting value.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &iov as *const libc::iovec as *mut libc::iovec;
    header.msg_iovlen = 1;
    header.msg_control = control.as_mut_ptr().cast();
    header.msg_controllen = control.len();
    // SAFETY: header points at live buffers for the whole call.
    let received =
        unsafe { libc::recvmsg(socket.as_raw_fd(), &mut header, libc::MSG_CMSG_CLOEXEC) };
    if received < 0 {
        return Err(io::Error::last_os_error());
    }
    if received == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the sender closed the socket"));
    }
    message.truncate(received as usize);
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `control` up to msg_controllen; the CMSG macros walk only
    // inside it, and every descriptor in an SCM_RIGHTS message is new and ours to own.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&header);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data_bytes = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let count = data_bytes / std::mem::size_of::<RawFd>();
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for index in 0..count {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(index))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&header, cmsg);
        }
    }
    if header.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::other("descriptors were truncated"));
    }
    Ok((message, fds))
}

const fn control_bytes() -> usize {
    // CMSG_SPACE(16 * 4) on 64-bit Linux: a 16-byte cmsghdr plus 64 bytes of descriptors.
    16 + FDS_MAX * std::mem::size_of::<RawFd>() + 8
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};

    #[test]
    fn a_descriptor_and_its_message_arrive_together() {
        let (left, right) = UnixStream::pair().expect("socketpair");
        let path =
            std::env::temp_dir().join(format!("fardisk-fuse-handover-{}", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .expect("temp file");
        let _ = std::fs::remove_file(&path);
        file.write_all(b"shared").expect("write");
        send_fds(&left, b"hello", &[file.as_raw_fd()]).expect("send");
        let (message, fds) = recv_fds(&right).expect("recv");
        assert_eq!(message, b"hello");
        assert_eq!(fds.len(), 1);
        let mut received = std::fs::File::from(fds.into_iter().next().expect("one fd"));
        received.rewind().expect("seek");
        let mut text = String::new();
        received.read_to_string(&mut text).expect("read");
        assert_eq!(text, "shared", "the same open file");
    }
}
