//! The writer's open log block: opening the next slot (after forgetting what it held), placing
//! blocks in it, holding back the few that find both their buckets full (the spill, placed
//! first in the next log block), and writing it out.
//!
//! A write-out puts the data units added since the last write-out on the device, then the
//! header and the whole entry table; only after both succeed are the new entries indexed. A
//! partly filled block stays open and later write-outs extend it in place: units already
//! written never move, so entries indexed earlier stay valid.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::builder::LogBlockBuilder;
use super::device::CacheDevice;
use super::geometry::Geometry;
use super::index::Addr;
use super::log_block::encode_meta;
use super::stats::add;
use super::writer::{WriteTickReport, WriterState};
use super::Shared;
use crate::arc::FeedItem;
use crate::key::BlockKey;

pub(crate) struct OpenBlock {
    pub(crate) device: Arc<CacheDevice>,
    slot: u32,
    sequence: u64,
    pub(crate) builder: LogBlockBuilder,
    keys: HashSet<BlockKey>,
    written_entries: usize,
    pub(crate) unwritten_since_ms: Option<u64>,
}

/// Blocks held back for the next log block (bounded: an eighth of a block's units and bytes).
#[derive(Default)]
pub(crate) struct Spill {
    items: VecDeque<FeedItem>,
    keys: HashSet<BlockKey>,
    bytes: u64,
}

impl Spill {
    pub(crate) fn contains(&self, key: &BlockKey) -> bool {
        self.keys.contains(key)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    fn push(&mut self, item: FeedItem) {
        self.bytes += item.data.len() as u64;
        self.keys.insert(item.key);
        self.items.push_back(item);
    }

    fn pop(&mut self) -> Option<FeedItem> {
        let item = self.items.pop_front()?;
        self.bytes -= item.data.len() as u64;
        self.keys.remove(&item.key);
        Some(item)
    }

    /// Full for a log block of `geometry`: time to close it and open the next.
    fn is_full(&self, geometry: &Geometry) -> bool {
        let entries_max = (geometry.data_units / 8).max(1) as usize;
        let bytes_max = u64::from((geometry.block_bytes / 8).max(geometry.largest_entry_bytes()));
        self.items.len() >= entries_max || self.bytes >= bytes_max
    }

    /// Forgets everything held (no device can take it); returns how many blocks.
    pub(crate) fn discard(&mut self) -> u64 {
        let n = self.items.len() as u64;
        *self = Spill::default();
        n
    }
}

impl OpenBlock {
    pub(crate) fn holds(&self, key: &BlockKey) -> bool {
        self.keys.contains(key)
    }
}

/// Places `item` in the open block or, when its buckets are full, holds it in the spill; a full
/// spill closes the block (the next one takes the spill first).
pub(crate) fn place(
    shared: &Shared,
    w: &mut WriterState,
    item: FeedItem,
    now_ms: u64,
    report: &mut WriteTickReport,
) {
    let Some(open) = w.open.as_mut() else { return };
    if !append(open, &item, now_ms) {
        w.spill.push(item);
        if w.spill.is_full(open.builder.geometry()) {
            write_out(shared, w, true, report);
            ensure_open(shared, w, now_ms);
        }
        return;
    }
    if open.builder.free_units() == 0 {
        write_out(shared, w, true, report);
    }
}

fn append(open: &mut OpenBlock, item: &FeedItem, now_ms: u64) -> bool {
    if open.builder.try_append(item.key, &item.data, item.checksum).is_none() {
        return false;
    }
    open.keys.insert(item.key);
    open.unwritten_since_ms.get_or_insert(now_ms);
    true
}

/// Moves what the spill holds into the open block; what still does not fit stays (bounded by
/// the spill's length).
fn place_spill(w: &mut WriterState, now_ms: u64) {
    let Some(open) = w.open.as_mut() else { return };
    for _ in 0..w.spill.items.len() {
        let Some(item) = w.spill.pop() else { break };
        if !append(open, &item, now_ms) {
            w.spill.push(item);
        }
    }
}

/// Makes sure a log block is open on a writable device, opening the next slot of the next
/// device round-robin if needed (and moving the spill into it). Returns false when no device
/// can take writes.
pub(crate) fn ensure_open(shared: &Shared, w: &mut WriterState, now_ms: u64) -> bool {
    if let Some(open) = &w.open {
        if open.device.writable() {
            return true;
        }
        discard_open(shared, w);
    }
    let writable: Vec<Arc<CacheDevice>> =
        shared.devices.read().iter().filter(|d| d.writable()).cloned().collect();
    if writable.is_empty() {
        return false;
    }
    let device = Arc::clone(&writable[w.round_robin % writable.len()]);
    w.round_robin = w.round_robin.wrapping_add(1);
    let (slot, sequence) = {
        let mut cursor = device.cursor.lock();
        let taken = (cursor.next_slot, cursor.next_sequence);
        cursor.next_slot = (cursor.next_slot + 1) % device.slot_count();
        cursor.next_sequence += 1;
        taken
    };
    if !forget_slot(shared, &device, slot) {
        return false;
    }
    let buffer = std::mem::take(&mut w.spare_buffer);
    w.open = Some(OpenBlock {
        builder: LogBlockBuilder::with_buffer(device.geometry, slot, buffer),
        device,
        slot,
        sequence,
        keys: HashSet::new(),
        written_entries: 0,
        unwritten_since_ms: None,
    });
    place_spill(w, now_ms);
    true
}

/// Forgets every index entry in `slot` BEFORE any byte of it is overwritten: reads the keys its
/// log block lists (only when the index has entries there), then, under the index lock, bumps
/// the slot's generation and drops them. A reader that looked an entry up before sees the new
/// generation after its read and misses. False when the device failed the read.
fn forget_slot(shared: &Shared, device: &CacheDevice, slot: u32) -> bool {
    let listed: Vec<(BlockKey, u8)> = if device.index.read().slot_entries(slot) == 0 {
        Vec::new()
    } else {
        match device.read_meta(slot) {
            Ok(Ok(meta)) => meta
                .entries
                .iter()
                .filter_map(|e| {
                    let units = Geometry::units_for(e.len_bytes);
                    device.geometry.place_of(&e.key, slot, e.unit, units).map(|p| (e.key, p))
                })
                .collect(),
            // Damaged since it was indexed: the index finds its entries by scanning.
            Ok(Err(_)) => Vec::new(),
            Err(err) => {
                shared.io_error(device, "read before reuse", &err);
                return false;
            }
        }
    };
    let mut index = device.index.write();
    device.bump_slot_generation(slot);
    index.drop_slot(slot, &listed);
    true
}

pub(crate) fn discard_open(shared: &Shared, w: &mut WriterState) {
    if let Some(open) = w.open.take() {
        let unwritten = open.builder.entries().len() - open.written_entries;
        add(&shared.counters.lost_unwritten, unwritten as u64);
        w.spare_buffer = open.builder.into_buffer();
    }
}

/// Writes the open block's new data and its metadata, then indexes the new entries. With
/// `close`, the block is finished and the next entry opens a new slot.
pub(crate) fn write_out(
    shared: &Shared,
    w: &mut WriterState,
    close: bool,
    report: &mut WriteTickReport,
) {
    let Some(open) = w.open.as_mut() else { return };
    if open.unwritten_since_ms.is_some() {
        if !open.device.writable() {
            discard_open(shared, w);
            return;
        }
        if let Err(err) = write_block(open) {
            let device = Arc::clone(&open.device);
            discard_open(shared, w);
            shared.io_error(&device, "write", &err);
            return;
        }
        index_new_entries(open);
        open.written_entries = open.builder.entries().len();
        open.unwritten_since_ms = None;
        open.device.counters.log_blocks_written.fetch_add(1, Ordering::Relaxed);
        report.block_writes += 1;
    }
    if close {
        let Some(open) = w.open.take() else { return };
        let base = open.device.slot_offset(open.slot);
        open.device.drop_cached(base, u64::from(open.device.block_bytes()));
        w.spare_buffer = open.builder.into_buffer();
    }
}

fn write_block(open: &OpenBlock) -> std::io::Result<()> {
    let device = &open.device;
    for (unit, units) in open.builder.runs_since(open.written_entries) {
        device
            .write_at(device.unit_offset(open.slot, unit), open.builder.unit_bytes(unit, units))?;
    }
    let meta = encode_meta(&device.place(open.slot), open.sequence, open.builder.entries());
    device.write_at(device.slot_offset(open.slot), &meta)
}

fn index_new_entries(open: &OpenBlock) {
    let mut index = open.device.index.write();
    // Checked under the index lock: a fault after this point drops what we add.
    if !open.device.readable() {
        return;
    }
    let new = open.written_entries..open.builder.entries().len();
    let entries = &open.builder.entries()[new.clone()];
    for (entry, place) in entries.iter().zip(&open.builder.places()[new]) {
        index.insert(&entry.key, Addr { slot: open.slot, place: *place }, entry.len_bytes);
    }
}
