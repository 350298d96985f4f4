//! The L2ARC read path: index lookup, one aligned read of the block's units, verification
//! against the caller's checksum. Split in three steps so that a caller with its own I/O (the
//! engine's io_uring reader) can move the bytes itself: [`plan`] names where to read,
//! [`finish`] checks what was read, [`missed`] settles the candidates that did not verify.
//!
//! The index keeps only a few bits of each key (`index.rs`), so a lookup may name blocks of
//! other keys too. The caller's checksum decides: bytes that hash to it are the block the
//! caller's pointer names, whichever entry they were found through. Only when no candidate
//! verifies are the failed ones looked up in their log block's entry table (a rare, slower
//! path): an entry that really is this key's holds damaged data (or bytes the caller does not
//! expect) and is dropped and counted; another key's entry is left alone.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use super::device::CacheDevice;
use super::direct::{is_direct_refusal, AlignedBuf, DirectReader};
use super::geometry::{Geometry, UNIT_BYTES};
use super::index::Addr;
use super::stats::add;
use super::Shared;
use crate::key::BlockKey;

/// One place where a cached block may be: a candidate the index named for a key, to be read
/// (whole 4 KiB units at an aligned offset) and then checked with [`finish`]. Holds the device
/// and its O_DIRECT handle open until dropped.
pub struct PlannedRead {
    device: Arc<CacheDevice>,
    direct: Option<Arc<DirectReader>>,
    addr: Addr,
    unit: u32,
    units: u32,
    generation: u64,
}

/// An aligned buffer for one [`PlannedRead`] (O_DIRECT needs 4 KiB alignment). Its bytes are
/// looked at only after a read reported filling all of them ([`finish`] checks the count).
pub struct ReadBuf(AlignedBuf);

impl ReadBuf {
    /// Start of the buffer, for the caller's I/O; valid for [`Self::len`] bytes while `self`
    /// lives (moving `ReadBuf` does not move its allocation).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.0.as_mut_ptr()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl PlannedRead {
    /// The file descriptor to read (the O_DIRECT handle when the file system takes it).
    pub fn fd(&self) -> RawFd {
        match &self.direct {
            Some(direct) => direct.as_raw_fd(),
            None => self.device.buffered_fd(),
        }
    }

    pub fn offset_bytes(&self) -> u64 {
        self.device.unit_offset(self.addr.slot, self.unit)
    }

    pub fn len_bytes(&self) -> usize {
        (self.units * UNIT_BYTES) as usize
    }

    /// A buffer of [`Self::len_bytes`] for the caller's I/O to fill through
    /// [`ReadBuf::as_mut_ptr`] (not zeroed: nothing reads it unless the read filled it).
    pub fn buffer(&self) -> ReadBuf {
        ReadBuf(AlignedBuf::for_raw_read(self.len_bytes()))
    }

    /// Reads the units with a plain `pread` on the calling thread.
    pub(crate) fn read_blocking(&self) -> std::io::Result<(ReadBuf, usize)> {
        let mut buf = ReadBuf(AlignedBuf::zeroed(self.len_bytes()));
        let slice = buf.0.as_mut_slice();
        let offset = self.offset_bytes();
        let read = match &self.direct {
            Some(direct) => direct.read_into(slice, offset),
            None => self.device.read_buffered_into(slice, offset),
        }?;
        Ok((buf, read))
    }
}

/// The device at position `i` of the device list (the list lock is held only to clone it).
fn device_at(shared: &Shared, i: usize) -> Option<Arc<CacheDevice>> {
    shared.devices.read().get(i).cloned()
}

/// Every place `key` (a block of `len_bytes`) may be cached, in the order to try them.
pub(crate) fn plan(shared: &Shared, key: &BlockKey, len_bytes: u32) -> Vec<PlannedRead> {
    let units = Geometry::units_for(len_bytes);
    let mut plans = Vec::new();
    // Bounded by the device list (a handful of devices).
    for i in 0.. {
        let Some(device) = device_at(shared, i) else { break };
        if !device.readable() {
            continue;
        }
        // The generation is taken under the index lock: the writer bumps it under the same lock
        // before it drops the slot's entries and overwrites the slot.
        let direct = device.direct_reader();
        let index = device.index.read();
        for addr in index.lookup(key).iter() {
            let unit = device.geometry.unit_of(key, addr.slot, addr.place);
            // Another key's entry if the block could not sit there.
            if unit + units <= device.geometry.data_units {
                plans.push(PlannedRead {
                    device: Arc::clone(&device),
                    direct: direct.clone(),
                    addr,
                    unit,
                    units,
                    generation: device.slot_generation(addr.slot),
                });
            }
        }
    }
    plans
}

/// Checks what was read for `plan`: the bytes if they are the block the caller expects (a hit
/// is counted), `None` otherwise (keep `plan` for [`missed`]; an I/O error has faulted the
/// device).
pub(crate) fn finish(
    shared: &Shared,
    len_bytes: u32,
    expected_checksum: u64,
    plan: &PlannedRead,
    read: std::io::Result<(ReadBuf, usize)>,
) -> Option<Bytes> {
    let device = &plan.device;
    let buf = match read {
        Ok((buf, n)) if n == buf.len() => buf,
        Ok((_, n)) => {
            let short = std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("short read: {n} of {} bytes", plan.len_bytes()),
            );
            shared.io_error(device, "read", &short);
            return None;
        }
        Err(err) if plan.direct.is_some() && is_direct_refusal(&err) => {
            device.stop_direct_reads();
            return None;
        }
        Err(err) => {
            shared.io_error(device, "read", &err);
            return None;
        }
    };
    device.counters.bytes_read.fetch_add(buf.len() as u64, Ordering::Relaxed);
    if device.slot_generation(plan.addr.slot) != plan.generation {
        // The writer reused the slot while we read: a plain miss, not damage.
        return None;
    }
    let data = Bytes::from_owner(buf.0);
    if xxhash_rust::xxh3::xxh3_64(&data[..len_bytes as usize]) != expected_checksum {
        return None;
    }
    add(&shared.counters.hits, 1);
    Some(data.slice(..len_bytes as usize))
}

/// After no candidate verified: counts the miss and drops the candidates that really were
/// `key`'s (their log block's table says so), counting them in `checksum_errors`.
pub(crate) fn missed(shared: &Shared, key: &BlockKey, len_bytes: u32, failed: &[PlannedRead]) {
    add(&shared.counters.misses, 1);
    for plan in failed {
        drop_if_own(shared, key, len_bytes, plan);
    }
}

/// The whole read on the calling thread.
pub(crate) fn get(
    shared: &Shared,
    key: &BlockKey,
    len_bytes: u32,
    expected_checksum: u64,
) -> Option<Bytes> {
    let plans = plan(shared, key, len_bytes);
    let mut failed = Vec::new();
    for p in plans {
        if !p.device.readable() {
            continue;
        }
        if let Some(hit) = finish(shared, len_bytes, expected_checksum, &p, p.read_blocking()) {
            return Some(hit);
        }
        failed.push(p);
    }
    missed(shared, key, len_bytes, &failed);
    None
}

/// The slow path: reads the candidate's log-block table; if the entry at that unit is `key`'s,
/// its bytes are damaged (or not what the caller expects) and it leaves the index.
fn drop_if_own(shared: &Shared, key: &BlockKey, len_bytes: u32, p: &PlannedRead) {
    if !p.device.readable() || p.device.slot_generation(p.addr.slot) != p.generation {
        return; // faulted, or reused meanwhile: the entry is gone already
    }
    let own_len = match p.device.read_meta(p.addr.slot) {
        Ok(Ok(meta)) => match meta.entries.iter().find(|e| e.unit == p.unit) {
            Some(e) if e.key == *key => Some(e.len_bytes),
            _ => None,
        },
        // The table is damaged too: the entry cannot be trusted whoever it belongs to.
        Ok(Err(_)) => Some(len_bytes),
        Err(err) => {
            shared.io_error(&p.device, "read", &err);
            return;
        }
    };
    let Some(own_len) = own_len else { return };
    let mut index = p.device.index.write();
    if p.device.slot_generation(p.addr.slot) != p.generation {
        return;
    }
    if index.remove(key, p.addr, own_len) {
        p.device.counters.checksum_errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(?key, path = %p.device.path.display(), "L2ARC checksum mismatch; entry dropped");
    }
}

/// Whether `key` may be cached (by index only: the bytes may still fail verification).
pub(crate) fn indexed(shared: &Shared, key: &BlockKey) -> bool {
    (0..)
        .map_while(|i| device_at(shared, i))
        .any(|d| d.readable() && !d.index.read().lookup(key).is_empty())
}

/// Forgets `key` (entries confirmed by their log block's table). Returns whether one was found.
pub(crate) fn remove(shared: &Shared, key: &BlockKey) -> bool {
    let mut removed = false;
    for device in (0..).map_while(|i| device_at(shared, i)) {
        let found: Vec<(Addr, u64)> = {
            let index = device.index.read();
            index.lookup(key).iter().map(|a| (a, device.slot_generation(a.slot))).collect()
        };
        for (addr, generation) in found {
            let unit = device.geometry.unit_of(key, addr.slot, addr.place);
            let Ok(Ok(meta)) = device.read_meta(addr.slot) else { continue };
            let Some(entry) = meta.entries.iter().find(|e| e.unit == unit && e.key == *key) else {
                continue;
            };
            let mut index = device.index.write();
            if device.slot_generation(addr.slot) == generation {
                removed |= index.remove(key, addr, entry.len_bytes);
            }
        }
    }
    removed
}
