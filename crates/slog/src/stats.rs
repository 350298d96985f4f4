//! Counters of the log: sync requests, device writes (their ratio shows how well group commit
//! works), bytes and records logged, a commit latency histogram and space use.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds (inclusive) of the latency buckets, in microseconds.
pub const LATENCY_BUCKETS_US: [u64; 16] = [
    25,
    50,
    100,
    200,
    500,
    1_000,
    2_000,
    5_000,
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    u64::MAX,
];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LatencyBucket {
    pub le_us: u64,
    pub count: u64,
}

/// A snapshot of the log's counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogStats {
    /// `commit` calls.
    pub sync_requests: u64,
    /// Commit batches written (one device write per healthy leg each).
    pub device_writes: u64,
    /// fdatasync calls issued to legs (batches, heads, resilvering).
    pub leg_flushes: u64,
    /// Blocks written ahead of a flush (records of plain writes, `IntentLog::write_ahead`);
    /// also counted in `device_writes`.
    pub blocks_written_ahead: u64,
    /// Commits that found their records written ahead and needed only the flush.
    pub flushes_without_write: u64,
    pub bytes_logged: u64,
    pub records_logged: u64,
    pub log_full_events: u64,
    pub commit_errors: u64,
    pub latency_histogram_us: Vec<LatencyBucket>,
    /// Sum of all commit latencies (with the histogram's count, the mean; Prometheus' `_sum`).
    pub latency_us_total: u64,
    pub space_used_bytes: u64,
    pub space_total_bytes: u64,
}

impl LogStats {
    /// Sync requests served per device write (1.0 without batching, higher with).
    pub fn group_commit_ratio(&self) -> f64 {
        if self.device_writes == 0 {
            return 0.0;
        }
        self.sync_requests as f64 / self.device_writes as f64
    }
}

#[derive(Debug, Default)]
pub(crate) struct StatsCounters {
    pub sync_requests: AtomicU64,
    pub device_writes: AtomicU64,
    pub leg_flushes: AtomicU64,
    pub blocks_written_ahead: AtomicU64,
    pub flushes_without_write: AtomicU64,
    pub bytes_logged: AtomicU64,
    pub records_logged: AtomicU64,
    pub log_full_events: AtomicU64,
    pub commit_errors: AtomicU64,
    latency: [AtomicU64; LATENCY_BUCKETS_US.len()],
    latency_us_total: AtomicU64,
}

impl StatsCounters {
    pub fn add(counter: &AtomicU64, value: u64) {
        counter.fetch_add(value, Ordering::Relaxed);
    }

    pub fn record_latency_us(&self, latency_us: u64) {
        let index = LATENCY_BUCKETS_US
            .iter()
            .position(|&le| latency_us <= le)
            .unwrap_or(LATENCY_BUCKETS_US.len() - 1);
        self.latency[index].fetch_add(1, Ordering::Relaxed);
        self.latency_us_total.fetch_add(latency_us, Ordering::Relaxed);
    }

    pub fn snapshot(&self, space_used_bytes: u64, space_total_bytes: u64) -> LogStats {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        LogStats {
            sync_requests: load(&self.sync_requests),
            device_writes: load(&self.device_writes),
            leg_flushes: load(&self.leg_flushes),
            blocks_written_ahead: load(&self.blocks_written_ahead),
            flushes_without_write: load(&self.flushes_without_write),
            bytes_logged: load(&self.bytes_logged),
            records_logged: load(&self.records_logged),
            log_full_events: load(&self.log_full_events),
            commit_errors: load(&self.commit_errors),
            latency_histogram_us: LATENCY_BUCKETS_US
                .iter()
                .zip(self.latency.iter())
                .map(|(&le_us, count)| LatencyBucket { le_us, count: load(count) })
                .collect(),
            latency_us_total: load(&self.latency_us_total),
            space_used_bytes,
            space_total_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_lands_in_the_right_bucket() {
        let stats = StatsCounters::default();
        stats.record_latency_us(0);
        stats.record_latency_us(25);
        stats.record_latency_us(26);
        stats.record_latency_us(u64::MAX);
        let snap = stats.snapshot(0, 0);
        assert_eq!(snap.latency_histogram_us[0].count, 2);
        assert_eq!(snap.latency_histogram_us[1].count, 1);
        assert_eq!(snap.latency_histogram_us[15].count, 1);
    }
}
