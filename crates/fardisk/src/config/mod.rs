//! fardisk's configuration, loaded once per process (`Config::load`, first thing in `main`) from
//! the environment and the config file, and passed down to what needs it. Nothing else reads
//! fardisk's variables, and nothing writes the environment.
//!
//! Precedence, for every setting: a variable already set in the environment wins over the config
//! file (`file.rs`), which wins over the built-in default. The variables, with their config-file
//! keys (contrib/fardisk.conf.example lists every key):
//! - `FARDISK_HOME` (`home`, default /var/lib/fardisk): pool registry, daemon logs;
//! - `FARDISK_RUN_DIR` (`run_dir`, default /run/fardisk): owner-only control sockets;
//! - `FARDISK_KEY` (environment only: 64 hex digits), `FARDISK_KEY_FILE` (`key_file`);
//! - `FARDISK_METRICS` (`metrics`), `FARDISK_LOG` (`log`, a tracing filter);
//! - `FARDISK_NO_PROGRESS` (environment only): no progress bars;
//! - the store's `AWS_*`, `GOOGLE_*`, `AZURE_*` (`aws_access_key_id`, ...), handed to the engine
//!   as `StoreSettings`;
//! - `FARDISK_CONFIG`: the config file itself.

pub mod file;

use crate::paths::HostPaths;
use anyhow::Result;
use fardisk_engine::objstore::{is_store_var, StoreSettings};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

pub const HOME_DEFAULT: &str = "/var/lib/fardisk";
pub const RUN_DIR_DEFAULT: &str = "/run/fardisk";

/// A value that is never printed (`Debug` shows that it is there, not what it is).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Everything fardisk reads from its environment and config file.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Where this host keeps pool records, daemon logs and control sockets.
    pub paths: HostPaths,
    /// `FARDISK_KEY`: a pool's encryption key itself (64 hex digits).
    pub key_hex: Option<Secret>,
    /// `FARDISK_KEY_FILE` / `key_file`: the file holding a pool's encryption key.
    pub key_file: Option<PathBuf>,
    /// `FARDISK_METRICS` / `metrics`: where a daemon serves metrics when `--metrics` is not given.
    pub metrics: Option<String>,
    /// `FARDISK_LOG` / `log`: the tracing filter (None: warnings, or info for a daemon started
    /// in the background).
    pub log: Option<String>,
    /// False when `FARDISK_NO_PROGRESS` is set: no progress bars even on a terminal.
    pub progress: bool,
    /// Credentials, region and endpoint of cloud stores.
    pub store: StoreSettings,
}

impl Config {
    /// Reads the environment and the config file (`FARDISK_CONFIG`, else the default path).
    pub fn load() -> Result<Config> {
        let env: BTreeMap<String, OsString> =
            std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v))).collect();
        let (path, explicit) = file::config_path(env.get("FARDISK_CONFIG").cloned());
        let settings = file::read(&path, explicit)?;
        Ok(Config::resolve(&env, &settings))
    }

    /// The configuration of an environment and the settings of a config file (`(variable,
    /// value)` in file order): a variable set in `env` wins; among the file's, the first wins.
    pub fn resolve(env: &BTreeMap<String, OsString>, file: &[(&'static str, String)]) -> Config {
        let mut from_file: BTreeMap<&str, &str> = BTreeMap::new();
        for (var, value) in file {
            from_file.entry(var).or_insert(value);
        }
        let get = |var: &str| -> Option<OsString> {
            env.get(var).cloned().or_else(|| from_file.get(var).map(OsString::from))
        };
        let text = |var: &str| get(var).and_then(|v| v.into_string().ok());
        let mut store = StoreSettings::from_vars(
            env.iter().filter_map(|(k, v)| Some((k.clone(), v.clone().into_string().ok()?))),
        );
        for (var, value) in &from_file {
            if is_store_var(var) && !env.contains_key(*var) {
                store.set_default(var, value);
            }
        }
        Config {
            paths: HostPaths {
                home: get("FARDISK_HOME").map(PathBuf::from).unwrap_or_else(|| HOME_DEFAULT.into()),
                run_dir: get("FARDISK_RUN_DIR")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| RUN_DIR_DEFAULT.into()),
            },
            key_hex: env.get("FARDISK_KEY").and_then(|v| v.clone().into_string().ok()).map(Secret),
            key_file: get("FARDISK_KEY_FILE").map(PathBuf::from),
            metrics: text("FARDISK_METRICS"),
            log: text("FARDISK_LOG"),
            progress: !env.contains_key("FARDISK_NO_PROGRESS"),
            store,
        }
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
