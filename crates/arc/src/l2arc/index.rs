//! The in-memory L2ARC index: where each cached block sits on which device. It is rebuilt
//! from log-block headers after a restart, so it is never written anywhere itself.
//!
//! Memory is bounded by the devices: every entry occupies at least 32 bytes of a log block, so
//! the index holds at most (ring bytes / 32) entries, about 120 bytes each.

use std::collections::HashMap;

use super::DeviceId;
use crate::key::BlockKey;

/// One cached block's place on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Location {
    pub(crate) device: DeviceId,
    pub(crate) slot: u32,
    /// The slot's generation when the entry was indexed; a reader that sees it changed after
    /// reading knows the slot was reused under it.
    pub(crate) generation: u64,
    pub(crate) sequence: u64,
    /// From the start of the log block.
    pub(crate) data_offset: u32,
    pub(crate) len_bytes: u32,
    pub(crate) checksum: u64,
}

#[derive(Debug, Default)]
pub(crate) struct L2Index {
    map: HashMap<BlockKey, Location>,
    /// Keys written into each (device, slot); may hold keys that moved since, which
    /// invalidation skips. Bounded by the entries one log block can hold.
    slot_keys: HashMap<(DeviceId, u32), Vec<BlockKey>>,
    size_bytes: u64,
}

impl L2Index {
    pub(crate) fn get(&self, key: &BlockKey) -> Option<Location> {
        self.map.get(key).copied()
    }

    pub(crate) fn contains(&self, key: &BlockKey) -> bool {
        self.map.contains_key(key)
    }

    pub(crate) fn len(&self) -> u64 {
        self.map.len() as u64
    }

    pub(crate) fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Indexes `key` at `loc`. An entry already indexed from a newer log block of the same
    /// device is kept (the rebuild visits slots in ring order, not age order).
    pub(crate) fn insert(&mut self, key: BlockKey, loc: Location) -> bool {
        if let Some(old) = self.map.get(&key) {
            if old.device == loc.device && old.sequence > loc.sequence {
                return false;
            }
        }
        if let Some(old) = self.map.insert(key, loc) {
            self.size_bytes -= u64::from(old.len_bytes);
        }
        self.size_bytes += u64::from(loc.len_bytes);
        self.slot_keys.entry((loc.device, loc.slot)).or_default().push(key);
        true
    }

    /// Removes `key` only if it is still indexed at exactly `loc` (a concurrent rewrite may
    /// have moved it).
    pub(crate) fn remove_if_at(&mut self, key: &BlockKey, loc: &Location) -> bool {
        if self.map.get(key) != Some(loc) {
            return false;
        }
        self.remove(key).is_some()
    }

    pub(crate) fn remove(&mut self, key: &BlockKey) -> Option<Location> {
        let old = self.map.remove(key)?;
        self.size_bytes -= u64::from(old.len_bytes);
        Some(old)
    }

    /// Drops every entry stored in `slot` of `device`; called before the slot is reused.
    pub(crate) fn invalidate_slot(&mut self, device: DeviceId, slot: u32) -> u64 {
        let Some(keys) = self.slot_keys.remove(&(device, slot)) else {
            return 0;
        };
        let mut dropped = 0;
        for key in keys {
            let here = self.map.get(&key).is_some_and(|l| l.device == device && l.slot == slot);
            if here && self.remove(&key).is_some() {
                dropped += 1;
            }
        }
        dropped
    }

    /// Drops every entry of a device (faulted or removed). Walks only that device's slots.
    pub(crate) fn drop_device(&mut self, device: DeviceId) -> u64 {
        let slots: Vec<u32> =
            self.slot_keys.keys().filter(|(d, _)| *d == device).map(|(_, s)| *s).collect();
        slots.into_iter().map(|slot| self.invalidate_slot(device, slot)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(device: DeviceId, slot: u32, sequence: u64, len_bytes: u32) -> Location {
        Location {
            device,
            slot,
            generation: 0,
            sequence,
            data_offset: 4096,
            len_bytes,
            checksum: 1,
        }
    }

    #[test]
    fn newer_sequence_wins_on_one_device() {
        let mut idx = L2Index::default();
        let k = BlockKey::new(1, 0);
        assert!(idx.insert(k, loc(0, 5, 10, 100)));
        assert!(!idx.insert(k, loc(0, 2, 4, 50)));
        assert_eq!(idx.get(&k).map(|l| l.slot), Some(5));
        assert!(idx.insert(k, loc(0, 6, 11, 50)));
        assert_eq!(idx.size_bytes(), 50);
        assert_eq!(idx.len(), 1);
    }

    #[test]
    fn invalidating_a_slot_spares_entries_that_moved() {
        let mut idx = L2Index::default();
        let (a, b) = (BlockKey::new(1, 0), BlockKey::new(2, 0));
        idx.insert(a, loc(0, 1, 1, 10));
        idx.insert(b, loc(0, 1, 1, 10));
        idx.insert(b, loc(0, 2, 2, 10));
        assert_eq!(idx.invalidate_slot(0, 1), 1);
        assert!(!idx.contains(&a));
        assert!(idx.contains(&b));
        assert_eq!(idx.size_bytes(), 10);
    }

    #[test]
    fn drop_device_and_remove_if_at() {
        let mut idx = L2Index::default();
        let (a, b) = (BlockKey::new(1, 0), BlockKey::new(2, 0));
        idx.insert(a, loc(0, 1, 1, 10));
        idx.insert(b, loc(1, 1, 1, 10));
        assert!(!idx.remove_if_at(&b, &loc(1, 2, 1, 10)));
        assert_eq!(idx.drop_device(0), 1);
        assert!(idx.remove_if_at(&b, &loc(1, 1, 1, 10)));
        assert_eq!((idx.len(), idx.size_bytes()), (0, 0));
    }
}
