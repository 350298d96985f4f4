//! Injected randomness: one small seeded generator (SplitMix64, Steele, Lea and Flood 2014), so
//! every random choice (retry jitter, ids, guids, simulated faults, crash cuts, test schedules)
//! replays from a seed. The one entropy source is [`Rng::from_entropy`], for the places that
//! must not replay (a new pool's guid, a production seed); `clippy.toml` disallows it elsewhere.

use std::sync::atomic::{AtomicU64, Ordering};

const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// A seeded SplitMix64 generator, shareable between tasks (`&self`): the state advances with one
/// atomic add, so concurrent callers each get a distinct value of the one sequence.
#[derive(Debug)]
pub struct Rng {
    state: AtomicU64,
}

impl Clone for Rng {
    /// A generator that continues from the same point (both produce the same values next).
    fn clone(&self) -> Rng {
        Rng::new(self.state.load(Ordering::SeqCst))
    }
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng { state: AtomicU64::new(seed) }
    }

    /// Seeded from the operating system: for production seeds and identities that must differ
    /// between processes. Tests and the simulation pass their own seed.
    pub fn from_entropy() -> Rng {
        let mut seed = [0u8; 8];
        // getrandom(2) cannot fail for 8 bytes once the kernel pool is initialised; fall back
        // to the pid.
        #[allow(clippy::disallowed_methods)] // The one entropy source of the library crates.
        // SAFETY: the pointer and length describe `seed`, a live, writable 8-byte buffer.
        let got = unsafe { libc::getrandom(seed.as_mut_ptr().cast(), seed.len(), 0) };
        if got != 8 {
            seed = u64::from(std::process::id()).to_le_bytes();
        }
        Rng::new(u64::from_le_bytes(seed))
    }

    pub fn next_u64(&self) -> u64 {
        let mut z = self.state.fetch_add(GAMMA, Ordering::SeqCst).wrapping_add(GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Two values, the first one in the high half.
    pub fn next_u128(&self) -> u128 {
        (u128::from(self.next_u64()) << 64) | u128::from(self.next_u64())
    }

    /// Uniform (up to modulo bias) in `0..bound`; a `bound` of 0 yields 0 (one value is still
    /// drawn, so the sequence does not depend on the bound).
    pub fn below(&self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }

    /// True with probability `p` (0.0..=1.0); never for `p <= 0`.
    pub fn chance(&self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p && p > 0.0
    }

    /// True with probability `1 / n` (`below(n) == 0`).
    pub fn one_in(&self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// Fills `buf` with pseudo-random bytes, 8 at a time (little-endian); a tail shorter than 8
    /// takes the first bytes of one more value.
    pub fn fill(&self, buf: &mut [u8]) {
        let mut words = buf.chunks_exact_mut(8);
        for w in &mut words {
            w.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let tail = words.into_remainder();
        if !tail.is_empty() {
            let last = self.next_u64().to_le_bytes();
            let n = tail.len();
            tail.copy_from_slice(&last[..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_splitmix64() {
        // First outputs of SplitMix64 seeded with 0 (Vigna's reference implementation): the
        // sequence every seed in tests, the simulation and stored guids was drawn from.
        let r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(r.next_u64(), 0x06c4_5d18_8009_454f);
    }

    #[test]
    fn same_seed_same_sequence_and_clone_continues() {
        let (a, b, c) = (Rng::new(42), Rng::new(42), Rng::new(43));
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        let zs: Vec<u64> = (0..8).map(|_| c.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs, zs);
        let d = a.clone();
        assert_eq!(a.next_u64(), d.next_u64());
    }

    #[test]
    fn below_chance_one_in_and_fill() {
        let r = Rng::new(7);
        assert!((0..1000).all(|_| r.below(10) < 10));
        assert_eq!(r.below(0), 0);
        assert!(!(0..1000).any(|_| r.chance(0.0)));
        assert!((0..1000).all(|_| r.chance(1.0)));
        assert!((0..1000).all(|_| r.one_in(1)));
        let hits = (0..10_000).filter(|_| r.one_in(4)).count();
        assert!((2_000..3_000).contains(&hits), "one in four: {hits} of 10000");
        let mut buf = [0u8; 13];
        let (x, y) = (Rng::new(9), Rng::new(9));
        x.fill(&mut buf);
        assert_eq!(buf[..8], y.next_u64().to_le_bytes());
        assert_eq!(buf[8..], y.next_u64().to_le_bytes()[..5]);
    }

    #[test]
    fn concurrent_callers_get_distinct_values() {
        let r = std::sync::Arc::new(Rng::new(1));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let r = r.clone();
                std::thread::spawn(move || (0..1000).map(|_| r.next_u64()).collect::<Vec<_>>())
            })
            .collect();
        let mut all: Vec<u64> = threads.into_iter().flat_map(|t| t.join().expect("t")).collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 4000);
    }
}
