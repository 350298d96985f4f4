//! What one timed run measured, and the arithmetic that turns runs into reported numbers
//! (throughput, requests per GiB, medians, ratios). Pure functions, unit-tested.

use fardisk_engine::objstore::StoreStatsSnapshot;

pub const MIB: f64 = 1024.0 * 1024.0;
pub const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Store requests issued during a timed window: the difference of two snapshots.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requests {
    pub puts: u64,
    pub put_bytes: u64,
    pub gets: u64,
    pub get_bytes: u64,
    pub heads: u64,
    pub lists: u64,
    pub deletes: u64,
    pub errors: u64,
}

impl Requests {
    pub fn between(before: &StoreStatsSnapshot, after: &StoreStatsSnapshot) -> Requests {
        let errors = |s: &StoreStatsSnapshot| {
            s.put.errors + s.get.errors + s.head.errors + s.list.errors + s.delete.errors
        };
        Requests {
            puts: after.put.requests - before.put.requests,
            put_bytes: after.put.bytes - before.put.bytes,
            gets: after.get.requests - before.get.requests,
            get_bytes: after.get.bytes - before.get.bytes,
            heads: after.head.requests - before.head.requests,
            lists: after.list.requests - before.list.requests,
            deletes: after.delete.requests - before.delete.requests,
            errors: errors(after) - errors(before),
        }
    }
}

/// One timed run: `logical_bytes` moved by the workload in `elapsed_us`.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    pub logical_bytes: u64,
    pub elapsed_us: u64,
    pub requests: Requests,
    /// (seconds since start, MiB moved so far), sampled while the run went on.
    pub progress: Vec<(f64, f64)>,
    /// Ranged GET bytes under way while it ran, where sampled (the engine's reads).
    pub in_flight: Option<crate::progress::InFlight>,
}

impl Sample {
    /// A run's sample without bytes-under-way figures (writes, raw reads).
    pub fn new(
        logical_bytes: u64,
        elapsed_us: u64,
        requests: Requests,
        progress: Vec<(f64, f64)>,
    ) -> Sample {
        Sample { logical_bytes, elapsed_us, requests, progress, in_flight: None }
    }
    pub fn mib_per_s(&self) -> f64 {
        mib_per_s(self.logical_bytes, self.elapsed_us)
    }
    pub fn elapsed_s(&self) -> f64 {
        self.elapsed_us as f64 / 1e6
    }
}

pub fn mib_per_s(bytes: u64, elapsed_us: u64) -> f64 {
    if elapsed_us == 0 {
        return 0.0;
    }
    bytes as f64 / MIB / (elapsed_us as f64 / 1e6)
}

/// `count` events while moving `bytes`, scaled to one GiB.
pub fn per_gib(count: u64, bytes: u64) -> f64 {
    if bytes == 0 {
        return 0.0;
    }
    count as f64 * GIB / bytes as f64
}

/// `part` as a percentage of `whole` (0 when there is no whole).
pub fn percent(part: f64, whole: f64) -> f64 {
    if whole <= 0.0 {
        return 0.0;
    }
    100.0 * part / whole
}

/// The median; the mean of the middle two for an even count; None for no values. NaNs sort last.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 { v[mid] } else { (v[mid - 1] + v[mid]) / 2.0 })
}

/// Rounds for JSON output: enough digits to compare runs, none that pretend to be precise.
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[7.5]), Some(7.5));
        assert_eq!(median(&[]), None);
        // An outlier moves the mean, not the median.
        assert_eq!(median(&[100.0, 101.0, 1.0]), Some(100.0));
    }

    #[test]
    fn throughput_and_per_gib() {
        assert_eq!(mib_per_s(512 << 20, 2_000_000), 256.0);
        assert_eq!(mib_per_s(1, 0), 0.0);
        assert_eq!(per_gib(64, 1 << 30), 64.0);
        assert_eq!(per_gib(32, 512 << 20), 64.0);
        assert_eq!(per_gib(5, 0), 0.0);
        assert_eq!(percent(80.0, 100.0), 80.0);
        assert_eq!(percent(1.0, 0.0), 0.0);
        assert_eq!(round3(1.23456), 1.235);
    }

    #[test]
    fn requests_are_the_difference_of_snapshots() {
        let mut before = StoreStatsSnapshot::default();
        (before.put.requests, before.put.bytes) = (2, 100);
        (before.get.requests, before.get.bytes, before.get.errors) = (5, 50, 1);
        let mut after = before.clone();
        (after.put.requests, after.put.bytes, after.put.errors) = (10, 900, 1);
        (after.get.requests, after.get.bytes) = (6, 80);
        after.list.requests = 1;
        let r = Requests::between(&before, &after);
        assert_eq!(
            (r.puts, r.put_bytes, r.gets, r.get_bytes, r.lists, r.errors),
            (8, 800, 1, 30, 1, 1)
        );
    }
}
