//! Dirty data of the open and the syncing txg, in memory. Reads look here first, so nothing a
//! writer was told is written ever disappears while its txg uploads.

use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};

pub const BLOCK_BYTES: u64 = 4096;
/// A block of zeros, for holes and trimmed blocks (`Bytes::from_static`: no allocation per read).
pub static ZERO_BLOCK: [u8; BLOCK_BYTES as usize] = [0; BLOCK_BYTES as usize];
/// What a hole (trim, all-zero write) costs in memory, for the dirty limit.
const ZERO_ENTRY_BYTES: u64 = 64;

#[derive(Debug, Clone)]
pub enum Dirty {
    Data(Bytes),
    /// The block reads as zeros and is stored as a hole.
    Zero,
}

impl Dirty {
    fn cost_bytes(&self) -> u64 {
        match self {
            Dirty::Data(_) => BLOCK_BYTES + ZERO_ENTRY_BYTES,
            Dirty::Zero => ZERO_ENTRY_BYTES,
        }
    }
}

#[derive(Debug, Default)]
pub struct DirtySet {
    pub blocks: HashMap<(u32, u64), Dirty>,
    /// Trimmed block ranges, (volume, first block) -> end block (exclusive), merged. A range
    /// costs the same whatever its length, so a whole-device discard (mkfs) is cheap. Blocks
    /// written after a trim sit in `blocks` and win over it.
    pub trims: BTreeMap<(u32, u64), u64>,
    pub bytes: u64,
}

impl DirtySet {
    pub fn insert(&mut self, volume_id: u32, block: u64, d: Dirty) {
        self.bytes += d.cost_bytes();
        if let Some(old) = self.blocks.insert((volume_id, block), d) {
            self.bytes -= old.cost_bytes();
        }
    }
    /// The block's dirty contents: written data, a hole, or None when this txg has not touched it.
    pub fn get(&self, volume_id: u32, block: u64) -> Option<Dirty> {
        if let Some(d) = self.blocks.get(&(volume_id, block)) {
            return Some(d.clone());
        }
        self.is_trimmed(volume_id, block).then_some(Dirty::Zero)
    }

    /// Whether this txg touched the block (written, a hole, or trimmed): `get` is Some.
    pub fn contains(&self, volume_id: u32, block: u64) -> bool {
        self.blocks.contains_key(&(volume_id, block)) || self.is_trimmed(volume_id, block)
    }

    pub fn is_trimmed(&self, volume_id: u32, block: u64) -> bool {
        self.trims
            .range(..=(volume_id, block))
            .next_back()
            .is_some_and(|(&(v, _), &end)| v == volume_id && block < end)
    }

    /// Trims blocks `start..end` of a volume: drops dirty blocks there and records the range.
    pub fn trim(&mut self, volume_id: u32, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let doomed: Vec<(u32, u64)> = self
            .blocks
            .keys()
            .filter(|k| k.0 == volume_id && k.1 >= start && k.1 < end)
            .copied()
            .collect();
        for k in doomed {
            if let Some(d) = self.blocks.remove(&k) {
                self.bytes -= d.cost_bytes();
            }
        }
        let (mut lo, mut hi) = (start, end);
        // Merge with every overlapping or touching range of the same volume.
        let overlapping: Vec<(u64, u64)> = self
            .trims
            .range((volume_id, 0)..=(volume_id, end))
            .filter(|(_, &e)| e >= start)
            .map(|(&(_, s), &e)| (s, e))
            .collect();
        for (s, e) in overlapping {
            self.trims.remove(&(volume_id, s));
            self.bytes -= ZERO_ENTRY_BYTES;
            lo = lo.min(s);
            hi = hi.max(e);
        }
        self.trims.insert((volume_id, lo), hi);
        self.bytes += ZERO_ENTRY_BYTES;
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty() && self.trims.is_empty()
    }
    /// Forget a destroyed volume's dirty blocks.
    pub fn drop_volume(&mut self, volume_id: u32) {
        let before: Vec<(u32, u64)> =
            self.blocks.keys().filter(|k| k.0 == volume_id).copied().collect();
        for k in before {
            if let Some(d) = self.blocks.remove(&k) {
                self.bytes -= d.cost_bytes();
            }
        }
        let n = self.trims.len();
        self.trims.retain(|k, _| k.0 != volume_id);
        self.bytes -= (n - self.trims.len()) as u64 * ZERO_ENTRY_BYTES;
    }
}

pub fn is_all_zero(b: &[u8]) -> bool {
    // SAFETY: every bit pattern is a valid u64, and align_to only reinterprets the aligned middle.
    let (prefix, words, suffix) = unsafe { b.align_to::<u64>() };
    prefix.iter().all(|&x| x == 0)
        && words.iter().all(|&x| x == 0)
        && suffix.iter().all(|&x| x == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_merge_and_later_writes_win() {
        let mut d = DirtySet::default();
        d.insert(1, 5, Dirty::Data(Bytes::from_static(b"x")));
        d.trim(1, 0, 10);
        assert!(matches!(d.get(1, 5), Some(Dirty::Zero)), "a trim supersedes earlier writes");
        d.insert(1, 5, Dirty::Data(Bytes::from_static(b"y")));
        assert!(matches!(d.get(1, 5), Some(Dirty::Data(_))), "a later write wins over the trim");
        d.trim(1, 10, 20);
        d.trim(1, 30, 40);
        d.trim(1, 15, 35);
        assert_eq!(d.trims.len(), 1, "touching and overlapping ranges merge: {:?}", d.trims);
        assert!(d.is_trimmed(1, 39) && !d.is_trimmed(1, 40) && !d.is_trimmed(2, 3));
        assert!(d.get(2, 5).is_none());
        d.drop_volume(1);
        assert!(d.is_empty());
        assert_eq!(d.bytes, 0);
    }
}
