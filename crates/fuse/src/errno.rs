//! The error number a reply carries.

/// A positive errno value; the reply carries its negation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    pub const EPERM: Errno = Errno(libc::EPERM);
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const EBADF: Errno = Errno(libc::EBADF);
    pub const EACCES: Errno = Errno(libc::EACCES);
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const EMFILE: Errno = Errno(libc::EMFILE);
    pub const EFBIG: Errno = Errno(libc::EFBIG);
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    pub const EROFS: Errno = Errno(libc::EROFS);
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    pub const EPROTO: Errno = Errno(libc::EPROTO);

    /// The errno as a positive number.
    pub fn code(self) -> i32 {
        self.0
    }

    /// What goes into `fuse_out_header.error`: the negated errno, or EIO for a value the
    /// kernel would reject (zero, negative, or beyond the errno range).
    pub(crate) fn wire(self) -> i32 {
        if (1..4096).contains(&self.0) {
            -self.0
        } else {
            -libc::EIO
        }
    }
}

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_values_are_negative_errnos() {
        assert_eq!(Errno::ENOENT.wire(), -libc::ENOENT);
        assert_eq!(Errno(0).wire(), -libc::EIO, "0 would read as success");
        assert_eq!(Errno(-5).wire(), -libc::EIO);
        assert_eq!(Errno(100_000).wire(), -libc::EIO);
    }
}
