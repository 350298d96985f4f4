//! Injected randomness: a small seeded generator (SplitMix64) so every random choice in the engine
//! (jitter, ids, simulated faults) replays from a seed.

use parking_lot::Mutex;

#[derive(Debug)]
pub struct Rng {
    state: Mutex<u64>,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng { state: Mutex::new(seed) }
    }

    /// Seeded from the OS for production use; tests pass their own seed.
    pub fn from_entropy() -> Rng {
        let mut seed = [0u8; 8];
        // getrandom(2) cannot fail for 8 bytes once the pool is initialised; fall back to the pid.
        // SAFETY: the pointer and length describe `seed`, a live, writable 8-byte buffer.
        let got = unsafe { libc::getrandom(seed.as_mut_ptr().cast(), seed.len(), 0) };
        if got != 8 {
            seed = (std::process::id() as u64).to_le_bytes();
        }
        Rng::new(u64::from_le_bytes(seed))
    }

    pub fn next_u64(&self) -> u64 {
        let mut s = self.state.lock();
        *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn next_u128(&self) -> u128 {
        ((self.next_u64() as u128) << 64) | self.next_u64() as u128
    }

    /// Uniform in `0..bound` (bound > 0).
    pub fn below(&self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }

    /// True with probability `p` (0.0..=1.0).
    pub fn chance(&self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p && p > 0.0
    }
}
