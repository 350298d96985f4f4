//! Open file handles: what `open` resolved, kept until `release`. Holding the device here
//! means a request on an open file never goes back to the provider, and a volume destroyed
//! while open keeps answering (with the device's own errors) instead of vanishing mid-I/O.

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

pub(crate) struct HandleTable {
    open: HashMap<u64, Arc<OpenFile>>,
    next_fh: u64,
    open_files_max: usize,
}

impl HandleTable {
    pub(crate) fn new(open_files_max: usize) -> HandleTable {
        HandleTable { open: HashMap::new(), next_fh: 1, open_files_max }
    }

    /// Registers `file`; None when `open_files_max` handles are already open.
    pub(crate) fn insert(&mut self, file: OpenFile) -> Option<u64> {
        if self.open.len() >= self.open_files_max {
            return None;
        }
        let fh = self.next_fh;
        // u64 handles never wrap in practice; skipping 0 keeps "no handle" distinguishable.
        self.next_fh = self.next_fh.wrapping_add(1).max(1);
        self.open.insert(fh, Arc::new(file));
        Some(fh)
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
        let mut table = HandleTable::new(2);
        let first = table.insert(file()).expect("room");
        let second = table.insert(file()).expect("room");
        assert_ne!(first, second);
        assert!(table.insert(file()).is_none(), "third open is refused");
        assert!(table.remove(first).is_some());
        assert!(table.get(first).is_none());
        assert!(table.insert(file()).is_some(), "room again after release");
        assert_eq!(table.len(), 2);
    }
}
