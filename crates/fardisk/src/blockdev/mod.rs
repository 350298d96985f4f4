//! Volumes as block devices with stable names (`import --block-devices`): each volume's FUSE
//! image is bound to a loop device with direct I/O, and `/dev/fardisk/POOL/VOLUME` (a symlink)
//! points at it, as zvols appear under /dev/zvol/POOL/VOLUME.
//!
//! The devices belong to the kernel, not to an engine: an engine that dies (or hands over for
//! an upgrade) leaves them bound, and under a holder the FUSE mount they read through stays
//! too, so the next engine finds them ([`BlockDevices::reconcile`]: the device's sysfs
//! `backing_file` is an image of this mount, its `lo_file_name` carries this pool's marker, and
//! its backing file's device and inode are those of the image now) and keeps them: whatever
//! is mounted on them never notices. They are unbound at export, which refuses while one is in
//! use (a file system mounted on it: an exclusive open fails with EBUSY), and at `volume
//! destroy`, refused the same way.
//!
//! Without a holder an engine's death kills the mount, and its devices are left over a dead
//! file; [`clear_stale`] unbinds them at the next import (before the dead mount is cleared
//! away, while sysfs still names their images by their path) unless they are in use, which it
//! says, marking them to unbind themselves once unmounted.
//!
//! Every function here blocks and some open images through our own FUSE mount: call them from
//! a blocking thread once the mount serves, never from a FUSE request handler.

pub mod loopdev;
pub mod names;
pub mod sysfs;

use loopdev::LoopStatus;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// How long a device unbound with no other user may take to disappear from sysfs (another
/// short-lived opener, such as udev probing a new device, delays it until its close).
const UNBIND_WAIT: Duration = Duration::from_secs(2);
const UNBIND_POLL: Duration = Duration::from_millis(20);
/// A volume created a moment ago may not be visible in the mount for a few ms.
const IMAGE_APPEAR_TRIES_MAX: u32 = 50;

/// The block devices of one imported pool.
pub struct BlockDevices {
    pool: String,
    /// The FUSE mount directory, canonical (as sysfs shows backing files).
    mount_dir: PathBuf,
    dev_dir: PathBuf,
    read_only: bool,
    /// Volume → loop device number. The lock also orders attaches and detaches.
    attached: Mutex<BTreeMap<String, u32>>,
}

impl BlockDevices {
    pub fn new(pool: &str, mount_dir: &Path, read_only: bool) -> io::Result<BlockDevices> {
        names::pool_dir(Path::new(names::DEV_DIR), pool)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(BlockDevices {
            pool: pool.to_owned(),
            mount_dir: mount_dir.canonicalize()?,
            dev_dir: PathBuf::from(names::DEV_DIR),
            read_only,
            attached: Mutex::new(BTreeMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u32>> {
        self.attached.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn stable_path(&self, volume: &str) -> Result<PathBuf, String> {
        names::stable_path(&self.dev_dir, &self.pool, volume)
    }

    /// Once the mount serves: keeps the devices a predecessor bound (recognised as ours and
    /// live), unbinds stale ones not in use, binds a device for every other volume, and points
    /// the stable paths at them (removing any left for volumes that are gone). Returns what it
    /// could not do, one line each (also logged).
    pub fn reconcile(&self, volumes: &[String]) -> Vec<String> {
        let mut attached = self.lock();
        let mut problems = Vec::new();
        for bound in sysfs::bound_loops(Path::new(sysfs::SYS_BLOCK)) {
            let Some(volume) = names::volume_of_backing_file(&self.mount_dir, &bound.backing_file)
            else {
                continue;
            };
            let n = bound.number;
            let image = names::image_path(&self.mount_dir, volume);
            match loopdev::status(n) {
                Ok(s) if s.file_name != names::marker(&self.pool, volume) => {
                    let line = format!("/dev/loop{n} is bound to {} by something other than fardisk (name '{}'): left alone", image.display(), s.file_name);
                    tracing::warn!("{line}");
                    problems.push(line);
                }
                Ok(s)
                    if is_image(&s, &image)
                        && volumes.iter().any(|v| v == volume)
                        && !attached.contains_key(volume) =>
                {
                    tracing::info!(
                        volume,
                        device = n,
                        direct_io = bound.direct_io,
                        "block device of a previous engine recognised; kept"
                    );
                    attached.insert(volume.to_owned(), n);
                }
                _ => match unbind_stale(n, &image) {
                    Ok(line) => tracing::info!("{line}"),
                    Err(line) => {
                        tracing::warn!("{line}");
                        problems.push(line);
                    }
                },
            }
        }
        for volume in volumes {
            if !attached.contains_key(volume) {
                match self.attach_locked(volume) {
                    Ok(n) => {
                        attached.insert(volume.clone(), n);
                    }
                    Err(line) => problems.push(line),
                }
            }
        }
        for (volume, n) in attached.iter() {
            if let Err(line) = self.link(volume, *n) {
                problems.push(line);
            }
        }
        self.prune_links(&attached);
        problems
    }

    /// Binds a device for a volume created (or cloned) while the pool is imported.
    pub fn attach(&self, volume: &str) -> Result<(), String> {
        let mut attached = self.lock();
        if attached.contains_key(volume) {
            return Ok(());
        }
        let n = self.attach_locked(volume)?;
        attached.insert(volume.to_owned(), n);
        self.link(volume, n)
    }

    fn attach_locked(&self, volume: &str) -> Result<u32, String> {
        let path = self.stable_path(volume)?;
        let image = names::image_path(&self.mount_dir, volume);
        let marker = names::marker(&self.pool, volume);
        let mut tries = 0;
        let n = loop {
            match loopdev::attach(&image, &marker, self.read_only) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::NotFound && tries < IMAGE_APPEAR_TRIES_MAX => {
                    tries += 1;
                    std::thread::sleep(UNBIND_POLL);
                }
                Err(e) => {
                    let line = format!(
                        "cannot bind {} to a loop device for {}: {e}",
                        image.display(),
                        path.display()
                    );
                    tracing::error!("{line}");
                    return Err(line);
                }
            }
        };
        match sysfs::read_bound(Path::new(sysfs::SYS_BLOCK), n) {
            Some(b) if b.backing_file == image && b.direct_io => {
                tracing::info!(volume, device = n, "block device attached with direct I/O");
            }
            Some(b) if b.backing_file == image => tracing::warn!(
                volume,
                device = n,
                "block device attached, but the kernel turned direct I/O off (sysfs dio=0): reads and writes go through the page cache twice"
            ),
            other => tracing::warn!(volume, device = n, sysfs = ?other, "block device attached, but sysfs does not show the image as its backing file"),
        }
        Ok(n)
    }

    /// Points `DEV_DIR/POOL/VOLUME` at `/dev/loopN` (replacing whatever was there atomically).
    fn link(&self, volume: &str, n: u32) -> Result<(), String> {
        let path = self.stable_path(volume)?;
        let target = loopdev::device_path(n);
        if std::fs::read_link(&path).is_ok_and(|t| t == target) {
            return Ok(());
        }
        let dir = path.parent().unwrap_or(&self.dev_dir);
        // A leading dot: never a volume name (those start with a letter).
        let tmp = dir.join(format!(".{volume}.new"));
        let result = std::fs::create_dir_all(dir)
            .and_then(|_| match std::fs::remove_file(&tmp) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            })
            .and_then(|_| std::os::unix::fs::symlink(&target, &tmp))
            .and_then(|_| std::fs::rename(&tmp, &path));
        result.map_err(|e| {
            let line = format!("cannot point {} at {}: {e}", path.display(), target.display());
            tracing::error!("{line}");
            line
        })
    }

    /// Removes entries of `DEV_DIR/POOL` that name no attached volume.
    fn prune_links(&self, attached: &BTreeMap<String, u32>) {
        let Ok(dir) = names::pool_dir(&self.dev_dir, &self.pool) else { return };
        let Ok(entries) = std::fs::read_dir(&dir) else { return };
        for e in entries.flatten() {
            let keep = e.file_name().to_str().is_some_and(|n| attached.contains_key(n));
            let is_link = e.file_type().is_ok_and(|t| t.is_symlink());
            if !keep && is_link {
                tracing::info!(path = %e.path().display(), "removing a stale block device path");
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    fn unlink(&self, volume: &str) {
        if let Ok(path) = self.stable_path(volume) {
            let _ = std::fs::remove_file(&path);
        }
        // Empty directories go with their last path; a directory with anything else stays.
        if let Ok(dir) = names::pool_dir(&self.dev_dir, &self.pool) {
            if std::fs::remove_dir(&dir).is_ok() {
                let _ = std::fs::remove_dir(&self.dev_dir);
            }
        }
    }

    fn in_use_line(&self, volume: &str, n: u32, what: &str) -> String {
        let path = self.stable_path(volume).unwrap_or_default();
        format!(
            "volume '{volume}' of pool '{}' is in use as {} (/dev/loop{n}: a file system is mounted on it, or a process holds it open exclusively); unmount it first, then {what} again (nothing was changed)",
            self.pool,
            path.display()
        )
    }

    /// Unbinds a volume's device before `volume destroy` (or a rollback); refuses, changing
    /// nothing, while it is in use.
    pub fn detach(&self, volume: &str, what: &str) -> Result<(), String> {
        let mut attached = self.lock();
        let Some(&n) = attached.get(volume) else { return Ok(()) };
        let claim = match loopdev::claim(n) {
            Ok(f) => Some(f),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                return Err(self.in_use_line(volume, n, what))
            }
            Err(e) => {
                tracing::warn!(volume, device = n, error = %e, "block device already gone");
                None
            }
        };
        if let Some(f) = claim {
            self.unbind_claimed(volume, n, f);
        }
        attached.remove(volume);
        self.unlink(volume);
        Ok(())
    }

    /// At export: claims every device exclusively first (so nothing can be mounted meanwhile)
    /// and refuses, changing nothing, if one is in use; then unbinds them all and removes the
    /// stable paths (and the directories they leave empty).
    pub fn detach_all_for_export(&self) -> Result<(), String> {
        let mut attached = self.lock();
        let mut claims = Vec::new();
        for (volume, &n) in attached.iter() {
            match loopdev::claim(n) {
                Ok(f) => claims.push((volume.clone(), n, f)),
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    return Err(format!(
                        "cannot export pool '{}': {}",
                        self.pool,
                        self.in_use_line(volume, n, "export")
                    ))
                }
                Err(e) => {
                    tracing::warn!(volume, device = n, error = %e, "block device already gone")
                }
            }
        }
        for (volume, n, f) in claims {
            self.unbind_claimed(&volume, n, f);
        }
        let volumes: Vec<String> = attached.keys().cloned().collect();
        attached.clear();
        for v in volumes {
            self.unlink(&v);
        }
        Ok(())
    }

    /// At a stop by signal (SIGTERM, the holder's stop): like an export, but devices in use are
    /// marked to unbind themselves once unmounted instead of refusing the stop.
    pub fn detach_all_at_stop(&self) {
        let volumes: Vec<String> = self.lock().keys().cloned().collect();
        for volume in volumes {
            if self.detach(&volume, "export").is_err() {
                let n = self.lock().remove(&volume);
                let path = self.stable_path(&volume).unwrap_or_default();
                tracing::warn!(
                    "volume '{volume}' is in use as {} (/dev/loop{}) while the pool stops: its I/O fails from now on; it detaches itself once unmounted",
                    path.display(),
                    n.unwrap_or_default()
                );
                if let Some(n) = n {
                    if let Err(e) = loopdev::detach_when_unused(n) {
                        tracing::warn!(device = n, error = %e, "cannot mark the device to unbind itself");
                    }
                }
                self.unlink(&volume);
            }
        }
    }

    /// Unbinds a device we hold exclusively and checks that it went.
    fn unbind_claimed(&self, volume: &str, n: u32, claim: std::fs::File) {
        let result = loopdev::detach(&claim);
        drop(claim);
        match result.map(|()| wait_unbound(n, &names::image_path(&self.mount_dir, volume))) {
            Ok(true) => tracing::info!(volume, device = n, "block device detached"),
            Ok(false) => tracing::warn!(volume, device = n, "block device still bound: a process holds it open; it unbinds itself at its last close"),
            Err(e) => tracing::warn!(volume, device = n, error = %e, "cannot detach the block device"),
        }
    }

    /// After `volume resize`: the device takes the image's new size. The kernel keeps the
    /// image's size cached for the mount's attribute timeout, so it is asked afresh first.
    pub fn refresh_capacity(&self, volume: &str) -> Result<(), String> {
        let attached = self.lock();
        let Some(&n) = attached.get(volume) else { return Ok(()) };
        let image = names::image_path(&self.mount_dir, volume);
        statx_fresh(&image)
            .and_then(|_| loopdev::refresh_capacity(n))
            .map_err(|e| format!("volume '{volume}' was resized, but /dev/loop{n} kept its old size ({e}); `losetup -c /dev/loop{n}` retries"))
    }

    /// `status --json`'s `block_device` of a volume: its stable path, the device, and whether
    /// direct I/O is on (read back from sysfs).
    pub fn describe(&self, volume: &str) -> Option<Value> {
        let n = *self.lock().get(volume)?;
        let bound = sysfs::read_bound(Path::new(sysfs::SYS_BLOCK), n);
        Some(json!({
            "path": self.stable_path(volume).ok(),
            "device": loopdev::device_path(n),
            "direct_io": bound.as_ref().map(|b| b.direct_io),
            "bound": bound.is_some(),
        }))
    }
}

/// The device's backing file is `image` as the mount shows it now (same device and inode):
/// a device bound through a mount that has since died has another device number.
fn is_image(status: &LoopStatus, image: &Path) -> bool {
    std::fs::metadata(image)
        .is_ok_and(|m| m.dev() == status.backing_dev && m.ino() == status.backing_inode)
}

/// Waits (bounded) until device `n` is no longer bound to `image`.
fn wait_unbound(n: u32, image: &Path) -> bool {
    let tries = (UNBIND_WAIT.as_millis() / UNBIND_POLL.as_millis()).max(1);
    for _ in 0..tries {
        match sysfs::read_bound(Path::new(sysfs::SYS_BLOCK), n) {
            Some(b) if b.backing_file == image => std::thread::sleep(UNBIND_POLL),
            _ => return true,
        }
    }
    false
}

/// Unbinds a device left over a dead image of this mount: Ok with the line that says so, or,
/// when it is in use, marks it to unbind itself once unmounted and returns the line that says
/// what the operator has to do.
fn unbind_stale(n: u32, image: &Path) -> Result<String, String> {
    let what = format!(
        "stale /dev/loop{n} (over {}, left by an engine that died without a holder)",
        image.display()
    );
    match loopdev::claim(n) {
        Ok(claim) => {
            let result = loopdev::detach(&claim);
            drop(claim);
            match result {
                Ok(()) if wait_unbound(n, image) => Ok(format!("detached {what}")),
                Ok(()) => Err(format!(
                    "{what} is held open by a process; it detaches itself at its last close"
                )),
                Err(e) => Err(format!("cannot detach {what}: {e}")),
            }
        }
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            let marked = loopdev::detach_when_unused(n).is_ok();
            Err(format!(
                "{what} is still in use: unmount what is mounted on it (its I/O fails); {}",
                if marked { "it then detaches itself" } else { "then detach it (losetup -d)" }
            ))
        }
        Err(e) => Err(format!("cannot open {what}: {e}")),
    }
}

/// Before a mount at `mount_dir` is made (no engine or holder serves it): unbinds the loop
/// devices left bound to images there by an engine that died without a holder. Returns one
/// line per device: Ok what it detached, Err what it could not (and what to do). It acts only
/// when `mount_dir` is a dead FUSE mount (ENOTCONN): then every device whose sysfs backing file
/// is an image path there reads a file nobody serves any more. (Asking each device's status is
/// no test: the kernel may answer from its attribute cache.)
pub fn clear_stale(mount_dir: &Path) -> Vec<Result<String, String>> {
    match std::fs::metadata(mount_dir) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {}
        _ => return Vec::new(),
    }
    // A dead FUSE mount cannot be resolved itself: its parent can.
    let mount_dir = match (mount_dir.parent(), mount_dir.file_name()) {
        (Some(parent), Some(name)) => {
            let parent = if parent.as_os_str().is_empty() { Path::new(".") } else { parent };
            match parent.canonicalize() {
                Ok(p) => p.join(name),
                Err(_) => return Vec::new(),
            }
        }
        _ => return Vec::new(),
    };
    let mut lines = Vec::new();
    for bound in sysfs::bound_loops(Path::new(sysfs::SYS_BLOCK)) {
        let Some(volume) = names::volume_of_backing_file(&mount_dir, &bound.backing_file) else {
            continue;
        };
        lines.push(unbind_stale(bound.number, &names::image_path(&mount_dir, volume)));
    }
    lines
}

/// `statx` with AT_STATX_FORCE_SYNC: the FUSE kernel module asks the server for the size
/// instead of answering from its attribute cache.
fn statx_fresh(path: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: a NUL-terminated path and a zeroed statx buffer that lives across the call.
    let r = unsafe {
        let mut buf: libc::statx = std::mem::zeroed();
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_STATX_FORCE_SYNC,
            libc::STATX_SIZE,
            &mut buf,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
