//! Mounting and unmounting. [`FuseMount`] owns the session; dropping it unmounts.

use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::os::fd::OwnedFd;

use fardisk_fuse::{
    MountOptions, Negotiated, Session, SessionConfig, SessionMonitor, SessionStats,
};
use fardisk_nbd::ExportProvider;
use tokio::runtime::Handle;

use super::attr::AttrContext;
use super::dispatch::{DispatchCounts, Dispatcher, Pause};
use super::filesystem::VolumeFs;
use super::options::FuseOptions;

/// A mounted volume directory. Unmounts on drop; call [`FuseMount::unmount`] to see errors.
pub struct FuseMount {
    mountpoint: PathBuf,
    /// st_dev of the mount's root, to make sure we unmount our mount and not one stacked
    /// on the same path after someone else unmounted ours.
    device_id: u64,
    session: Option<Session>,
    monitor: FuseMonitor,
    pause: Pause,
    /// Set when a holder owns the mount: unmounting is its job, asked through this.
    holder_unmount: Option<HolderUnmount>,
}

/// Reads a mount's statistics from anywhere, for as long as it lives (`status`).
#[derive(Clone)]
pub struct FuseMonitor {
    session: SessionMonitor,
    dispatch: Arc<DispatchCounts>,
}

impl FuseMonitor {
    /// Which transport serves the mount and how many requests each carried.
    pub fn stats(&self) -> SessionStats {
        self.session.stats()
    }

    /// Data requests finished on the transport thread, and those continued as tokio tasks
    /// because the device had to wait (`super::dispatch`).
    pub fn dispatch_counts(&self) -> (u64, u64) {
        (
            self.dispatch.finished_inline.load(std::sync::atomic::Ordering::Relaxed),
            self.dispatch.continued_as_task.load(std::sync::atomic::Ordering::Relaxed),
        )
    }
}

/// Asks the holder that owns the mount to unmount it (and waits for its answer).
pub type HolderUnmount = Box<dyn Fn() -> io::Result<()> + Send + Sync>;

/// A connection a holder process owns and hands to this engine (`fardisk import --holder`).
pub struct HeldConnection {
    /// The holder's /dev/fuse file (mounted by the holder).
    pub device: OwnedFd,
    /// What a predecessor negotiated; None when the kernel's INIT is still to be answered.
    pub negotiated: Option<Negotiated>,
    pub unmount: HolderUnmount,
}

/// The mount options of the image directory (the holder mounts with the same).
pub fn image_mount_options(allow_other: bool) -> MountOptions {
    MountOptions {
        fsname: "fardisk".to_owned(),
        subtype: "fardisk".to_owned(),
        // The kernel enforces the images' 0600 mode (essential with allow_other).
        default_permissions: true,
        allow_other,
        nodev: true,
        nosuid: true,
        noexec: true,
        noatime: true,
        user_id: effective_uid(),
        group_id: effective_gid(),
    }
}

/// A daemon killed while mounted leaves a dead FUSE mount ("Transport endpoint is not
/// connected"); the next import detaches it lazily instead of asking the user to.
pub fn clear_stale_mount(dir: &Path) {
    if let Err(e) = std::fs::metadata(dir) {
        if e.raw_os_error() == Some(libc::ENOTCONN) {
            tracing::warn!(dir = %dir.display(), "detaching the stale FUSE mount of a previous daemon");
            let detached = std::process::Command::new("fusermount3")
                .arg("-uz")
                .arg(dir)
                .status()
                .is_ok_and(|s| s.success());
            if !detached {
                let _ = std::process::Command::new("umount").arg("-l").arg(dir).status();
            }
        }
    }
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
    mount_with(dir, provider, runtime, options, None)
}

/// Serves a connection a holder owns: answers INIT if nobody did yet, or resumes it and asks
/// the kernel to resend what the predecessor left unanswered. Every worker reads the holder's
/// own file (no clones), because a request read on a clone that dies with its process is
/// aborted, not resent; and /dev/fuse only, because a request in an io_uring entry at an
/// engine's death is not resent either (Linux 6.18; docs/design/0004-fuse-path-profile.md).
pub fn mount_held(
    dir: &Path,
    provider: Arc<dyn ExportProvider>,
    runtime: Handle,
    options: FuseOptions,
    held: HeldConnection,
) -> io::Result<FuseMount> {
    mount_with(dir, provider, runtime, FuseOptions { uring: false, ..options }, Some(held))
}

fn mount_with(
    dir: &Path,
    provider: Arc<dyn ExportProvider>,
    runtime: Handle,
    options: FuseOptions,
    held: Option<HeldConnection>,
) -> io::Result<FuseMount> {
    let options = options.normalized();
    let mountpoint = dir.canonicalize().map_err(|error| {
        io::Error::new(error.kind(), format!("mount point {}: {error}", dir.display()))
    })?;
    let attrs =
        AttrContext { uid: effective_uid(), gid: effective_gid(), timestamp: options.timestamp };
    let dispatcher = Dispatcher::new(runtime, options.requests_in_flight_max);
    let pause = dispatcher.pause();
    let dispatch_counts = dispatcher.counts();
    let mount_options = image_mount_options(options.allow_other);
    let config = SessionConfig {
        device_threads: options.threads,
        clone_fds: held.is_none(),
        uring: options.uring,
        uring_queue_depth: options.uring_queue_depth,
        name: "fardisk-fuse".to_owned(),
    };
    let filesystem = Arc::new(VolumeFs::new(provider, options, attrs, dispatcher));
    let (started, holder_unmount) = match held {
        None => {
            let device = fardisk_fuse::mount::open_device()?;
            fardisk_fuse::mount::mount_with_fd(device.as_fd(), &mountpoint, &mount_options)?;
            (Session::start(device, filesystem, config), None)
        }
        Some(HeldConnection { device, negotiated: None, unmount }) => {
            (Session::start(device, filesystem, config), Some(unmount))
        }
        Some(HeldConnection { device, negotiated: Some(negotiated), unmount }) => {
            let session = Session::resume(device, negotiated, filesystem, config).and_then(|s| {
                s.notify_resend()?;
                Ok(s)
            });
            (session, Some(unmount))
        }
    };
    let session = match started {
        Ok(session) => session,
        Err(error) if holder_unmount.is_some() => {
            // The holder keeps the mount: the next engine tries again.
            return Err(io::Error::new(
                error.kind(),
                format!("FUSE connection at {} (held): {error}", mountpoint.display()),
            ));
        }
        Err(error) => {
            // The kernel holds the mount until it is unmounted; leave nothing behind.
            let _ = fardisk_fuse::mount::unmount(&mountpoint, true);
            return Err(io::Error::new(
                error.kind(),
                format!("FUSE handshake at {}: {error}", mountpoint.display()),
            ));
        }
    };
    let monitor = FuseMonitor { session: session.monitor(), dispatch: dispatch_counts };
    let mut mount = FuseMount {
        mountpoint,
        device_id: 0,
        session: Some(session),
        monitor,
        pause,
        holder_unmount,
    };
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

    /// The INIT parameters of the connection (for the holder, which gives them to the next
    /// engine).
    pub fn negotiated(&self) -> Option<Negotiated> {
        self.session.as_ref().map(Session::negotiated)
    }

    /// Stops running new data requests (they are left for the next engine) and waits up to
    /// `wait` for the running ones; returns whether none runs any more. One way: the engine
    /// then exits (an upgrade), it never serves again.
    ///
    /// On a held connection the session first begins its handover: from then on a request
    /// whose reply is dropped unanswered — one still running when this process leaves by
    /// unwinding (its runtime shut down, a panic) rather than by `exit` — is left in the
    /// kernel for the next engine instead of answered EIO, which a database takes for a
    /// failed write or fsync. Without a holder nobody would resend it (the kernel ends the
    /// requests of a closed file), so dropped replies keep answering EIO.
    pub fn pause_and_drain(&self, wait: std::time::Duration) -> bool {
        if let (Some(session), Some(_)) = (&self.session, &self.holder_unmount) {
            session.begin_handover();
        }
        self.pause.pause_and_drain(wait)
    }

    /// A handle that reads [`FuseMount::stats`] from elsewhere (the daemon's status).
    pub fn monitor(&self) -> FuseMonitor {
        self.monitor.clone()
    }

    /// Unmounts and waits for the session threads to finish. Fails with EBUSY (and stays
    /// mounted, so the call can be retried) while an image is in use, e.g. by a loop device.
    pub fn unmount(&mut self) -> io::Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        if let Some(unmount) = &self.holder_unmount {
            // The holder unmounts (lazily if the directory is busy); the session's threads
            // end with the connection, or with this process.
            let result = unmount();
            drop(session);
            return result;
        }
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
        let held = self.holder_unmount.is_some();
        let Err(error) = self.unmount() else {
            return;
        };
        if held {
            tracing::warn!(mountpoint = %self.mountpoint.display(), "fuse: the holder: {error}");
            return;
        }
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
