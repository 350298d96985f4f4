//! Injected randomness: every random choice in the engine (jitter, ids, simulated faults) comes
//! from a seeded [`Rng`] (`fardisk-common`), so it replays from `Env::seed`.

pub use fardisk_common::rng::*;
