//! The one place where device errors become errno values for the kernel.

use fardisk_fuse::Errno;
use fardisk_nbd::DeviceError;

/// The errno a FUSE reply carries for `error`.
///
/// `Shutdown` becomes EIO rather than ESHUTDOWN: a database or filesystem above a loop
/// device understands EIO ("the disk failed") and ESHUTDOWN is a socket error it would not
/// expect from a file.
pub fn errno_for(error: &DeviceError) -> Errno {
    match error {
        DeviceError::Io(_) => Errno::EIO,
        DeviceError::InvalidArgument(_) => Errno::EINVAL,
        DeviceError::NoSpace(_) => Errno::ENOSPC,
        DeviceError::ReadOnly => Errno::EROFS,
        DeviceError::NotSupported(_) => Errno::EOPNOTSUPP,
        DeviceError::Shutdown => Errno::EIO,
    }
}

/// Why a request failed: refused by the front end itself (a bad mode, a range that would
/// grow the image), already logged where it was decided, or failed in the device.
#[derive(Debug)]
pub(crate) enum Failure {
    Refused(Errno),
    Device(DeviceError),
}

impl From<DeviceError> for Failure {
    fn from(error: DeviceError) -> Failure {
        Failure::Device(error)
    }
}

impl Failure {
    /// The errno for the reply; device errors are logged with their request context so that
    /// every error a user sees from a syscall (or in dmesg, via the loop device) has a line
    /// in our log.
    pub(crate) fn errno(&self, op: &str, volume: &str) -> Errno {
        match self {
            Failure::Refused(errno) => *errno,
            Failure::Device(error) => {
                let errno = errno_for(error);
                tracing::warn!(op, volume, errno = errno.code(), "fuse: device error: {error}");
                errno
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_errno() {
        let cases = [
            (DeviceError::Io("x".into()), libc::EIO),
            (DeviceError::InvalidArgument("x".into()), libc::EINVAL),
            (DeviceError::NoSpace("x".into()), libc::ENOSPC),
            (DeviceError::ReadOnly, libc::EROFS),
            (DeviceError::NotSupported("x".into()), libc::EOPNOTSUPP),
            (DeviceError::Shutdown, libc::EIO),
        ];
        for (error, code) in cases {
            assert_eq!(errno_for(&error).code(), code, "{error}");
        }
    }
}
