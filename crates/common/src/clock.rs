//! Injected time. Library code (engine, intent log, caches) never reads the system clock or
//! sleeps on its own: it asks a [`Clock`], so a simulation can replay a failure exactly with a
//! [`ManualClock`], and one manual clock drives every crate at once. `clippy.toml` makes this a
//! gate: `SystemTime::now`, `Instant::now` and the sleeps are disallowed everywhere but in
//! [`SystemClock`] and in code where real time is the point (CLI, daemon, benchmarks, tests).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A source of time: wall time for what operators read, monotonic time for latencies, rates and
/// deadlines, and a sleep that costs no real time on a manual clock.
#[async_trait::async_trait]
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch (wall time: stored in roots and events for operators,
    /// never used to order anything).
    fn wall_ms(&self) -> u64;
    /// Monotonic microseconds since an arbitrary origin (latencies, rates, deadlines).
    fn mono_us(&self) -> u64;
    /// Monotonic milliseconds: [`Clock::mono_us`] / 1000.
    fn mono_ms(&self) -> u64 {
        self.mono_us() / 1000
    }
    /// Waits `duration` on this clock.
    async fn sleep(&self, duration: Duration);
}

/// Runs `future` for at most `limit` on `clock`: its output, or `None` if the limit came first
/// (the future is polled first, as `tokio::time::timeout` does). On the system clock this is
/// `tokio::time::timeout`; on a [`ManualClock`] the limit passes, like every manual sleep, as
/// soon as the future is not ready when polled: time skips ahead instead of being waited out.
pub async fn timeout<F: std::future::Future>(
    clock: &dyn Clock,
    limit: Duration,
    future: F,
) -> Option<F::Output> {
    tokio::select! {
        biased;
        out = future => Some(out),
        () = clock.sleep(limit) => None,
    }
}

/// The real clock: wall time from the system, monotonic time from an `Instant` taken when the
/// clock was made. The one place real time enters the library crates.
#[derive(Debug)]
pub struct SystemClock {
    origin: std::time::Instant,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        #[allow(clippy::disallowed_methods)] // The system clock is where real time enters.
        let origin = std::time::Instant::now();
        SystemClock { origin }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

#[async_trait::async_trait]
impl Clock for SystemClock {
    fn wall_ms(&self) -> u64 {
        #[allow(clippy::disallowed_methods)] // The system clock is where wall time enters.
        let now = std::time::SystemTime::now();
        now.duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
    fn mono_us(&self) -> u64 {
        #[allow(clippy::disallowed_methods)] // The system clock is where real time enters.
        let elapsed = self.origin.elapsed();
        u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
    }
    async fn sleep(&self, duration: Duration) {
        #[allow(clippy::disallowed_methods)] // The system clock's sleep is a real one.
        tokio::time::sleep(duration).await
    }
}

/// Wall time of a [`ManualClock`] at monotonic zero (14 November 2023), so wall times in tests
/// look like real ones.
pub const MANUAL_WALL_ORIGIN_MS: u64 = 1_700_000_000_000;

/// A clock that only moves when told to; `sleep` advances it instead of waiting, so simulated
/// latency and backoff cost no real time and replay identically. Tests and the simulation.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_us: AtomicU64,
}

impl ManualClock {
    /// A clock whose monotonic time starts at `start` (`default()` starts at zero).
    pub fn starting_at(start: Duration) -> ManualClock {
        ManualClock { now_us: AtomicU64::new(duration_us(start)) }
    }

    pub fn advance(&self, duration: Duration) {
        self.advance_us(duration_us(duration));
    }

    pub fn advance_us(&self, delta_us: u64) {
        self.now_us.fetch_add(delta_us, Ordering::SeqCst);
    }

    pub fn advance_ms(&self, delta_ms: u64) {
        self.advance_us(delta_ms.saturating_mul(1000));
    }
}

fn duration_us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[async_trait::async_trait]
impl Clock for ManualClock {
    fn wall_ms(&self) -> u64 {
        MANUAL_WALL_ORIGIN_MS + self.mono_us() / 1000
    }
    fn mono_us(&self) -> u64 {
        self.now_us.load(Ordering::SeqCst)
    }
    async fn sleep(&self, duration: Duration) {
        self.advance(duration);
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::starting_at(Duration::from_millis(5));
        assert_eq!(clock.mono_us(), 5_000);
        assert_eq!(clock.mono_ms(), 5);
        clock.advance_ms(2);
        clock.advance_us(3);
        clock.advance(Duration::from_micros(7));
        assert_eq!(clock.mono_us(), 7_010);
        assert_eq!(clock.wall_ms(), MANUAL_WALL_ORIGIN_MS + 7);
        assert_eq!(ManualClock::default().mono_us(), 0);
    }

    #[test]
    fn manual_sleep_advances_instead_of_waiting() {
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let clock = ManualClock::default();
        rt.block_on(clock.sleep(Duration::from_secs(3600)));
        assert_eq!(clock.mono_us(), 3_600_000_000);
    }

    #[test]
    fn timeout_returns_a_ready_output_and_gives_up_on_a_pending_one() {
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let clock = ManualClock::default();
        let limit = Duration::from_secs(30);
        assert_eq!(rt.block_on(timeout(&clock, limit, async { 7 })), Some(7));
        assert_eq!(clock.mono_us(), 0, "a ready future costs no time");
        assert_eq!(rt.block_on(timeout(&clock, limit, std::future::pending::<()>())), None);
        assert_eq!(clock.mono_us(), 30_000_000, "the limit passed on the clock");
    }

    #[test]
    fn system_clock_is_monotonic_and_near_now() {
        let clock = SystemClock::new();
        let (a, b) = (clock.mono_us(), clock.mono_us());
        assert!(b >= a);
        // 2023-11-14 or later: the wall clock is the system's, not a manual one.
        assert!(clock.wall_ms() >= MANUAL_WALL_ORIGIN_MS);
    }
}
