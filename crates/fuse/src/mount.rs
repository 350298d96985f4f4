//! Opening /dev/fuse, mounting a connection with mount(2), cloning device files, and
//! unmounting. The mount takes the descriptor as `fd=N`, so it may come from another
//! process (passed with SCM_RIGHTS, see [`crate::handover`]): a holder can open and mount,
//! and any process it hands the descriptor to can serve.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::abi;

pub const DEVICE_PATH: &str = "/dev/fuse";

/// Options of one FUSE mount.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Shown as the mount's source in /proc/mounts.
    pub fsname: String,
    /// The type is `fuse.SUBTYPE`.
    pub subtype: String,
    /// Let the kernel check permissions against the attributes (`default_permissions`).
    pub default_permissions: bool,
    /// Let users other than `user_id` reach the mount.
    pub allow_other: bool,
    pub nodev: bool,
    pub nosuid: bool,
    pub noexec: bool,
    pub noatime: bool,
    /// The mount's owner (the kernel lets only this user in without `allow_other`).
    pub user_id: u32,
    pub group_id: u32,
}

impl Default for MountOptions {
    fn default() -> MountOptions {
        MountOptions {
            fsname: "fuse".to_owned(),
            subtype: "fuse".to_owned(),
            default_permissions: true,
            allow_other: false,
            nodev: true,
            nosuid: true,
            noexec: false,
            noatime: false,
            // SAFETY: geteuid and getegid have no preconditions and cannot fail.
            user_id: unsafe { libc::geteuid() },
            // SAFETY: as above.
            group_id: unsafe { libc::getegid() },
        }
    }
}

impl MountOptions {
    fn flags(&self) -> libc::c_ulong {
        let mut flags = 0;
        for (set, flag) in [
            (self.nodev, libc::MS_NODEV),
            (self.nosuid, libc::MS_NOSUID),
            (self.noexec, libc::MS_NOEXEC),
            (self.noatime, libc::MS_NOATIME),
        ] {
            if set {
                flags |= flag;
            }
        }
        flags
    }

    /// The option string the fuse filesystem parses.
    fn data(&self, fd: i32) -> String {
        let mut data =
            format!("fd={fd},rootmode=40000,user_id={},group_id={}", self.user_id, self.group_id);
        if self.default_permissions {
            data.push_str(",default_permissions");
        }
        if self.allow_other {
            data.push_str(",allow_other");
        }
        data
    }
}

fn cstring(bytes: &[u8], what: &str) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("{what} contains a NUL byte"))
    })
}

/// A new connection: an open /dev/fuse file, not yet mounted.
pub fn open_device() -> io::Result<OwnedFd> {
    let path = cstring(DEVICE_PATH.as_bytes(), "path")?;
    // SAFETY: path is a valid NUL-terminated string.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        let error = io::Error::last_os_error();
        let hint = match error.raw_os_error() {
            Some(libc::ENOENT) => {
                ": load the fuse module (modprobe fuse) or pass the device to the container"
            }
            Some(libc::EACCES) | Some(libc::EPERM) => ": mounting FUSE needs root (CAP_SYS_ADMIN)",
            _ => "",
        };
        return Err(io::Error::new(
            error.kind(),
            format!("cannot open {DEVICE_PATH}: {error}{hint}"),
        ));
    }
    // SAFETY: open returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Another file on the same connection (FUSE_DEV_IOC_CLONE): requests read on it are
/// answered on it, with its own processing list in the kernel.
pub fn clone_device(session: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let clone = open_device()?;
    let session_fd = session.as_raw_fd() as u32;
    // SAFETY: both descriptors are open; the ioctl reads one u32 through the pointer.
    let rc = unsafe { libc::ioctl(clone.as_raw_fd(), abi::DEV_IOC_CLONE, &session_fd) };
    if rc != 0 {
        return Err(io::Error::new(
            io::Error::last_os_error().kind(),
            format!("FUSE_DEV_IOC_CLONE: {}", io::Error::last_os_error()),
        ));
    }
    Ok(clone)
}

/// Mounts the connection of `device` on `mountpoint` with mount(2). Needs CAP_SYS_ADMIN.
/// The kernel queues INIT at once; serve it with [`crate::Session::start`].
pub fn mount_with_fd(
    device: BorrowedFd<'_>,
    mountpoint: &Path,
    options: &MountOptions,
) -> io::Result<()> {
    let source = cstring(options.fsname.as_bytes(), "fsname")?;
    let target = cstring(mountpoint.as_os_str().as_bytes(), "mount point")?;
    let fstype = cstring(format!("fuse.{}", options.subtype).as_bytes(), "subtype")?;
    let data = cstring(options.data(device.as_raw_fd()).as_bytes(), "options")?;
    // SAFETY: every pointer is a valid NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            options.flags(),
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        let error = io::Error::last_os_error();
        let hint = if error.raw_os_error() == Some(libc::EPERM) {
            " (mounting FUSE needs root: CAP_SYS_ADMIN)"
        } else {
            ""
        };
        return Err(io::Error::new(
            error.kind(),
            format!("mount {}: {error}{hint}", mountpoint.display()),
        ));
    }
    Ok(())
}

/// umount2(2) of `mountpoint`; `lazy` detaches it now and lets it go when no longer used.
pub fn unmount(mountpoint: &Path, lazy: bool) -> io::Result<()> {
    let target = cstring(mountpoint.as_os_str().as_bytes(), "mount point")?;
    let flags = libc::UMOUNT_NOFOLLOW | if lazy { libc::MNT_DETACH } else { 0 };
    // SAFETY: target is a valid NUL-terminated string that outlives the call.
    let rc = unsafe { libc::umount2(target.as_ptr(), flags) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_string_names_the_descriptor_and_owner() {
        let options =
            MountOptions { allow_other: true, user_id: 7, group_id: 8, ..MountOptions::default() };
        assert_eq!(
            options.data(5),
            "fd=5,rootmode=40000,user_id=7,group_id=8,default_permissions,allow_other"
        );
        assert_eq!(options.flags() & libc::MS_NOEXEC, 0);
        assert_ne!(options.flags() & libc::MS_NODEV, 0);
    }
}
