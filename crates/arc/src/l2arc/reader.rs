//! The L2ARC read path: index lookup, positioned read, double verification.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::stats::add;
use super::Shared;
use crate::key::BlockKey;

pub(crate) fn get(shared: &Shared, key: &BlockKey, expected_checksum: u64) -> Option<Bytes> {
    let found = read_verified(shared, key, expected_checksum);
    let counter = match found {
        Some(_) => &shared.counters.hits,
        None => &shared.counters.misses,
    };
    add(counter, 1);
    found
}

fn read_verified(shared: &Shared, key: &BlockKey, expected_checksum: u64) -> Option<Bytes> {
    // Copy the location out: no lock is held during the device read.
    let loc = shared.index.lock().get(key)?;
    let device = shared.device(loc.device).filter(|d| d.readable())?;
    let offset = device.slot_offset(loc.slot) + u64::from(loc.data_offset);
    let data = match device.read_at(offset, loc.len_bytes as usize) {
        Ok(data) => data,
        Err(err) => {
            shared.io_error(&device, "read", &err);
            return None;
        }
    };
    if device.slot_generation(loc.slot) != loc.generation {
        // The writer reused the slot while we read: what we hold may be new data. A plain
        // miss, not damage.
        return None;
    }
    let checksum = xxhash_rust::xxh3::xxh3_64(&data);
    if checksum != loc.checksum || checksum != expected_checksum {
        device.counters.checksum_errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(?key, path = %device.path.display(), "L2ARC checksum mismatch; entry dropped");
        shared.index.lock().remove_if_at(key, &loc);
        return None;
    }
    Some(Bytes::from(data))
}
