//! Inode numbers for volume names. A volume's inode number is a hash of its name, so it is
//! the same across remounts and while the volume is listed; the table only remembers which
//! name owns which number (and resolves the rare collision by probing).
//!
//! Each entry also carries the volume's read-modify-write gate (see [`super::io`]), shared
//! by every open handle of the volume.

use std::collections::HashMap;
use std::sync::Arc;

/// Serialises read-modify-write cycles against other writes of one volume.
pub(crate) type RmwGate = Arc<tokio::sync::RwLock<()>>;

/// Inode numbers below this are reserved (1 is the root directory).
const INO_FIRST: u64 = 2;
/// Most probes before giving up on a free number (only reachable with absurd collisions).
const PROBES_MAX: u64 = 1024;

#[derive(Debug, Clone)]
pub(crate) struct VolumeEntry {
    pub(crate) name: String,
    pub(crate) gate: RmwGate,
}

#[derive(Debug)]
pub(crate) struct InodeTable {
    by_name: HashMap<String, u64>,
    by_ino: HashMap<u64, VolumeEntry>,
    volumes_max: usize,
}

/// FNV-1a: tiny, stable across releases and platforms (std's hasher is neither promised).
fn fnv1a_64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The preferred inode number of `name`: 63 bits of its hash (the kernel and some tools
/// treat inode numbers as signed), never a reserved number.
pub(crate) fn preferred_ino(name: &str) -> u64 {
    let hash = fnv1a_64(name.as_bytes()) >> 1;
    hash.max(INO_FIRST)
}

impl InodeTable {
    pub(crate) fn new(volumes_max: usize) -> InodeTable {
        InodeTable { by_name: HashMap::new(), by_ino: HashMap::new(), volumes_max }
    }

    /// The inode number of `name`, assigning one on first sight. `listed` is the current
    /// volume list, used to forget names that are gone when the table is full.
    pub(crate) fn ino_for(&mut self, name: &str, listed: &[String]) -> Option<u64> {
        if let Some(ino) = self.by_name.get(name) {
            return Some(*ino);
        }
        if self.by_name.len() >= self.volumes_max {
            self.forget_unlisted(listed);
        }
        if self.by_name.len() >= self.volumes_max {
            tracing::warn!(volume = name, "fuse: inode table full ({} volumes)", self.volumes_max);
            return None;
        }
        let ino = self.free_ino(name)?;
        let entry = VolumeEntry { name: name.to_owned(), gate: RmwGate::default() };
        self.by_name.insert(name.to_owned(), ino);
        self.by_ino.insert(ino, entry);
        Some(ino)
    }

    pub(crate) fn get(&self, ino: u64) -> Option<VolumeEntry> {
        self.by_ino.get(&ino).cloned()
    }

    fn free_ino(&self, name: &str) -> Option<u64> {
        let preferred = preferred_ino(name);
        (0..PROBES_MAX)
            .map(|probe| preferred.wrapping_add(probe) & (u64::MAX >> 1))
            .find(|ino| *ino >= INO_FIRST && !self.by_ino.contains_key(ino))
    }

    fn forget_unlisted(&mut self, listed: &[String]) {
        let by_ino = &mut self.by_ino;
        self.by_name.retain(|name, ino| {
            let keep = listed.iter().any(|listed_name| listed_name == name);
            if !keep {
                by_ino.remove(ino);
            }
            keep
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_stable_and_distinct() {
        let mut table = InodeTable::new(16);
        let listed = vec!["a".to_owned(), "b".to_owned()];
        let a = table.ino_for("a", &listed).expect("room");
        let b = table.ino_for("b", &listed).expect("room");
        assert_ne!(a, b);
        assert_eq!(table.ino_for("a", &listed), Some(a));
        assert_eq!(a, preferred_ino("a"), "same number in a fresh table (remount)");
        assert_eq!(table.get(a).map(|entry| entry.name), Some("a".to_owned()));
        assert!(a >= INO_FIRST && b >= INO_FIRST);
    }

    #[test]
    fn collision_probes_to_next_number() {
        let mut table = InodeTable::new(16);
        // Occupy "b"'s preferred number with a fake entry to force a collision.
        let taken = preferred_ino("b");
        table.by_ino.insert(taken, VolumeEntry { name: "x".into(), gate: RmwGate::default() });
        let b = table.ino_for("b", &[]).expect("room");
        assert_eq!(b, taken + 1);
    }

    #[test]
    fn full_table_forgets_unlisted_names() {
        let mut table = InodeTable::new(2);
        table.ino_for("a", &[]).expect("room");
        table.ino_for("b", &[]).expect("room");
        let listed = vec!["b".to_owned(), "c".to_owned()];
        let c = table.ino_for("c", &listed).expect("a was forgotten");
        assert_eq!(table.get(c).map(|entry| entry.name), Some("c".to_owned()));
        assert!(table.get(preferred_ino("a")).is_none());
        let listed_all = vec!["b".to_owned(), "c".to_owned(), "d".to_owned()];
        assert_eq!(table.ino_for("d", &listed_all), None, "bounded");
    }
}
