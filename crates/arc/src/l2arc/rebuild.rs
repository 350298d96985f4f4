//! Rebuilding the index of a device opened with existing contents, in a background thread.
//!
//! Every slot's header and entry table is read and verified; valid entries are indexed at once,
//! so lookups can hit while the rebuild runs. Damaged blocks are skipped and counted. The slot
//! with the newest sequence tells the writer where to continue. Bounded by the slot count.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::device::{CacheDevice, WriteCursor};
use super::geometry::Geometry;
use super::index::Addr;
use super::log_block::{BlockReject, LogBlockMeta};
use super::stats::add;
use super::Shared;

pub(crate) fn spawn_rebuild(shared: Arc<Shared>, device: Arc<CacheDevice>) {
    let name = format!("l2arc-rebuild-{}", device.id);
    let thread_device = Arc::clone(&device);
    let spawned = std::thread::Builder::new()
        .name(name)
        .spawn(move || rebuild_device(&shared, &thread_device));
    if let Err(err) = spawned {
        device.fault(format!("cannot start rebuild thread: {err}"));
        device.rebuild.done.store(true, Ordering::Release);
    }
}

fn rebuild_device(shared: &Shared, device: &CacheDevice) {
    let mut newest: Option<(u64, u32)> = None;
    for slot in 0..device.slot_count() {
        if !device.readable() {
            break;
        }
        match device.read_meta(slot) {
            Ok(Ok(meta)) => {
                restore(device, slot, &meta);
                if newest.is_none_or(|(seq, _)| meta.sequence > seq) {
                    newest = Some((meta.sequence, slot));
                }
            }
            Ok(Err(BlockReject::Empty | BlockReject::Foreign)) => {}
            Ok(Err(BlockReject::Corrupt(reason))) => {
                tracing::warn!(path = %device.path.display(), slot, %reason, "skipping damaged log block");
                add(&device.rebuild.blocks_skipped, 1);
            }
            Err(err) => {
                shared.io_error(device, "rebuild read", &err);
                break;
            }
        }
        add(&device.rebuild.slots_scanned, 1);
    }
    if let Some((sequence, slot)) = newest {
        *device.cursor.lock() = WriteCursor {
            next_slot: (slot + 1) % device.slot_count(),
            next_sequence: sequence + 1,
        };
    }
    device.finish_rebuild();
    device.rebuild.done.store(true, Ordering::Release);
    tracing::info!(path = %device.path.display(), entries = device.rebuild.entries.load(Ordering::Relaxed), "L2ARC rebuild finished");
}

fn restore(device: &CacheDevice, slot: u32, meta: &LogBlockMeta) {
    let mut index = device.index.write();
    // Checked under the index lock: a fault after this point drops what we add.
    if !device.readable() {
        return;
    }
    for entry in &meta.entries {
        let units = Geometry::units_for(entry.len_bytes);
        // Decoding checked that every entry lies in one of its buckets.
        let Some(place) = device.geometry.place_of(&entry.key, slot, entry.unit, units) else {
            continue;
        };
        if index.insert(&entry.key, Addr { slot, place }, entry.len_bytes) {
            add(&device.rebuild.entries, 1);
            add(&device.rebuild.bytes, u64::from(entry.len_bytes));
        }
    }
}
