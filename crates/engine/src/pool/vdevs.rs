//! Changing the pool's log and cache devices while it runs (`zpool add/remove/replace`).
//!
//! The root lists every log vdev that may hold acknowledged writes, so the order of each change
//! is what keeps a crash at any moment harmless:
//! * adding a log vdev publishes a root that lists it *before* the log writes a record to it
//!   (an import after a crash opens it, formatted and empty);
//! * removing one publishes the root without it only once nothing on it is needed any more
//!   (its records' txgs are in the store);
//! * replacing a leg copies the live records first, and the other legs hold them all along.
//!
//! Cache devices hold nothing the store does not; the root lists them so the next import opens
//! them again.

use super::{syncer, Pool};
use crate::error::{Error, Result};
use crate::root::{VdevEntry, VdevRole};
use fardisk_slog::{IntentLog, OpenOptions, RemoveOutcome, VdevConfig, VdevKind};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Txg syncs `remove` waits through for a log vdev to drain before giving up (each publishes
/// the txgs its records belong to; two are enough unless writes keep failing).
const REMOVE_DRAIN_SYNCS_MAX: usize = 8;

/// What `Pool::remove_device` took out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedVdev {
    pub role: VdevRole,
    pub paths: Vec<String>,
}

fn log_config(entry: &VdevEntry) -> VdevConfig {
    VdevConfig {
        vdev_guid: entry.guid,
        kind: if entry.mirror { VdevKind::Mirror } else { VdevKind::Single },
        legs: entry.paths.iter().map(PathBuf::from).collect(),
    }
}

fn slog_err(what: &str, e: fardisk_slog::LogError) -> Error {
    match e.kind() {
        fardisk_slog::ErrorKind::FixInput => Error::BadInput(format!("{what}: {e}")),
        _ => Error::Unavailable(format!("{what}: {e}")),
    }
}

impl Pool {
    /// The log and cache vdevs the next root records.
    pub fn vdevs(&self) -> Vec<VdevEntry> {
        self.inner.meta.read().root.vdevs.clone()
    }

    /// Refuses a path that is already one of the pool's devices.
    pub fn check_device_unused(&self, path: &str) -> Result<()> {
        if let Some(v) = self.vdevs().iter().find(|v| v.paths.iter().any(|p| p == path)) {
            return Err(Error::BadInput(format!(
                "{path} is already a {} device of pool '{}'",
                v.role,
                self.name()
            )));
        }
        Ok(())
    }

    /// Publishes a root whose vdev list `change` edited.
    async fn publish_vdevs(&self, change: impl FnOnce(&mut Vec<VdevEntry>)) -> Result<u64> {
        let target = {
            // Under the sync lock no sync sits between copying the root and installing it.
            let _sync = self.inner.txg.sync_lock.lock().await;
            change(&mut self.inner.meta.write().root.vdevs);
            self.inner.txg.queue_meta_change();
            self.inner.txg.open_txg()
        };
        // The txg that carries the change, not a clean pool: writers may keep it dirty forever.
        syncer::wait_published(&self.inner, target).await?;
        Ok(self.inner.txg.published_txg())
    }

    /// Adds a log vdev whose devices `fardisk_slog::IntentLog::format` labelled for this pool.
    /// Sync requests use it as soon as this returns.
    pub async fn add_log_vdev(&self, entry: VdevEntry) -> Result<()> {
        for p in &entry.paths {
            self.check_device_unused(p)?;
        }
        let config = log_config(&entry);
        // Listed first: from the moment a record may land on it, an import knows to open it.
        self.publish_vdevs(|v| v.push(entry.clone())).await?;
        let added = match self.inner.intent.log() {
            Some(log) => log.add_vdev(config).map_err(|e| slog_err("adding the log vdev", e)),
            None => self.start_log(config),
        };
        if let Err(e) = added {
            // Not in use: take it out of the root again (best effort; it is empty either way).
            let _ = self
                .publish_vdevs(|v| v.retain(|x| x.guid != entry.guid || x.role != VdevRole::Log))
                .await;
            return Err(e);
        }
        tracing::info!(paths = ?entry.paths, "log vdev added");
        Ok(())
    }

    /// The pool had no log: open one over `config` and start recording writes into it.
    fn start_log(&self, config: VdevConfig) -> Result<()> {
        let mut o = OpenOptions::new(self.inner.intent.devices.0.clone());
        o.clock = self.inner.env.clock.clone();
        o.writer_epoch = self.inner.epoch;
        o.leg_timeout_ms = self.inner.config.read().log_leg_timeout_ms;
        let log = IntentLog::open(&self.inner.name, self.inner.guid, &[config], &o)
            .map_err(|e| slog_err("opening the new log", e))?;
        let txg = self.inner.txg.state.lock();
        self.inner.intent.attach(Arc::new(log), txg.open_txg);
        Ok(())
    }

    /// Records a cache device in the root (the caller has put it in service already).
    pub async fn add_cache_vdev(&self, path: &str) -> Result<()> {
        self.check_device_unused(path)?;
        let entry = VdevEntry {
            role: VdevRole::Cache,
            mirror: false,
            guid: 0,
            paths: vec![path.to_string()],
        };
        self.publish_vdevs(|v| v.push(entry)).await?;
        Ok(())
    }

    /// Removes the vdev that has `path` as a device: a cache device at once, a log vdev (a
    /// whole mirror, when `path` is one of its legs) once every record on it is in the store.
    /// Removing the last log vdev turns sync requests into txg syncs, as in a pool without one.
    pub async fn remove_device(&self, path: &str) -> Result<RemovedVdev> {
        let entry =
            self.vdevs().into_iter().find(|v| v.paths.iter().any(|p| p == path)).ok_or_else(
                || {
                    Error::BadInput(format!(
                    "{path} is not a log or cache device of pool '{}' (see 'fardisk status -v')",
                    self.name()
                ))
                },
            )?;
        let removed = RemovedVdev { role: entry.role, paths: entry.paths.clone() };
        if entry.role == VdevRole::Cache {
            self.publish_vdevs(|v| {
                v.retain(|x| !(x.role == VdevRole::Cache && x.paths == entry.paths))
            })
            .await?;
            return Ok(removed);
        }
        let log = self
            .inner
            .intent
            .log()
            .ok_or_else(|| Error::Bug("the root lists a log vdev but no log is open".into()))?;
        let only_vdev = log.vdev_configs().len() <= 1;
        if only_vdev {
            self.remove_last_log(log, &entry).await?;
        } else {
            self.remove_one_log_vdev(&log, &entry).await?;
        }
        tracing::info!(paths = ?entry.paths, "log vdev removed");
        Ok(removed)
    }

    async fn remove_last_log(&self, log: Arc<IntentLog>, entry: &VdevEntry) -> Result<()> {
        {
            let txg = self.inner.txg.state.lock();
            self.inner.intent.detach(txg.open_txg);
        }
        // This one root both holds every write acknowledged through the log and stops listing
        // it: a crash before it replays the log, a crash after it needs no log.
        let published = self
            .publish_vdevs(|v| v.retain(|x| !(x.role == VdevRole::Log && x.guid == entry.guid)))
            .await?;
        log.release_through_txg(published);
        let leg = PathBuf::from(&entry.paths[0]);
        match log.remove_vdev(&leg) {
            Ok(_) | Err(fardisk_slog::LogError::UnknownDevice { .. }) => {}
            Err(e) => tracing::warn!(error = %e, "closing the removed log vdev"),
        }
        // Dropping the log joins its writer thread.
        let _ = self.inner.env.blocking("closing the log vdev", move || drop(log)).await;
        Ok(())
    }

    async fn remove_one_log_vdev(&self, log: &Arc<IntentLog>, entry: &VdevEntry) -> Result<()> {
        let leg = PathBuf::from(&entry.paths[0]);
        let outcome = log.remove_vdev(&leg).map_err(|e| slog_err("removing the log vdev", e))?;
        if let RemoveOutcome::Pending { release_through_txg } = outcome {
            for _ in 0..REMOVE_DRAIN_SYNCS_MAX {
                if !still_listed(log, entry.guid) {
                    break;
                }
                self.inner.txg.queue_meta_change();
                let published = syncer::sync_until_clean(&self.inner).await?;
                if published >= release_through_txg {
                    log.release_through_txg(published);
                }
            }
            if still_listed(log, entry.guid) {
                return Err(Error::Unavailable(format!(
                    "log vdev {} still holds records of txg {release_through_txg} after {REMOVE_DRAIN_SYNCS_MAX} txg syncs; it takes no new records, try 'fardisk remove' again",
                    entry.paths.join(" ")
                )));
            }
        }
        self.publish_vdevs(|v| v.retain(|x| !(x.role == VdevRole::Log && x.guid == entry.guid)))
            .await?;
        Ok(())
    }

    /// Replaces log leg `old` by `new` (the same path brings a repaired or re-attached device
    /// back): the live records are copied from a healthy leg before it goes ONLINE.
    pub async fn replace_log_leg(&self, old: &str, new: &str, force: bool) -> Result<()> {
        let entry = self
            .vdevs()
            .into_iter()
            .find(|v| v.role == VdevRole::Log && v.paths.iter().any(|p| p == old))
            .ok_or_else(|| {
                Error::BadInput(format!(
                    "{old} is not a log device of pool '{}' (see 'fardisk status -v')",
                    self.name()
                ))
            })?;
        if old != new {
            self.check_device_unused(new)?;
        }
        if !Path::new(new).is_absolute() {
            return Err(Error::BadInput(format!("device '{new}' must be an absolute path")));
        }
        let log = self
            .inner
            .intent
            .log()
            .ok_or_else(|| Error::Bug("the root lists a log vdev but no log is open".into()))?;
        let (old_p, new_p) = (PathBuf::from(old), PathBuf::from(new));
        // Copying the live records reads and writes the devices: off the async workers.
        let copier = log.clone();
        let config = self
            .inner
            .env
            .blocking("replace", move || copier.replace_leg_with(&old_p, &new_p, force))
            .await?
            .map_err(|e| slog_err(&format!("replacing {old}"), e))?;
        let paths: Vec<String> =
            config.legs.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        self.publish_vdevs(|v| {
            if let Some(x) = v.iter_mut().find(|x| x.role == VdevRole::Log && x.guid == entry.guid)
            {
                x.paths = paths;
            }
        })
        .await?;
        tracing::info!(old, new, "log leg replaced");
        Ok(())
    }
}

fn still_listed(log: &IntentLog, guid: u64) -> bool {
    log.vdev_configs().iter().any(|c| c.vdev_guid == guid)
}
