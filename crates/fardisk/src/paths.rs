//! Where fardisk keeps local state: the pool registry (like zpool.cache), daemon logs and the
//! owner-only control sockets. The directories come from the configuration (`Config::paths`:
//! `FARDISK_HOME`, `FARDISK_RUN_DIR` or the config file).

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// This host's state directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPaths {
    /// Pool registry and daemon logs (`FARDISK_HOME`).
    pub home: PathBuf,
    /// Control sockets (`FARDISK_RUN_DIR`).
    pub run_dir: PathBuf,
}

/// What `import` needs to find a pool again without the user repeating it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PoolRecord {
    pub name: String,
    pub store_url: String,
    #[serde(default)]
    pub simulate: Option<String>,
    /// Path of the pool's encryption key file (never the key).
    #[serde(default)]
    pub key_file: Option<String>,
}

impl HostPaths {
    pub fn control_socket(&self, pool: &str) -> PathBuf {
        self.run_dir.join(format!("{pool}.sock"))
    }

    /// Where a fenced writer leaves the records it held (`fardisk held`).
    pub fn held_dir(&self) -> PathBuf {
        self.home.join("held")
    }

    pub fn log_file(&self, pool: &str) -> PathBuf {
        self.home.join("log").join(format!("{pool}.log"))
    }

    fn record_path(&self, pool: &str) -> PathBuf {
        self.home.join("pools").join(format!("{pool}.json"))
    }

    fn log_state_path(&self, pool: &str) -> PathBuf {
        self.home.join("pools").join(format!("{pool}.logstate"))
    }

    pub fn save_record(&self, r: &PoolRecord) -> Result<()> {
        let p = self.record_path(&r.name);
        let dir = p.parent().context("registry path has a parent")?;
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let tmp = p.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(r)?)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, &p).with_context(|| format!("cannot write {}", p.display()))?;
        Ok(())
    }

    pub fn load_record(&self, pool: &str) -> Option<PoolRecord> {
        let bytes = std::fs::read(self.record_path(pool)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    pub fn remove_record(&self, pool: &str) {
        let _ = std::fs::remove_file(self.record_path(pool));
    }

    pub fn all_records(&self) -> Vec<PoolRecord> {
        let mut out = Vec::new();
        if let Ok(rd) = std::fs::read_dir(self.home.join("pools")) {
            for e in rd.flatten() {
                if let Some(name) = e.file_name().to_str().and_then(|n| n.strip_suffix(".json")) {
                    if let Some(r) = self.load_record(name) {
                        out.push(r);
                    }
                }
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    pub fn save_log_state(&self, pool: &str, s: &LogState) -> Result<()> {
        let p = self.log_state_path(pool);
        let tmp = p.with_extension("logstate.tmp");
        std::fs::write(&tmp, serde_json::to_vec(s)?)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, &p).with_context(|| format!("cannot write {}", p.display()))?;
        Ok(())
    }

    pub fn load_log_state(&self, pool: &str) -> Option<LogState> {
        serde_json::from_slice(&std::fs::read(self.log_state_path(pool)).ok()?).ok()
    }
}

/// What the daemon last saw of its intent log, kept on this host so that an import refused for a
/// missing log device can say how much acknowledged data the missing device held.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct LogState {
    /// Bytes of log records whose txg was not yet published in the store.
    pub unpublished_bytes: u64,
    pub published_txg: u64,
    pub seen_ms: u64,
}
