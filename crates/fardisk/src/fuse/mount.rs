//! Mounting and unmounting. [`FuseMount`] owns the fuser session; dropping it unmounts.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fardisk_nbd::ExportProvider;
use fuser::{BackgroundSession, MountOption, SessionACL};
use tokio::runtime::Handle;

use super::attr::AttrContext;
use super::dispatch::Dispatcher;
use super::filesystem::VolumeFs;
use super::options::FuseOptions;

const FUSE_DEVICE: &str = "/dev/fuse";

/// A mounted volume directory. Unmounts on drop; call [`FuseMount::unmount`] to see errors.
#[derive(Debug)]
pub struct FuseMount {
    mountpoint: PathBuf,
    /// st_dev of the mount's root, to make sure we unmount our mount and not one stacked
    /// on the same path after someone else unmounted ours.
    device_id: u64,
    session: Option<BackgroundSession>,
}

/// Mounts `dir`, showing each volume of `provider` as a 0600 image file of the volume's
/// size. Data requests run as tasks on `runtime`, which must be driven by its own worker
/// threads (a multi-thread runtime): fuser's threads only spawn onto it. The call returns
/// once the kernel has completed the FUSE handshake. Needs /dev/fuse, and root (or
/// fusermount3 for a user mount). `mount`, `unmount` and drop block their thread: call them
/// from a plain or `spawn_blocking` thread, and drop the mount before the runtime.
pub fn mount(
    dir: &Path,
    provider: Arc<dyn ExportProvider>,
    runtime: Handle,
    options: FuseOptions,
) -> io::Result<FuseMount> {
    if !Path::new(FUSE_DEVICE).exists() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{FUSE_DEVICE} is missing: load the fuse module (modprobe fuse) or pass the device to the container"),
        ));
    }
    let options = options.normalized();
    let mountpoint = dir.canonicalize().map_err(|error| {
        io::Error::new(error.kind(), format!("mount point {}: {error}", dir.display()))
    })?;
    let attrs =
        AttrContext { uid: effective_uid(), gid: effective_gid(), timestamp: options.timestamp };
    let dispatcher = Dispatcher::new(runtime, options.requests_in_flight_max);
    let config = session_config(&options);
    let filesystem = VolumeFs::new(provider, options, attrs, dispatcher);
    let session = fuser::Session::new(filesystem, &mountpoint, &config).map_err(|error| {
        io::Error::new(error.kind(), format!("FUSE mount at {}: {error}", mountpoint.display()))
    })?;
    let session = session.spawn()?;
    let mut mount = FuseMount { mountpoint, device_id: 0, session: Some(session) };
    // Served by the session just spawned (the root's getattr).
    mount.device_id = std::fs::metadata(&mount.mountpoint)?.dev();
    tracing::info!(mountpoint = %mount.mountpoint.display(), "fuse: mounted");
    Ok(mount)
}

fn session_config(options: &FuseOptions) -> fuser::Config {
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::FSName("fardisk".to_owned()),
        MountOption::Subtype("fardisk".to_owned()),
        // The kernel enforces the images' 0600 mode (essential with allow_other).
        MountOption::DefaultPermissions,
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::NoExec,
        MountOption::NoAtime,
    ];
    config.acl = if options.allow_other { SessionACL::All } else { SessionACL::Owner };
    config.n_threads = Some(options.threads);
    config.clone_fd = options.threads > 1;
    config
}

fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn effective_gid() -> u32 {
    // SAFETY: getegid has no preconditions and cannot fail.
    unsafe { libc::getegid() }
}

impl FuseMount {
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmounts and waits for the session threads to finish. Fails with EBUSY (and stays
    /// mounted, so the call can be retried) while an image is in use, e.g. by a loop device.
    pub fn unmount(&mut self) -> io::Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        if self.still_ours() {
            if let Err(error) = unmount_path(&self.mountpoint, 0) {
                // Returned as is so callers can test raw_os_error() for EBUSY.
                tracing::warn!(mountpoint = %self.mountpoint.display(), "fuse: unmount failed: {error}");
                self.session = Some(session);
                return Err(error);
            }
        }
        // The kernel has torn the connection down; fuser sees that and does not unmount
        // again, and its threads end on the closed connection.
        session.umount_and_join()?;
        tracing::info!(mountpoint = %self.mountpoint.display(), "fuse: unmounted");
        Ok(())
    }

    /// Whether the mount point still shows our filesystem (not unmounted by someone else).
    fn still_ours(&self) -> bool {
        std::fs::metadata(&self.mountpoint)
            .map(|meta| meta.dev() == self.device_id)
            .unwrap_or(false)
    }
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        let Err(error) = self.unmount() else {
            return;
        };
        tracing::warn!(
            mountpoint = %self.mountpoint.display(),
            "fuse: {error}; detaching lazily, serving until the last user closes it"
        );
        if let Err(error) = unmount_path(&self.mountpoint, libc::MNT_DETACH) {
            tracing::warn!(mountpoint = %self.mountpoint.display(), "fuse: lazy unmount failed: {error}");
        }
        if let Some(session) = self.session.take() {
            // A detached mount lives until its last user (e.g. a loop device) lets go; keep
            // its session served until then without blocking the dropping thread.
            let reaper =
                std::thread::Builder::new().name("fardisk-fuse-reap".to_owned()).spawn(move || {
                    if let Err(error) = session.join() {
                        tracing::warn!("fuse: session ended with {error}");
                    }
                });
            if let Err(error) = reaper {
                tracing::warn!("fuse: cannot start the session reaper: {error}");
            }
        }
    }
}

/// umount2(2), falling back to `fusermount3 -u` when we are not allowed (a user mount).
fn unmount_path(path: &Path, flags: i32) -> io::Result<()> {
    let path_c = CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: path_c is a valid NUL-terminated string that outlives the call.
    let rc = unsafe { libc::umount2(path_c.as_ptr(), flags | libc::UMOUNT_NOFOLLOW) };
    if rc == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() != Some(libc::EPERM) {
        return Err(error);
    }
    let lazy = flags & libc::MNT_DETACH != 0;
    let mut command = std::process::Command::new("fusermount3");
    command.arg(if lazy { "-uz" } else { "-u" }).arg(path);
    let status = command.status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("fusermount3 -u {} failed: {status}", path.display())))
    }
}
