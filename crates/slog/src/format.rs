//! `IntentLog::format`: labels and an empty log on new devices.

use std::path::Path;
use std::sync::Arc;

use crate::checksum::chain_seed;
use crate::config::{FormatOptions, VdevConfig, VdevSpec};
use crate::device::LogDevice;
use crate::error::LogError;
use crate::head::LogHead;
use crate::intent_log::IntentLog;
use crate::label::{read_label, write_label, DeviceLabel, Role};
use crate::layout::{round_down_block, HEAD_SLOT_OFFSETS_BYTES, RING_MIN_BYTES, RING_START_BYTES};
use crate::ring::ChainPoint;
use crate::rng::Rng;

/// The first writer epoch of a freshly formatted vdev.
pub(crate) const FIRST_EPOCH: u64 = 1;

impl IntentLog {
    /// Formats devices for a new pool or for `add`: writes labels and an empty log. Refuses a
    /// device that already carries a label of another pool or role unless `opts.force`.
    /// Files that do not exist are created with `opts.size_bytes`.
    pub fn format(
        pool_name: &str,
        pool_guid: u128,
        spec: &VdevSpec,
        opts: &FormatOptions,
    ) -> Result<VdevConfig, LogError> {
        let paths = spec.legs();
        if paths.is_empty() || paths.len() > usize::from(u16::MAX) {
            return Err(LogError::InvalidConfig("a vdev needs between 1 and 65535 legs".into()));
        }
        if pool_name.len() > crate::label::POOL_NAME_MAX_BYTES {
            return Err(LogError::InvalidConfig("pool name longer than 64 bytes".into()));
        }
        let devices = paths
            .iter()
            .map(|path| prepare_device(pool_guid, path, opts))
            .collect::<Result<Vec<_>, _>>()?;
        let ring_end_bytes =
            devices.iter().map(|d| round_down_block(d.len_bytes())).min().unwrap_or(0);
        let vdev_guid = new_vdev_guid(pool_guid, &paths, opts.guid_seed);
        for (index, device) in devices.iter().enumerate() {
            let label = DeviceLabel {
                pool_name: pool_name.to_string(),
                pool_guid,
                vdev_guid,
                role: Role::Log,
                leg_index: index as u16,
                leg_count: devices.len() as u16,
                ring_start_bytes: RING_START_BYTES,
                ring_end_bytes,
            };
            write_empty_log(device.as_ref(), &label)
                .map_err(|e| LogError::io(device.path(), "format", e))?;
        }
        Ok(VdevConfig { vdev_guid, kind: spec.kind(), legs: paths })
    }
}

/// Opens or creates the device and refuses it when it belongs elsewhere.
fn prepare_device(
    pool_guid: u128,
    path: &Path,
    opts: &FormatOptions,
) -> Result<Arc<dyn LogDevice>, LogError> {
    let device =
        opts.provider.create(path, opts.size_bytes).map_err(|e| LogError::io(path, "open", e))?;
    let min_bytes = RING_START_BYTES + RING_MIN_BYTES;
    if device.len_bytes() < min_bytes {
        return Err(LogError::TooSmall {
            path: path.to_path_buf(),
            size_bytes: device.len_bytes(),
            min_bytes,
        });
    }
    let existing = read_label(device.as_ref()).map_err(|e| LogError::io(path, "read label", e))?;
    if let Some(read) = existing {
        let foreign = read.label.pool_guid != pool_guid || read.label.role != Role::Log;
        if foreign && !opts.force {
            return Err(LogError::DeviceInUse {
                path: path.to_path_buf(),
                found: read.label.describe(),
            });
        }
    }
    Ok(device)
}

fn new_vdev_guid(pool_guid: u128, paths: &[std::path::PathBuf], guid_seed: u64) -> u64 {
    let mut key = Vec::new();
    key.extend_from_slice(&pool_guid.to_le_bytes());
    for path in paths {
        key.extend_from_slice(path.as_os_str().as_encoded_bytes());
        key.push(0);
    }
    let rng = Rng::new(guid_seed ^ crate::checksum::checksum64(&key));
    loop {
        let guid = rng.next_u64();
        if guid != 0 {
            return guid;
        }
    }
}

/// Writes both labels, a head for an empty ring in slot 0, an empty slot 1 and a zeroed
/// first ring block (so nothing from an earlier use of the device can start a chain).
fn write_empty_log(device: &dyn LogDevice, label: &DeviceLabel) -> std::io::Result<()> {
    let head = initial_head(label.pool_guid, label.vdev_guid, FIRST_EPOCH, 1);
    let zero = crate::aligned::AlignedBuf::zeroed(crate::layout::BLOCK_SIZE_BYTES as usize);
    write_label(device, label)?;
    device.write_at(HEAD_SLOT_OFFSETS_BYTES[0], &head.encode())?;
    device.write_at(HEAD_SLOT_OFFSETS_BYTES[1], &zero)?;
    device.write_at(RING_START_BYTES, &zero)?;
    device.flush()
}

/// The head of an empty chain starting at the ring start.
pub(crate) fn initial_head(
    pool_guid: u128,
    vdev_guid: u64,
    epoch: u64,
    generation: u64,
) -> LogHead {
    LogHead {
        generation,
        vdev_guid,
        point: ChainPoint {
            offset_bytes: RING_START_BYTES,
            block_seq: 1,
            prev_chain: chain_seed(pool_guid, vdev_guid, epoch, generation),
        },
        release_seq: 0,
        writer_epoch: epoch,
        epoch_first_seq: 0,
    }
}
