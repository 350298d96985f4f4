//! Samples a store's byte counters while a run goes on, so the report can draw uploaded (or
//! downloaded) MiB over time: a steady line for raw PUTs, steps for txg-sized batches.

use crate::stats::MIB;
use fardisk_engine::clock::Clock;
use fardisk_engine::objstore::StoreStats;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Time between samples.
const SAMPLE_INTERVAL_MS: u64 = 250;
/// At most this many samples (about 40 minutes at 4 per second): a bounded series.
const SAMPLES_MAX: usize = 10_000;

#[derive(Debug, Clone, Copy)]
pub enum Direction {
    Put,
    Get,
}

/// A running sampler; `finish` stops it and returns the points.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<(f64, f64)>>,
}

impl Sampler {
    /// Starts sampling `stats` now; the first point is (0, 0).
    pub fn start(stats: Arc<StoreStats>, direction: Direction, clock: Arc<dyn Clock>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let bytes = |s: &StoreStats| {
                let op = match direction {
                    Direction::Put => &s.put,
                    Direction::Get => &s.get,
                };
                op.bytes.load(Ordering::Relaxed)
            };
            let (t0, b0) = (clock.mono_us(), bytes(&stats));
            let mut points = vec![(0.0, 0.0)];
            while !flag.load(Ordering::Relaxed) && points.len() < SAMPLES_MAX {
                clock.sleep(Duration::from_millis(SAMPLE_INTERVAL_MS)).await;
                let t = (clock.mono_us() - t0) as f64 / 1e6;
                points.push((t, (bytes(&stats) - b0) as f64 / MIB));
            }
            points
        });
        Sampler { stop, task }
    }

    pub async fn finish(self) -> Vec<(f64, f64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or_default()
    }
}

/// Time between samples of the bytes in flight: short beside a 16 MiB GET (tens of ms).
const IN_FLIGHT_INTERVAL_MS: u64 = 5;
/// Below this many MiB of ranged GETs under way the store is less than half as busy as the raw
/// reader keeps it (8 GETs of 16 MiB = 128 MiB): the share of samples below it shows the bubbles.
pub const IN_FLIGHT_LOW_MIB: f64 = 48.0;

/// How much a reader kept the store busy: the ranged GET bytes under way, sampled.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct InFlight {
    pub mean_mib: f64,
    /// Share of the samples with less than `IN_FLIGHT_LOW_MIB` under way, in percent.
    pub low_pct: f64,
}

/// A running sampler of `StoreStats::get.ranged_bytes_in_flight`; keeps sums, not samples.
pub struct InFlightSampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<InFlight>,
}

impl InFlightSampler {
    pub fn start(stats: Arc<StoreStats>, clock: Arc<dyn Clock>) -> InFlightSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let (mut n, mut sum, mut low) = (0u64, 0.0f64, 0u64);
            while !flag.load(Ordering::Relaxed) {
                let mib = stats.get.ranged_bytes_in_flight.load(Ordering::Relaxed) as f64 / MIB;
                n += 1;
                sum += mib;
                low += u64::from(mib < IN_FLIGHT_LOW_MIB);
                clock.sleep(Duration::from_millis(IN_FLIGHT_INTERVAL_MS)).await;
            }
            let n = n.max(1) as f64;
            InFlight { mean_mib: sum / n, low_pct: 100.0 * low as f64 / n }
        });
        InFlightSampler { stop, task }
    }

    pub async fn finish(self) -> InFlight {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or_default()
    }
}
