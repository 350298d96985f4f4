//! Labelling log and cache devices for a pool, shared by `create` (before the pool exists) and
//! the daemon's `add` (while it runs).

use anyhow::Result;
use fardisk_arc::{L2Arc, L2ArcConfig, MonotonicClock};
use fardisk_engine::root::{VdevEntry, VdevRole};
use fardisk_slog::{FormatOptions, IntentLog, VdevSpec};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;

/// One vdev as `create` and `add` name it (`log [mirror] DEVICE...` or `cache DEVICE`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VdevArg {
    pub role: VdevRole,
    #[serde(default)]
    pub mirror: bool,
    pub paths: Vec<String>,
}

/// Size of a log device file created because it did not exist.
pub const LOG_FILE_BYTES_DEFAULT: u64 = 1 << 30;
/// Size of a cache device file created because it did not exist.
pub const CACHE_FILE_BYTES_DEFAULT: u64 = 4 << 30;

/// Refuses a relative device path (a bad-input error).
pub fn check_absolute(paths: &[String]) -> Result<(), fardisk_engine::Error> {
    for p in paths {
        if !std::path::Path::new(p).is_absolute() {
            return Err(fardisk_engine::Error::BadInput(format!(
                "device '{p}' must be an absolute path"
            )));
        }
    }
    Ok(())
}

/// Labels one log vdev (a single device or a mirror) for pool `name`/`guid`.
pub fn format_log_vdev(
    pool: &str,
    guid: u128,
    v: &VdevArg,
    force: bool,
    seed: u64,
) -> Result<VdevEntry> {
    check_absolute(&v.paths)?;
    let paths: Vec<PathBuf> = v.paths.iter().map(PathBuf::from).collect();
    let spec =
        if v.mirror { VdevSpec::Mirror(paths.clone()) } else { VdevSpec::Single(paths[0].clone()) };
    let mut o = FormatOptions::new(Arc::new(fardisk_slog::FileProvider::default()), seed);
    o.size_bytes = LOG_FILE_BYTES_DEFAULT;
    o.force = force;
    // The library says "use force"; on the command line that is -f. The error keeps its kind
    // (a device of another pool is bad input, a failing one unavailable) for the control reply.
    let cfg = IntentLog::format(pool, guid, &spec, &o).map_err(|e| {
        let text = format!(
            "log device: {}",
            e.to_string().replace("use force to overwrite it", "add -f to overwrite it")
        );
        anyhow::Error::new(match e.kind() {
            fardisk_slog::ErrorKind::FixInput => fardisk_engine::Error::BadInput(text),
            _ => fardisk_engine::Error::Unavailable(text),
        })
    })?;
    Ok(VdevEntry {
        role: VdevRole::Log,
        mirror: v.mirror,
        guid: cfg.vdev_guid,
        paths: v.paths.clone(),
    })
}

/// Labels one cache device (a file is created at the default size when missing).
pub fn format_cache_device(guid: u128, path: &str, seed: u64) -> Result<VdevEntry> {
    check_absolute(&[path.to_string()])?;
    let p = PathBuf::from(path);
    let l2 = L2Arc::new(L2ArcConfig::default(), guid, Arc::new(MonotonicClock::new()), seed)
        .map_err(|e| anyhow::anyhow!("cache device: {e}"))?;
    let size = if p.exists() { None } else { Some(CACHE_FILE_BYTES_DEFAULT) };
    l2.add_device(&p, size).map_err(|e| anyhow::anyhow!("cache device {path}: {e}"))?;
    Ok(VdevEntry { role: VdevRole::Cache, mirror: false, guid: 0, paths: vec![path.to_string()] })
}
