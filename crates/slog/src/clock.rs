//! Injected time: the commit latency histogram reads the [`Clock`] of `OpenOptions` (the
//! engine's, shared through `fardisk-common`), never the system clock, so tests and the
//! simulation drive it.

pub use fardisk_common::clock::{Clock, ManualClock, SystemClock};
