//! Injected time. Nothing in this crate reads the system clock: the L2ARC's write-rate budget,
//! flush interval and health checks read the [`Clock`] they are given (the engine's, shared
//! through `fardisk-common`), so tests and the simulation drive time by hand.

pub use fardisk_common::clock::{Clock, ManualClock, SystemClock};

/// The system clock under the name this crate gave it before the clock was shared (kept for
/// the daemon, which another branch is rewriting; new code says `SystemClock`).
pub type MonotonicClock = SystemClock;
