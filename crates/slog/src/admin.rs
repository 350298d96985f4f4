//! Changing the set of log devices while the log runs: add a vdev, remove one, replace
//! (resilver) a leg.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::config::{MissingPolicy, VdevConfig};
use crate::error::LogError;
use crate::format::initial_head;
use crate::intent_log::IntentLog;
use crate::label::{read_label, write_label, DeviceLabel, Role};
use crate::layout::HEAD_SLOT_OFFSETS_BYTES;
use crate::open::{open_leg, OpenedLeg};
use crate::resync::copy_reachable;
use crate::ring::Ring;
use crate::status::{HealthState, LegHealth};
use crate::vdev::{Leg, Vdev, VdevInner};

/// What `remove_vdev` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoveOutcome {
    /// The vdev held nothing live and is gone; drop it from the pool configuration.
    Removed,
    /// The vdev takes no new records; it disappears once txg `release_through_txg` is
    /// released. Keep it in the pool configuration until `status` no longer lists it.
    Pending { release_through_txg: u64 },
}

impl IntentLog {
    /// Adds a vdev formatted with [`IntentLog::format`]. Whatever its ring held before is
    /// discarded: the vdev starts an empty chain of the current writer epoch.
    pub fn add_vdev(&self, config: VdevConfig) -> Result<(), LogError> {
        let shared = &self.shared;
        let in_use = shared
            .vdevs
            .read()
            .iter()
            .any(|v| v.guid == config.vdev_guid || shares_a_path(v, &config));
        if in_use {
            return Err(LogError::InvalidConfig(format!(
                "vdev {:#x} or one of its devices is already in the log",
                config.vdev_guid
            )));
        }
        let mut legs = Vec::with_capacity(config.legs.len());
        for path in &config.legs {
            legs.push(open_leg(
                shared.provider.as_ref(),
                &shared.pool,
                config.vdev_guid,
                path,
                MissingPolicy::Refuse,
            )?);
        }
        let label = legs.iter().find_map(|l| l.label.clone()).ok_or_else(|| {
            LogError::InvalidConfig(format!("no leg of vdev {:#x} is readable", config.vdev_guid))
        })?;
        let generation = next_generation(&legs, config.vdev_guid);
        let mut head = initial_head(
            shared.pool.guid,
            config.vdev_guid,
            shared.session.writer_epoch,
            generation,
        );
        head.point.offset_bytes = label.ring_start_bytes;
        head.release_seq = shared.release_seq();
        head.epoch_first_seq = shared.session.epoch_first_seq;
        let buf = head.encode();
        for leg in legs.iter().filter(|l| l.health.is_online()) {
            let Some(device) = leg.device.as_ref() else { continue };
            device
                .write_at(HEAD_SLOT_OFFSETS_BYTES[0], &buf)
                .and_then(|()| device.flush())
                .map_err(|e| LogError::io(&leg.path, "write log head", e))?;
        }
        let ring = Ring::new(
            label.ring_start_bytes,
            label.ring_end_bytes,
            head.point,
            head.point,
            VecDeque::new(),
        );
        let inner = VdevInner {
            legs: legs.into_iter().map(OpenedLeg::into_leg).collect(),
            head_generation: generation,
            next_head_slot: 1,
            unflushed_first_seq: None,
        };
        shared.vdevs.write().push(Arc::new(Vdev::new(
            config.vdev_guid,
            config.kind,
            label,
            inner,
            ring,
            Arc::clone(&shared.clock),
            Arc::clone(&shared.leg_timeout_ms),
        )));
        Ok(())
    }

    /// Stops writing to the vdev that has `path` as a leg and removes it once it holds no
    /// live records.
    pub fn remove_vdev(&self, path: &Path) -> Result<RemoveOutcome, LogError> {
        let vdev = self.find_vdev(path)?;
        vdev.removing.store(true, Ordering::Release);
        let live_txg =
            vdev.ring.lock().live.iter().filter(|e| e.record_count > 0).map(|e| e.txg_max).max();
        match live_txg {
            None => {
                self.shared.finish_removal(vdev.guid);
                Ok(RemoveOutcome::Removed)
            }
            Some(txg) => Ok(RemoveOutcome::Pending { release_through_txg: txg }),
        }
    }

    /// Replaces leg `old` by device `new` (which may be the same path, to bring a repaired
    /// leg back): labels it, copies every live record from a healthy leg, flushes, and puts
    /// it ONLINE. Returns the vdev's new configuration.
    pub fn replace_leg(&self, old: &Path, new: &Path) -> Result<VdevConfig, LogError> {
        self.replace_leg_with(old, new, false)
    }

    /// `replace_leg`, optionally overwriting a device labelled for another pool or role.
    pub fn replace_leg_with(
        &self,
        old: &Path,
        new: &Path,
        force: bool,
    ) -> Result<VdevConfig, LogError> {
        let vdev = self.find_vdev(old)?;
        let mut inner = vdev.inner.lock();
        let index = inner
            .legs
            .iter()
            .position(|l| l.path == old)
            .ok_or_else(|| LogError::UnknownDevice { path: old.to_path_buf() })?;
        let source = inner
            .legs
            .iter()
            .enumerate()
            .find(|(i, l)| *i != index && l.online_device().is_some())
            .and_then(|(_, l)| l.device.clone())
            .ok_or(LogError::NoHealthyLeg)?;
        let size_bytes = vdev.label.ring_end_bytes;
        let device = self
            .shared
            .provider
            .create(new, size_bytes)
            .map_err(|e| LogError::io(new, "open", e))?;
        if device.len_bytes() < size_bytes {
            return Err(LogError::TooSmall {
                path: new.to_path_buf(),
                size_bytes: device.len_bytes(),
                min_bytes: size_bytes,
            });
        }
        check_replacement(&self.shared.pool, &vdev, new, device.as_ref(), force)?;
        let label = DeviceLabel {
            leg_index: index as u16,
            leg_count: inner.legs.len() as u16,
            ..vdev.label.clone()
        };
        // The tail and the durable head only move under `inner`, which we hold: the snapshot
        // stays exact for the whole copy.
        let ring = vdev.ring.lock().clone();
        write_label(device.as_ref(), &label)
            .and_then(|()| copy_reachable(source.as_ref(), device.as_ref(), &ring).map(|_| ()))
            .map_err(|e| LogError::io(new, "resilver", e))?;
        let health = Arc::new(LegHealth::new(HealthState::Online, device.is_volatile()));
        inner.legs[index] = Leg { path: new.to_path_buf(), device: Some(device), health };
        vdev.refresh_legs_view(&inner);
        tracing::info!(old = %old.display(), new = %new.display(), "log leg replaced and resilvered");
        Ok(vdev.config())
    }

    fn find_vdev(&self, path: &Path) -> Result<Arc<Vdev>, LogError> {
        self.shared
            .vdevs
            .read()
            .iter()
            .find(|v| v.leg_paths().iter().any(|p| p == path))
            .cloned()
            .ok_or_else(|| LogError::UnknownDevice { path: path.to_path_buf() })
    }
}

fn shares_a_path(vdev: &Vdev, config: &VdevConfig) -> bool {
    vdev.leg_paths().iter().any(|p| config.legs.contains(p))
}

/// A head generation above anything on the legs, so the new head wins.
fn next_generation(legs: &[OpenedLeg], vdev_guid: u64) -> u64 {
    legs.iter()
        .filter_map(|l| l.device.as_ref())
        .filter_map(|d| crate::head::read_heads(d.as_ref(), vdev_guid).ok())
        .filter_map(|r| r.head.map(|h| h.generation))
        .max()
        .unwrap_or(0)
        + 1
}

/// A replacement must be blank, ours, or forced.
fn check_replacement(
    pool: &crate::open::PoolId,
    vdev: &Vdev,
    path: &Path,
    device: &dyn crate::device::LogDevice,
    force: bool,
) -> Result<(), LogError> {
    let existing = read_label(device).map_err(|e| LogError::io(path, "read label", e))?;
    match existing {
        Some(read) if !force => {
            let ours = read.label.pool_guid == pool.guid
                && read.label.role == Role::Log
                && read.label.vdev_guid == vdev.guid;
            if ours {
                Ok(())
            } else {
                Err(LogError::DeviceInUse {
                    path: path.to_path_buf(),
                    found: read.label.describe(),
                })
            }
        }
        _ => Ok(()),
    }
}
