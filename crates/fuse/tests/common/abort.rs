//! Ends a test's FUSE connection however the test ends. Shared by this crate's takeover tests
//! (`common::holder`) and, by path, by `crates/fardisk/tests/fuse_handover.rs`: it uses only
//! std and `fardisk_fuse`, which both have.

use std::path::{Path, PathBuf};
use std::process::Command;

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
