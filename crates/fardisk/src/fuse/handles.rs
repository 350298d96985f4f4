//! Open file handles: what `open` resolved, kept until `release`. Holding the device here
//! means a request on an open file never goes back to the provider, and a volume destroyed
//! while open keeps answering (with the device's own errors) instead of vanishing mid-I/O.
//!
//! A handle number says which engine issued it and how the file was opened:
//! `epoch << EPOCH_SHIFT | counter << 1 | sync_writes`. Under a holder each engine has its own
//! epoch (its generation), so when a new engine takes the connection over, a handle the kernel
//! still uses (a loop device keeps its image open for days) is recognised as a predecessor's
//! and adopted ([`HandleTable::adopt`]) instead of failing with EBADF, and never collides with
//! a handle this engine issues.

use std::collections::HashMap;
use std::sync::Arc;

use fardisk_nbd::BlockDevice;

use super::inodes::RmwGate;

pub(crate) struct OpenFile {
    pub(crate) volume: String,
    pub(crate) device: Arc<dyn BlockDevice>,
    pub(crate) gate: RmwGate,
    /// Opened with O_SYNC or O_DSYNC: every write is sent with FUA.
    pub(crate) sync_writes: bool,
}

/// Where the issuing engine's epoch starts in a handle number.
const EPOCH_SHIFT: u32 = 40;

pub(crate) struct HandleTable {
    open: HashMap<u64, Arc<OpenFile>>,
    next_counter: u64,
    epoch: u64,
    open_files_max: usize,
}

/// Whether a handle number says its file was opened with O_SYNC/O_DSYNC.
pub(crate) fn fh_sync_writes(fh: u64) -> bool {
    fh & 1 == 1
}

impl HandleTable {
    /// `epoch`: 0 for an engine that owns its mount, the generation under a holder.
    pub(crate) fn new(open_files_max: usize, epoch: u64) -> HandleTable {
        HandleTable {
            open: HashMap::new(),
            next_counter: 1,
            epoch: epoch & ((1 << (64 - EPOCH_SHIFT)) - 1),
            open_files_max,
        }
    }

    /// Registers `file`; None when `open_files_max` handles are already open.
    pub(crate) fn insert(&mut self, file: OpenFile) -> Option<u64> {
        if self.open.len() >= self.open_files_max {
            return None;
        }
        let counter = self.next_counter;
        // 39 bits of counter never wrap in practice; skipping 0 keeps handles non-zero.
        self.next_counter = (self.next_counter + 1) & ((1 << (EPOCH_SHIFT - 1)) - 1);
        self.next_counter = self.next_counter.max(1);
        let fh = self.epoch << EPOCH_SHIFT | counter << 1 | u64::from(file.sync_writes);
        self.open.insert(fh, Arc::new(file));
        Some(fh)
    }

    /// Whether `fh` was issued by another engine (a predecessor under the same holder).
    pub(crate) fn is_foreign(&self, fh: u64) -> bool {
        fh >> EPOCH_SHIFT != self.epoch
    }

    /// Registers a predecessor's handle `fh` for `file` (or returns the one adopted already).
    pub(crate) fn adopt(&mut self, fh: u64, file: OpenFile) -> Option<Arc<OpenFile>> {
        if let Some(known) = self.open.get(&fh) {
            return Some(known.clone());
        }
        if !self.is_foreign(fh) || self.open.len() >= self.open_files_max {
            return None;
        }
        let file = Arc::new(file);
        self.open.insert(fh, file.clone());
        Some(file)
    }

    pub(crate) fn get(&self, fh: u64) -> Option<Arc<OpenFile>> {
        self.open.get(&fh).cloned()
    }

    pub(crate) fn remove(&mut self, fh: u64) -> Option<Arc<OpenFile>> {
        self.open.remove(&fh)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fardisk_nbd::MemDevice;

    fn file() -> OpenFile {
        OpenFile {
            volume: "v".into(),
            device: Arc::new(MemDevice::new(4096)),
            gate: RmwGate::default(),
            sync_writes: false,
        }
    }

    #[test]
    fn bounded_and_released() {
        let mut table = HandleTable::new(2, 0);
        let first = table.insert(file()).expect("room");
        let second = table.insert(file()).expect("room");
        assert_ne!(first, second);
        assert!(table.insert(file()).is_none(), "third open is refused");
        assert!(table.remove(first).is_some());
        assert!(table.get(first).is_none());
        assert!(table.insert(file()).is_some(), "room again after release");
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn a_predecessors_handle_is_adopted_and_never_collides() {
        let mut old = HandleTable::new(8, 1);
        let old_fh = old.insert(OpenFile { sync_writes: true, ..file() }).expect("room");
        assert!(fh_sync_writes(old_fh));
        let mut new = HandleTable::new(8, 2);
        assert!(new.get(old_fh).is_none());
        assert!(new.is_foreign(old_fh));
        let own = new.insert(file()).expect("room");
        assert!(!new.is_foreign(own) && !fh_sync_writes(own));
        assert_ne!(own, old_fh);
        assert!(new.adopt(old_fh, file()).is_some());
        assert!(new.get(old_fh).is_some());
        assert!(new.adopt(own + 2, file()).is_none(), "an own handle that is gone stays gone");
    }
}
