//! The bytes a benchmark writes: seeded pseudo-random data, so a run is reproducible and
//! compression neither helps nor hurts, or a labelled compressible variant. The data set is
//! generated before the clock starts and shared by the raw and the engine runs, so both move
//! exactly the same bytes.

use bytes::Bytes;

/// The engine's logical block: the compressible variant zeroes the tail of every block so each
/// block compresses on its own (the engine compresses block by block).
pub const BLOCK_BYTES: usize = 4096;

/// What the data looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataKind {
    /// Uniform pseudo-random bytes: no compressor shrinks them.
    Random,
    /// Every 4 KiB block: pseudo-random head, then `zero_percent` % zeros (lz4 ~ 100/(100-p)).
    Compressible { zero_percent: u8 },
}

impl DataKind {
    pub fn label(self) -> String {
        match self {
            DataKind::Random => "incompressible (seeded pseudo-random)".to_string(),
            DataKind::Compressible { zero_percent } => {
                format!(
                    "compressible (each 4 KiB block {}% random, {zero_percent}% zeros)",
                    100 - zero_percent as u32
                )
            }
        }
    }
}

/// Xorshift64 (Marsaglia 2003): the readers' cheap block picker (`state` must not be 0).
pub fn xorshift64(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// The seeded generator of every data set: SplitMix64 (Steele, Lea, Flood 2014), the one all of
/// fardisk uses; tiny, fast, and good enough that lz4 finds nothing.
pub use fardisk_common::rng::Rng;

/// Object `index` of a data set: its bytes depend only on (seed, index, kind), so any object can be
/// regenerated to check a read without keeping the whole set.
pub fn generate_object(seed: u64, index: u64, len_bytes: usize, kind: DataKind) -> Vec<u8> {
    // Distinct, well-mixed stream per object: seed the generator from a hash of (seed, index).
    let rng = Rng::new(Rng::new(seed ^ index.wrapping_mul(0xd6e8_feb8_6659_fd93)).next_u64());
    let mut buf = vec![0u8; len_bytes];
    match kind {
        DataKind::Random => rng.fill(&mut buf),
        DataKind::Compressible { zero_percent } => {
            let random_bytes = BLOCK_BYTES * (100 - zero_percent.min(99) as usize) / 100;
            for block in buf.chunks_mut(BLOCK_BYTES) {
                let n = random_bytes.min(block.len());
                rng.fill(&mut block[..n]); // The rest stays zero.
            }
        }
    }
    buf
}

/// The whole data set, as objects of the raw PUT size; the engine writes slices of them.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub objects: Vec<Bytes>,
    pub object_bytes: usize,
}

impl Dataset {
    /// `total_bytes` must be a positive multiple of `object_bytes` (the caller checks the flags).
    pub fn generate(seed: u64, total_bytes: u64, object_bytes: usize, kind: DataKind) -> Dataset {
        let count = total_bytes / object_bytes as u64;
        let objects =
            (0..count).map(|i| Bytes::from(generate_object(seed, i, object_bytes, kind))).collect();
        Dataset { objects, object_bytes }
    }

    pub fn total_bytes(&self) -> u64 {
        self.objects.len() as u64 * self.object_bytes as u64
    }

    /// `chunk_bytes` at byte `offset` of the set, without copying. Chunks never straddle objects
    /// because the chunk size divides the object size (checked by the caller).
    pub fn chunk(&self, offset: u64, chunk_bytes: usize) -> Bytes {
        let object = (offset / self.object_bytes as u64) as usize;
        let within = (offset % self.object_bytes as u64) as usize;
        self.objects[object].slice(within..within + chunk_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_bytes_other_seed_other_bytes() {
        let a = generate_object(7, 3, 1 << 16, DataKind::Random);
        let b = generate_object(7, 3, 1 << 16, DataKind::Random);
        let c = generate_object(8, 3, 1 << 16, DataKind::Random);
        let d = generate_object(7, 4, 1 << 16, DataKind::Random);
        assert_eq!(a, b, "deterministic");
        assert_ne!(a, c, "the seed matters");
        assert_ne!(a, d, "each object differs");
    }

    #[test]
    fn splitmix_matches_the_reference_sequence() {
        // First outputs of SplitMix64 seeded with 0 (reference implementation by Vigna).
        let r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn fill_writes_little_endian_words_and_a_partial_tail() {
        let expect = Rng::new(9);
        let (w0, w1) = (expect.next_u64().to_le_bytes(), expect.next_u64().to_le_bytes());
        let mut buf = [0u8; 11];
        Rng::new(9).fill(&mut buf);
        assert_eq!(&buf[..8], &w0);
        assert_eq!(&buf[8..], &w1[..3], "the tail takes the low bytes of the next output");
    }

    #[test]
    fn random_data_looks_uniform() {
        let buf = generate_object(1, 0, 1 << 20, DataKind::Random);
        let mut counts = [0u32; 256];
        for &b in &buf {
            counts[b as usize] += 1;
        }
        // 4096 expected per value; a biased or constant generator lands far outside this.
        assert!(counts.iter().all(|&c| (3600..4600).contains(&c)), "{:?}", &counts[..8]);
    }

    #[test]
    fn compressible_blocks_have_a_zero_tail_and_a_random_head() {
        let buf =
            generate_object(1, 0, 4 * BLOCK_BYTES, DataKind::Compressible { zero_percent: 50 });
        for block in buf.chunks(BLOCK_BYTES) {
            assert!(block[2048..].iter().all(|&x| x == 0), "tail zeroed");
            assert!(block[..2048].iter().filter(|&&x| x == 0).count() < 64, "head random");
        }
    }

    #[test]
    fn the_engine_compressor_finds_nothing_in_random_data_and_half_in_the_compressible_kind() {
        use fardisk_engine::compress::{compress, Compression};
        let random = generate_object(3, 0, 64 * BLOCK_BYTES, DataKind::Random);
        let half =
            generate_object(3, 0, 64 * BLOCK_BYTES, DataKind::Compressible { zero_percent: 50 });
        let stored = |buf: &[u8]| -> (usize, usize) {
            let mut kept = (0, 0);
            for block in buf.chunks(BLOCK_BYTES) {
                let (algo, bytes) = compress(Compression::Lz4, block);
                kept.0 += (algo == Compression::Off) as usize;
                kept.1 += bytes.len();
            }
            kept
        };
        assert_eq!(stored(&random), (64, 64 * BLOCK_BYTES), "every random block stored as is");
        let (uncompressed, bytes) = stored(&half);
        assert_eq!(uncompressed, 0, "every half-zero block compresses");
        assert!(bytes < 64 * BLOCK_BYTES * 55 / 100, "about half the bytes: {bytes}");
    }

    #[test]
    fn chunks_slice_the_objects_in_order() {
        let set = Dataset::generate(5, 4 << 16, 1 << 16, DataKind::Random);
        assert_eq!(set.total_bytes(), 4 << 16);
        let c = set.chunk((1 << 16) + 4096, 4096);
        assert_eq!(&c[..], &set.objects[1][4096..8192]);
        assert_eq!(&set.objects[2][..], &generate_object(5, 2, 1 << 16, DataKind::Random)[..]);
    }
}
