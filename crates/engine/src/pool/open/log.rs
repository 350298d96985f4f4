//! The intent log at import: which log vdevs the root lists, and opening them, refusing (with
//! what it would cost) when a whole vdev is missing and acknowledged writes may be on it.

use super::ImportOptions;
use crate::error::{Error, Result};
use crate::pool::Env;
use crate::root::{Root, VdevRole};
use std::sync::Arc;

/// The pool's log vdevs as the intent-log crate names them.
pub fn log_configs(root: &Root) -> Vec<fardisk_slog::VdevConfig> {
    root.vdevs
        .iter()
        .filter(|v| v.role == VdevRole::Log)
        .map(|v| fardisk_slog::VdevConfig {
            vdev_guid: v.guid,
            kind: if v.mirror {
                fardisk_slog::VdevKind::Mirror
            } else {
                fardisk_slog::VdevKind::Single
            },
            legs: v.paths.iter().map(std::path::PathBuf::from).collect(),
        })
        .collect()
}

pub(super) fn open_log(
    root: &Root,
    opts: &ImportOptions,
    env: &Env,
    leg_timeout_ms: u64,
) -> Result<Option<Arc<fardisk_slog::IntentLog>>> {
    let missing_ok = opts.missing_log;
    let configs = log_configs(root);
    if configs.is_empty() {
        return Ok(None);
    }
    // A mirror that lost some legs still holds every record on the others: it opens DEGRADED.
    // Only a vdev with no leg left means acknowledged writes are gone.
    let devices = &opts.log_devices;
    let whole_vdev_missing = configs.iter().any(|c| c.legs.iter().all(|p| !devices.exists(p)));
    let mut o = fardisk_slog::OpenOptions::new(devices.0.clone());
    o.clock = env.clock.clone();
    o.leg_timeout_ms = leg_timeout_ms;
    // After a clean export every acknowledged write is in the store: a missing log loses nothing.
    let clean_export = !root.holder.active;
    if whole_vdev_missing && clean_export {
        tracing::warn!(
            "a log device is missing, but the pool was exported cleanly: nothing is lost"
        );
    }
    o.missing = if missing_ok || !whole_vdev_missing || clean_export {
        fardisk_slog::MissingPolicy::Degrade
    } else {
        fardisk_slog::MissingPolicy::Refuse
    };
    o.writer_epoch = root.epoch + 1;
    match fardisk_slog::IntentLog::open(&root.pool_name, root.pool_guid, &configs, &o) {
        Ok(l) => Ok(Some(Arc::new(l))),
        Err(fardisk_slog::LogError::Missing { path, .. }) => {
            let now_ms = env.clock.wall_ms();
            let age_s = now_ms.saturating_sub(root.time_ms) / 1000;
            let loss = match opts.log_unpublished_hint {
                Some((bytes, seen_ms)) => format!(
                    "the log held {} of records not yet in the store when this host last looked, {} s ago",
                    human_bytes(bytes),
                    now_ms.saturating_sub(seen_ms) / 1000
                ),
                None => "how much is unknown without the device".to_string(),
            };
            Err(Error::Unavailable(format!(
                "log device {} is missing; without it the pool opens at its recovery point, txg {} (published {age_s} s ago), \
                 and writes acknowledged after that are lost ({loss}). \
                 Bring the device back, or import with --missing-log to accept that",
                path.display(),
                root.txg
            )))
        }
        Err(e) => Err(Error::Unavailable(format!("log devices: {e}"))),
    }
}

fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}
