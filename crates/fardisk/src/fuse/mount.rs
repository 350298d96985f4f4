//! Mounting and unmounting. [`FuseMount`] owns the session; dropping it unmounts.

use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fardisk_fuse::{MountOptions, Session, SessionConfig, SessionMonitor, SessionStats};
use fardisk_nbd::ExportProvider;
use tokio::runtime::Handle;

use super::attr::AttrContext;
use super::dispatch::Dispatcher;
use super::filesystem::VolumeFs;
use super::options::FuseOptions;

/// A mounted volume directory. Unmounts on drop; call [`FuseMount::unmount`] to see errors.
pub struct FuseMount {
    mountpoint: PathBuf,
    /// st_dev of the mount's root, to make sure we unmount our mount and not one stacked
    /// on the same path after someone else unmounted ours.
    device_id: u64,
    session: Option<Session>,
    monitor: SessionMonitor,
}

impl std::fmt::Debug for FuseMount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FuseMount").field("mountpoint", &self.mountpoint).finish()
    }
}

/// Mounts `dir`, showing each volume of `provider` as a 0600 image file of the volume's
/// size. Data requests run as tasks on `runtime`, which must be driven by its own worker
/// threads (a multi-thread runtime): the transport threads only spawn onto it. The call
/// returns once the kernel has completed the FUSE handshake (and, with `options.uring`,
/// the io_uring queues are registered or refused). Needs /dev/fuse and root
/// (CAP_SYS_ADMIN for mount(2)). `mount`, `unmount` and drop block their thread: call
/// them from a plain or `spawn_blocking` thread, and drop the mount before the runtime.
pub fn mount(
    dir: &Path,
    provider: Arc<dyn ExportProvider>,
    runtime: Handle,
    options: FuseOptions,
) -> io::Result<FuseMount> {
    let options = options.normalized();
    let mountpoint = dir.canonicalize().map_err(|error| {
        io::Error::new(error.kind(), format!("mount point {}: {error}", dir.display()))
    })?;
    let attrs =
        AttrContext { uid: effective_uid(), gid: effective_gid(), timestamp: options.timestamp };
    let dispatcher = Dispatcher::new(runtime, options.requests_in_flight_max);
    let mount_options = MountOptions {
        fsname: "fardisk".to_owned(),
        subtype: "fardisk".to_owned(),
        // The kernel enforces the images' 0600 mode (essential with allow_other).
        default_permissions: true,
        allow_other: options.allow_other,
        nodev: true,
        nosuid: true,
        noexec: true,
        noatime: true,
        user_id: attrs.uid,
        group_id: attrs.gid,
    };
    let config = SessionConfig {
        device_threads: options.threads,
        clone_fds: true,
        uring: options.uring,
        uring_queue_depth: options.uring_queue_depth,
        name: "fardisk-fuse".to_owned(),
    };
    let filesystem = Arc::new(VolumeFs::new(provider, options, attrs, dispatcher));
    let device = fardisk_fuse::mount::open_device()?;
    fardisk_fuse::mount::mount_with_fd(device.as_fd(), &mountpoint, &mount_options)?;
    let session = match Session::start(device, filesystem, config) {
        Ok(session) => session,
        Err(error) => {
            // The kernel holds the mount until it is unmounted; leave nothing behind.
            let _ = fardisk_fuse::mount::unmount(&mountpoint, true);
            return Err(io::Error::new(
                error.kind(),
                format!("FUSE handshake at {}: {error}", mountpoint.display()),
            ));
        }
    };
    let monitor = session.monitor();
    let mut mount = FuseMount { mountpoint, device_id: 0, session: Some(session), monitor };
    // Served by the session just started (the root's getattr).
    mount.device_id = std::fs::metadata(&mount.mountpoint)?.dev();
    let stats = mount.stats();
    tracing::info!(
        mountpoint = %mount.mountpoint.display(),
        transport = stats.transport.name(),
        reason = %stats.transport_reason,
        "fuse: mounted"
    );
    Ok(mount)
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

    /// Which transport serves the mount and how many requests each carried.
    pub fn stats(&self) -> SessionStats {
        self.monitor.stats()
    }

    /// A handle that reads [`FuseMount::stats`] from elsewhere (the daemon's status).
    pub fn monitor(&self) -> SessionMonitor {
        self.monitor.clone()
    }

    /// Unmounts and waits for the session threads to finish. Fails with EBUSY (and stays
    /// mounted, so the call can be retried) while an image is in use, e.g. by a loop device.
    pub fn unmount(&mut self) -> io::Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        if self.still_ours() {
            if let Err(error) = fardisk_fuse::mount::unmount(&self.mountpoint, false) {
                // Returned as is so callers can test raw_os_error() for EBUSY.
                tracing::warn!(mountpoint = %self.mountpoint.display(), "fuse: unmount failed: {error}");
                self.session = Some(session);
                return Err(error);
            }
        }
        // The kernel has ended the connection: the session's threads see that and end.
        session.join();
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
        if let Err(error) = fardisk_fuse::mount::unmount(&self.mountpoint, true) {
            tracing::warn!(mountpoint = %self.mountpoint.display(), "fuse: lazy unmount failed: {error}");
        }
        if let Some(session) = self.session.take() {
            // A detached mount lives until its last user (e.g. a loop device) lets go; keep
            // its session served until then without blocking the dropping thread.
            let reaper = std::thread::Builder::new()
                .name("fardisk-fuse-reap".to_owned())
                .spawn(move || session.join());
            if let Err(error) = reaper {
                tracing::warn!("fuse: cannot start the session reaper: {error}");
            }
        }
    }
}
