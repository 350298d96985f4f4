//! The holder's side of the takeover tests: the test process opens and mounts the
//! connection and keeps it open, engines are children (this same test binary in another
//! role), and whatever happens the connection is aborted at the end so that no reader is
//! left blocked in a request nobody will answer.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// Why FUSE_NOTIFY_RESEND cannot be tested here (a kernel older than 6.9), or None.
pub fn kernel_has_resend() -> Option<String> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release.trim().split(['.', '-']).map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if (major, minor) < (6, 9) {
        return Some(format!("kernel {} has no FUSE_NOTIFY_RESEND (6.9+)", release.trim()));
    }
    None
}

/// An engine process (this test binary with `role_env=role`), killed and reaped on drop.
pub struct Engine(pub Child);

impl Engine {
    pub fn spawn(role_env: &str, role: &str, dir_env: &str, dir: &Path) -> Engine {
        let child = Command::new(std::env::current_exe().expect("test binary"))
            .env(role_env, role)
            .env(dir_env, dir)
            .spawn()
            .expect("spawn an engine");
        Engine(child)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Aborts the connection when the test ends, however it ends: a reader blocked in a
/// request that nobody will answer would otherwise keep this process from exiting (a
/// request already read by a server waits for its answer even through SIGKILL).
pub struct AbortOnDrop {
    mountpoint: PathBuf,
    /// The connection's number in /sys/fs/fuse/connections (the mount's device minor).
    connection: Option<String>,
}

impl AbortOnDrop {
    /// Reads the mount's device number from /proc/self/mountinfo (a stat of the mount
    /// point would need a server to answer).
    pub fn new(mountpoint: &Path) -> AbortOnDrop {
        let wanted = mountpoint.to_string_lossy().into_owned();
        let connection = std::fs::read_to_string("/proc/self/mountinfo").ok().and_then(|info| {
            info.lines().find_map(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                (fields.get(4) == Some(&wanted.as_str()))
                    .then(|| fields.get(2).and_then(|dev| dev.split(':').nth(1)).map(str::to_owned))
                    .flatten()
            })
        });
        AbortOnDrop { mountpoint: mountpoint.to_owned(), connection }
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(connection) = &self.connection {
            let connections = Path::new("/sys/fs/fuse/connections");
            if !connections.join(connection).exists() {
                let _ =
                    Command::new("mount").args(["-t", "fusectl", "none"]).arg(connections).status();
            }
            let _ = std::fs::write(connections.join(connection).join("abort"), b"1");
        }
        let _ = fardisk_fuse::mount::unmount(&self.mountpoint, true);
    }
}
