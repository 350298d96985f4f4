//! The holder's state file, `RUN_DIR/POOL.holder.state`: what `fardisk status` shows while no
//! engine answers on the control socket (between a kill and the next engine's import, or
//! after the holder gave up). Display only; the holder never reads it back to decide anything.
//! JSON in a [`frame`](super::frame) (magic "FDHSTAT1", version, xxh3): a state file left by
//! another fardisk version is either read or refused with one line, never misread.

use super::frame;
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
    /// While no engine serves after one that did (Unix ms): requests queue in the kernel
    /// from then on, until an engine serves again or `reimport_wait_s` has passed. Left out
    /// of the file when None, so a state file without it reads the same in every version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_engine_since_ms: Option<u64>,
    /// The operator's bound on that wait (`import --reimport-wait`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reimport_wait_s: Option<u64>,
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
            no_engine_since_ms: None,
            reimport_wait_s: None,
        }
    }

    /// The same, noting since when no engine has served and until when the holder waits.
    pub fn waiting(mut self, since_ms: Option<u64>, reimport_wait_s: u64) -> HolderState {
        self.no_engine_since_ms = since_ms;
        self.reimport_wait_s = since_ms.map(|_| reimport_wait_s);
        self
    }

    /// One line for `fardisk status` when the engine does not answer.
    pub fn line(&self, pool: &str) -> String {
        let last = self.last_exit.as_deref().unwrap_or("none");
        match &self.stopped {
            Some(why) => format!("pool '{pool}': holder pid {} STOPPED: {why}", self.holder_pid),
            None => format!(
                "pool '{pool}': engine restarting under holder pid {} (generation {}, {} restarts, {} upgrades; last exit: {last}); requests wait in the kernel{}",
                self.holder_pid,
                self.generation,
                self.restarts,
                self.upgrades,
                self.waiting_text(wall_ms())
            ),
        }
    }

    /// ", no engine has served for 42 s (requests fail with EIO after 300 s:
    /// --reimport-wait)", or nothing while an engine serves.
    pub fn waiting_text(&self, now_ms: u64) -> String {
        match (self.no_engine_since_ms, self.reimport_wait_s) {
            (Some(since), Some(bound)) => format!(
                ", no engine has served for {} s (requests fail with EIO after {bound} s: --reimport-wait)",
                now_ms.saturating_sub(since) / 1000
            ),
            _ => String::new(),
        }
    }
}

pub fn path(paths: &HostPaths, pool: &str) -> PathBuf {
    paths.run_dir.join(format!("{pool}.holder.state"))
}

pub fn lock_path(paths: &HostPaths, pool: &str) -> PathBuf {
    paths.run_dir.join(format!("{pool}.holder.lock"))
}

/// Writes atomically (rename); a failure is logged, never fatal: it is for display.
pub fn write(path: &Path, state: &HolderState) {
    let tmp = path.with_extension("state.tmp");
    let written = encode(state)
        .map_err(std::io::Error::other)
        .and_then(|bytes| std::fs::write(&tmp, bytes))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        tracing::debug!(error = %e, path = %path.display(), "holder: cannot write its state file");
    }
}

/// The bytes of the state file.
pub fn encode(state: &HolderState) -> serde_json::Result<Vec<u8>> {
    Ok(frame::encode(frame::STATE_MAGIC, &serde_json::to_vec(state)?))
}

/// The state from the bytes of the file; the frame is verified before the JSON is parsed.
pub fn decode(bytes: &[u8]) -> Result<HolderState, String> {
    let payload = frame::decode(frame::STATE_MAGIC, "holder state file", bytes).map_err(|e| e.0)?;
    serde_json::from_slice(payload).map_err(|e| format!("holder state file: malformed: {e}"))
}

/// The state, or None when there is no file or it is refused (said once in the log: the file
/// is for display only).
pub fn read(path: &Path) -> Option<HolderState> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path).ok()?.take(STATE_BYTES_MAX).read_to_end(&mut bytes).ok()?;
    match decode(&bytes) {
        Ok(state) => Some(state),
        Err(why) => {
            tracing::warn!(path = %path.display(), "{why}");
            None
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_file_round_trips_and_a_damaged_one_reads_as_none() {
        let dir = std::env::temp_dir().join(format!("fardisk-holder-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("tank.holder.state");
        let state = HolderState {
            holder_pid: 1,
            generation: 2,
            restarts: 3,
            upgrades: 4,
            stopped: Some("gave up".into()),
            last_exit: None,
            no_engine_since_ms: Some(5),
            reimport_wait_s: Some(300),
        };
        write(&path, &state);
        assert_eq!(read(&path), Some(state));
        let mut bytes = std::fs::read(&path).expect("bytes");
        bytes[17] ^= 1;
        std::fs::write(&path, &bytes).expect("damage");
        assert_eq!(read(&path), None, "a damaged state file is not shown");
        std::fs::write(&path, b"{\"holder_pid\":1}").expect("old json");
        assert_eq!(read(&path), None, "an unframed file is refused (wrong magic)");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_wait_for_an_engine_is_shown_with_its_bound() {
        let state = HolderState {
            holder_pid: 1,
            generation: 2,
            restarts: 1,
            upgrades: 0,
            stopped: None,
            last_exit: Some("engine pid 9 exit status 1".into()),
            no_engine_since_ms: None,
            reimport_wait_s: None,
        };
        assert_eq!(state.waiting_text(50_000), "");
        let waiting = state.waiting(Some(8_000), 300);
        assert_eq!(
            waiting.waiting_text(50_000),
            ", no engine has served for 42 s (requests fail with EIO after 300 s: --reimport-wait)"
        );
        // Not written when nobody waits: a v1 state file without the fields reads as before.
        let serving = waiting.clone().waiting(None, 300);
        let json = String::from_utf8(serde_json::to_vec(&serving).expect("json")).expect("utf8");
        assert!(
            !json.contains("no_engine_since_ms") && !json.contains("reimport_wait_s"),
            "{json}"
        );
    }
}
