//! The holder's state file, `RUN_DIR/POOL.holder.json`: what `fardisk status` shows while no
//! engine answers on the control socket (between a kill and the next engine's import, or
//! after the holder gave up). Display only; the holder never reads it back to decide anything.

use super::link::Handover;
use crate::paths::HostPaths;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Most bytes read from the state file.
const STATE_BYTES_MAX: u64 = 64 << 10;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderState {
    pub holder_pid: u32,
    /// The engine generation being started or serving.
    pub generation: u64,
    pub restarts: u64,
    pub upgrades: u64,
    /// Set when the holder gave up: why.
    pub stopped: Option<String>,
    /// The last engine exit, in words.
    pub last_exit: Option<String>,
}

impl HolderState {
    pub fn serving(h: &Handover, stopped: Option<String>) -> HolderState {
        HolderState {
            holder_pid: h.holder_pid,
            generation: h.generation,
            restarts: h.restarts_total,
            upgrades: h.upgrades_total,
            stopped,
            last_exit: h.recent.last().map(|e| format!("engine pid {} {}", e.pid, e.reason)),
        }
    }

    /// One line for `fardisk status` when the engine does not answer.
    pub fn line(&self, pool: &str) -> String {
        let last = self.last_exit.as_deref().unwrap_or("none");
        match &self.stopped {
            Some(why) => format!("pool '{pool}': holder pid {} STOPPED: {why}", self.holder_pid),
            None => format!(
                "pool '{pool}': engine restarting under holder pid {} (generation {}, {} restarts, {} upgrades; last exit: {last}); requests wait in the kernel",
                self.holder_pid, self.generation, self.restarts, self.upgrades
            ),
        }
    }
}

pub fn path(paths: &HostPaths, pool: &str) -> PathBuf {
    paths.run_dir.join(format!("{pool}.holder.json"))
}

pub fn lock_path(paths: &HostPaths, pool: &str) -> PathBuf {
    paths.run_dir.join(format!("{pool}.holder.lock"))
}

/// Writes atomically (rename); a failure is logged, never fatal: it is for display.
pub fn write(path: &Path, state: &HolderState) {
    let tmp = path.with_extension("json.tmp");
    let written = serde_json::to_vec_pretty(state)
        .map_err(std::io::Error::other)
        .and_then(|bytes| std::fs::write(&tmp, bytes))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        tracing::debug!(error = %e, path = %path.display(), "holder: cannot write its state file");
    }
}

pub fn read(path: &Path) -> Option<HolderState> {
    use std::io::Read;
    let mut text = Vec::new();
    std::fs::File::open(path).ok()?.take(STATE_BYTES_MAX).read_to_end(&mut text).ok()?;
    serde_json::from_slice(&text).ok()
}

pub fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
}

/// Wall time for the exit records (display only).
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
