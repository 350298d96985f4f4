//! The cache key: an immutable block location in the object store.

/// Where a block lives in the store. A segment object is immutable and its id is never reused,
/// so the bytes behind a key never change: a cached copy can only be right or corrupt, never
/// stale, and corruption is caught by the caller's checksum.
#[derive(Clone, Copy, Hash, Eq, PartialEq, Ord, PartialOrd, Debug)]
pub struct BlockKey {
    pub segment_id: u64,
    pub offset_bytes: u32,
}

impl BlockKey {
    pub fn new(segment_id: u64, offset_bytes: u32) -> Self {
        Self { segment_id, offset_bytes }
    }
}

/// The hasher of the maps keyed by block location (the ARC's index, the engine's GETs in
/// flight): one folded 64x64->128-bit multiply per field instead of SipHash's rounds. Looking a
/// block up was a tenth of a cold reader's CPU (bench/notes/engine-store.md, "Blocks cut as the
/// body arrives"), SipHash a quarter of that. SipHash's resistance to chosen keys is not needed
/// here: every key is a location the engine chose itself (segment ids it allocated, offsets of
/// blocks it packed), not input from a client. The fold mixes every input bit into the low
/// bits that pick a bucket and the high bits that tag it, which a plain multiply would not
/// (offsets are multiples of 4 KiB).
#[derive(Default, Clone, Copy)]
pub struct LocationHasher(u64);

/// A `BuildHasher` for [`LocationHasher`].
pub type LocationHash = std::hash::BuildHasherDefault<LocationHasher>;

const MIX: u64 = 0x9E37_79B9_7F4A_7C15;

fn fold_multiply(a: u64, b: u64) -> u64 {
    let m = (a as u128) * (b as u128);
    (m as u64) ^ ((m >> 64) as u64)
}

impl std::hash::Hasher for LocationHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = fold_multiply(self.0 ^ n, MIX);
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn block_locations_spread_over_buckets_and_tags() {
        // The blocks of 64 segments of 4 KiB blocks: their hashes' low 12 bits (the bucket of a
        // table of 4,096) and top 7 bits (hashbrown's tag) must spread, though every offset's
        // low 12 bits are zero.
        let build = LocationHash::default();
        let mut buckets = vec![0u32; 4096];
        let mut tags = [0u32; 128];
        for segment_id in 1000..1064u64 {
            for block in 0..4096u32 {
                let h = build.hash_one(BlockKey::new(segment_id, block * 4096));
                buckets[(h & 4095) as usize] += 1;
                tags[(h >> 57) as usize] += 1;
            }
        }
        // 262,144 keys: 64 per bucket and 2,048 per tag on average.
        assert!(buckets.iter().all(|&n| (16..=160).contains(&n)), "{:?}", buckets.iter().max());
        assert!(tags.iter().all(|&n| (1500..=2600).contains(&n)), "{tags:?}");
    }
}
