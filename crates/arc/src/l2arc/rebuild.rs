//! Rebuilding the index of a device opened with existing contents, in a background thread.
//!
//! Every slot's header and entry table is read and verified; valid entries are indexed (the
//! newest sequence wins per key), damaged blocks are skipped and counted. The slot with the
//! newest sequence tells the writer where to continue. Bounded by the slot count.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::device::{CacheDevice, WriteCursor};
use super::index::Location;
use super::log_block::{
    decode_meta, meta_len_from_header, BlockReject, LogBlockMeta, LOG_HEADER_BYTES,
};
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

enum SlotRead {
    Valid(LogBlockMeta),
    Nothing,
    Damaged(String),
}

fn read_slot(device: &CacheDevice, slot: u32) -> std::io::Result<SlotRead> {
    let place = device.place(slot);
    let base = device.slot_offset(slot);
    let header = device.read_at(base, LOG_HEADER_BYTES)?;
    let meta_len = match meta_len_from_header(&header, &place) {
        Ok(len) => len,
        Err(reject) => return Ok(classify(reject)),
    };
    let meta = device.read_at(base, meta_len)?;
    Ok(match decode_meta(&meta, &place) {
        Ok(meta) => SlotRead::Valid(meta),
        Err(reject) => classify(reject),
    })
}

fn classify(reject: BlockReject) -> SlotRead {
    match reject {
        BlockReject::Empty | BlockReject::Foreign => SlotRead::Nothing,
        BlockReject::Corrupt(reason) => SlotRead::Damaged(reason),
    }
}

fn rebuild_device(shared: &Shared, device: &CacheDevice) {
    let mut newest: Option<(u64, u32)> = None;
    for slot in 0..device.slot_count() {
        if !device.readable() {
            break;
        }
        match read_slot(device, slot) {
            Ok(SlotRead::Valid(meta)) => {
                restore(shared, device, slot, &meta);
                if newest.is_none_or(|(seq, _)| meta.sequence > seq) {
                    newest = Some((meta.sequence, slot));
                }
            }
            Ok(SlotRead::Nothing) => {}
            Ok(SlotRead::Damaged(reason)) => {
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

fn restore(shared: &Shared, device: &CacheDevice, slot: u32, meta: &LogBlockMeta) {
    let generation = device.slot_generation(slot);
    let mut index = shared.index.lock();
    // Checked under the index lock: a fault after this point drops what we add.
    if !device.readable() {
        return;
    }
    for entry in &meta.entries {
        let loc = Location {
            device: device.id,
            slot,
            generation,
            sequence: meta.sequence,
            data_offset: entry.data_offset,
            len_bytes: entry.len_bytes,
            checksum: entry.checksum,
        };
        if index.insert(entry.key, loc) {
            add(&device.rebuild.entries, 1);
            add(&device.rebuild.bytes, u64::from(entry.len_bytes));
        }
    }
}
