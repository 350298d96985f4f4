//! Measures commit latency on real files against the device's own limit (a 4 KiB O_DIRECT
//! write + fdatasync). Usage: cargo run -p fardisk-slog --example commit_latency [dir]

// Real time is the point here: a benchmark: real time is what it measures.
#![allow(clippy::disallowed_methods)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use fardisk_slog::{
    FileDevice, FileProvider, FormatOptions, IntentLog, LogDevice, LogRecord, OpenOptions,
    RecordKind, VdevSpec,
};

const ROUNDS: usize = 2000;

fn percentiles(mut samples_us: Vec<u64>) -> String {
    samples_us.sort_unstable();
    let at = |p: usize| samples_us[(samples_us.len() * p / 100).min(samples_us.len() - 1)];
    format!(
        "p50 {} µs, p99 {} µs, avg {} µs",
        at(50),
        at(99),
        samples_us.iter().sum::<u64>() / samples_us.len() as u64
    )
}

fn record(id: u64) -> LogRecord {
    LogRecord {
        txg: 1,
        volume_id: 0,
        kind: RecordKind::Write,
        offset_bytes: id * 4096,
        length_bytes: 4096,
        data: Bytes::from(vec![id as u8; 4096]),
    }
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("slog-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let raw = FileDevice::create(&dir.join("raw"), 64 << 20, true).expect("raw device");
    let buf = fardisk_slog::AlignedBuf::zeroed(4096);
    let raw_us: Vec<u64> = (0..ROUNDS)
        .map(|i| {
            let start = Instant::now();
            raw.write_at(16384 + (i as u64 % 1000) * 4096, &buf).expect("write");
            raw.flush().expect("fdatasync");
            start.elapsed().as_micros() as u64
        })
        .collect();
    println!(
        "device limit (4 KiB O_DIRECT={} write + fdatasync): {}",
        raw.is_direct(),
        percentiles(raw_us)
    );

    let raw2 = FileDevice::create(&dir.join("raw2"), 64 << 20, true).expect("raw device 2");
    let pair_us: Vec<u64> = (0..ROUNDS)
        .map(|i| {
            let start = Instant::now();
            let offset = 16384 + (i as u64 % 1000) * 4096;
            std::thread::scope(|scope| {
                let other = scope.spawn(|| {
                    raw2.write_at(offset, &buf).expect("write");
                    raw2.flush().expect("fdatasync");
                });
                raw.write_at(offset, &buf).expect("write");
                raw.flush().expect("fdatasync");
                other.join().expect("join");
            });
            start.elapsed().as_micros() as u64
        })
        .collect();
    println!(
        "two files on the same file system, written and flushed in parallel: {}",
        percentiles(pair_us)
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    for (name, spec) in [
        ("single", VdevSpec::Single(dir.join("a"))),
        ("mirror", VdevSpec::Mirror(vec![dir.join("b0"), dir.join("b1")])),
    ] {
        let mut fopts = FormatOptions::new(Arc::new(FileProvider::default()), 42);
        fopts.size_bytes = 64 << 20;
        let config = IntentLog::format("bench", 1, &spec, &fopts).expect("format");
        let log = Arc::new(
            IntentLog::open("bench", 1, &[config], &OpenOptions::default()).expect("open"),
        );
        let samples: Vec<u64> = (0..ROUNDS as u64)
            .map(|id| {
                let start = Instant::now();
                rt.block_on(log.commit(vec![record(id)])).expect("commit");
                if id % 256 == 255 {
                    log.release_through_txg(1);
                }
                start.elapsed().as_micros() as u64
            })
            .collect();
        println!("{name}: sequential 4 KiB commits: {}", percentiles(samples));
        log.release_through_txg(1);
        let before = log.stats();
        let start = Instant::now();
        rt.block_on(async {
            let tasks: Vec<_> = (0..16u64)
                .map(|t| {
                    let log = Arc::clone(&log);
                    tokio::spawn(async move {
                        for i in 0..100 {
                            log.commit(vec![record(10_000 + t * 100 + i)]).await.expect("commit");
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.expect("task");
            }
        });
        let after = log.stats();
        let commits = after.sync_requests - before.sync_requests;
        let writes = after.device_writes - before.device_writes;
        println!(
            "{name}: 16 concurrent committers: {commits} commits in {:?}, {writes} device writes ({:.1} commits per write)",
            start.elapsed(),
            commits as f64 / writes as f64
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
