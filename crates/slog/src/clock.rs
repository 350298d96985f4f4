//! Injected time: the commit latency histogram reads a [`Clock`], never the wall clock, so
//! tests can drive it deterministically.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Monotonic microseconds since an arbitrary origin.
pub trait Clock: Send + Sync {
    fn now_us(&self) -> u64;
}

/// The production clock: a monotonic `Instant` taken when the clock was created.
#[derive(Debug)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    pub fn new() -> Self {
        Self { origin: Instant::now() }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now_us(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
}

/// A clock that only moves when told to (tests).
#[derive(Debug, Default)]
pub struct ManualClock {
    now_us: AtomicU64,
}

impl ManualClock {
    pub fn new(start_us: u64) -> Self {
        Self { now_us: AtomicU64::new(start_us) }
    }

    pub fn advance_us(&self, delta_us: u64) {
        self.now_us.fetch_add(delta_us, Ordering::SeqCst);
    }

    pub fn set_us(&self, now_us: u64) {
        self.now_us.store(now_us, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_us(&self) -> u64 {
        self.now_us.load(Ordering::SeqCst)
    }
}
