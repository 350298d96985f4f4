//! Dirty data of the open and the syncing txg, in memory. Reads look here first, so nothing a
//! writer was told is written ever disappears while its txg uploads.

use bytes::Bytes;
use std::collections::HashMap;

pub const BLOCK_BYTES: u64 = 4096;
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
    pub bytes: u64,
}

impl DirtySet {
    pub fn insert(&mut self, volume_id: u32, block: u64, d: Dirty) {
        self.bytes += d.cost_bytes();
        if let Some(old) = self.blocks.insert((volume_id, block), d) {
            self.bytes -= old.cost_bytes();
        }
    }
    pub fn get(&self, volume_id: u32, block: u64) -> Option<&Dirty> {
        self.blocks.get(&(volume_id, block))
    }
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }
    /// Forget a destroyed volume's dirty blocks.
    pub fn drop_volume(&mut self, volume_id: u32) {
        let before: Vec<(u32, u64)> = self.blocks.keys().filter(|k| k.0 == volume_id).copied().collect();
        for k in before {
            if let Some(d) = self.blocks.remove(&k) {
                self.bytes -= d.cost_bytes();
            }
        }
    }
}

pub fn is_all_zero(b: &[u8]) -> bool {
    let (prefix, words, suffix) = unsafe { b.align_to::<u64>() };
    prefix.iter().all(|&x| x == 0) && words.iter().all(|&x| x == 0) && suffix.iter().all(|&x| x == 0)
}
