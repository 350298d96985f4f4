//! Injected time: the engine reads time and sleeps only through the pool's `Env::clock`, so a
//! simulation can replay a failure exactly with a [`ManualClock`]. The clock is shared with the
//! intent log and the caches (`fardisk-common`); this path is kept for the engine's users.

pub use fardisk_common::clock::*;
