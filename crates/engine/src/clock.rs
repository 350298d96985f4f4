//! Injected time. Engine code never calls `SystemTime::now` or `tokio::time::sleep` directly, so a
//! simulation can replay a failure exactly with a [`ManualClock`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[async_trait::async_trait]
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch (wall time, stored in roots for operators).
    fn wall_ms(&self) -> u64;
    /// Monotonic microseconds since an arbitrary origin (for latency and rates).
    fn mono_us(&self) -> u64;
    async fn sleep(&self, duration: Duration);
}

/// The real clock.
#[derive(Debug)]
pub struct SystemClock {
    origin: std::time::Instant,
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock { origin: std::time::Instant::now() }
    }
}

#[async_trait::async_trait]
impl Clock for SystemClock {
    fn wall_ms(&self) -> u64 {
        #[allow(clippy::disallowed_methods)] // The one place wall time enters the engine.
        let now = std::time::SystemTime::now();
        now.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
    }
    fn mono_us(&self) -> u64 {
        self.origin.elapsed().as_micros() as u64
    }
    async fn sleep(&self, duration: Duration) {
        #[allow(clippy::disallowed_methods)]
        tokio::time::sleep(duration).await
    }
}

/// A clock that only moves when told to; `sleep` advances it instead of waiting, so simulated
/// latency and backoff cost no real time and replay identically.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_us: AtomicU64,
}

impl ManualClock {
    pub fn advance(&self, duration: Duration) {
        self.now_us.fetch_add(duration.as_micros() as u64, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl Clock for ManualClock {
    fn wall_ms(&self) -> u64 {
        1_700_000_000_000 + self.now_us.load(Ordering::SeqCst) / 1000
    }
    fn mono_us(&self) -> u64 {
        self.now_us.load(Ordering::SeqCst)
    }
    async fn sleep(&self, duration: Duration) {
        self.advance(duration);
        tokio::task::yield_now().await;
    }
}
