//! The measurement behind docs/design/0002-fuse-caching.md (ignored by default: it takes
//! minutes and its numbers are for reading, not asserting). Run it alone:
//!
//!     cargo test -p fardisk --release --test fuse_bench -- --ignored --nocapture
//!
//! For each kernel caching mode of the mount and each loop-device mode, it builds the stack
//! users run (ext4 on a loop device on the image, over an in-memory device so the numbers
//! are the front end's own cost) and runs fio: 4 KiB random writes with an fsync after each,
//! and 4 KiB random O_DIRECT reads. It also counts the device flushes per fio fsync, the
//! correctness side of the choice. FIO_RUNTIME_S sets the seconds per job (default 10),
//! FUSE_BENCH_ROUNDS how many times every mode is measured (default 1).

mod fuse_support;

use std::path::Path;
use std::sync::Arc;

use fardisk::fuse::FuseOptions;
use fardisk_nbd::MemDevice;
use fuse_support::{run, FsMount, LoopDevice, Mounted, TempDir, TestProvider};
use serde_json::Value;

const VOLUME_BYTES: u64 = 2 << 30;
const FIO_FILE: &str = "256M";

struct JobResult {
    iops: f64,
    latency_us: f64,
    fsync_us: f64,
    fsyncs: u64,
}

fn fio(dir: &Path, rw: &str, extra: &[&str], runtime_s: u64) -> JobResult {
    fio_on(&dir.join("fio.dat"), rw, extra, runtime_s)
}

fn fio_on(filename: &Path, rw: &str, extra: &[&str], runtime_s: u64) -> JobResult {
    let runtime = format!("--runtime={runtime_s}");
    let filename_arg = format!("--filename={}", filename.display());
    let mut args = vec![
        "--name=job",
        filename_arg.as_str(),
        "--size",
        FIO_FILE,
        "--bs=4k",
        "--ioengine=psync",
        "--time_based",
        runtime.as_str(),
        "--randseed=42",
        "--output-format=json",
    ];
    let rw_arg = format!("--rw={rw}");
    args.push(&rw_arg);
    args.extend_from_slice(extra);
    let output = run("fio", &args);
    let start = output.find('{').expect("fio json");
    let json: Value = serde_json::from_str(&output[start..]).expect("parse fio json");
    let job = &json["jobs"][0];
    let side = if rw.contains("write") { &job["write"] } else { &job["read"] };
    JobResult {
        iops: side["iops"].as_f64().unwrap_or(0.0),
        latency_us: side["clat_ns"]["mean"].as_f64().unwrap_or(0.0) / 1000.0,
        fsync_us: job["sync"]["lat_ns"]["mean"].as_f64().unwrap_or(0.0) / 1000.0,
        fsyncs: job["sync"]["total_ios"].as_u64().unwrap_or(0),
    }
}

fn measure(direct_io: bool, writeback_cache: bool, loop_direct_io: bool, runtime_s: u64) {
    let provider = Arc::new(TestProvider::default());
    let device = Arc::new(MemDevice::new(VOLUME_BYTES));
    provider.add("vol", device.clone());
    let options = FuseOptions { direct_io, writeback_cache, ..FuseOptions::default() };
    let mut mounted = Mounted::new("bench", provider, options);
    let fs_dir = TempDir::new("bench-mnt");
    {
        let loop_device = LoopDevice::attach(&mounted.image("vol"), loop_direct_io);
        let dio = loop_device.dio_state();
        run("mkfs.ext4", &["-q", &loop_device.device]);
        let _ext4 = FsMount::mount(&loop_device.device, &fs_dir.path);
        // Lay the file out first so the measured writes overwrite allocated blocks.
        run(
            "fio",
            &[
                "--name=layout",
                &format!("--filename={}", fs_dir.path.join("fio.dat").display()),
                "--size",
                FIO_FILE,
                "--rw=write",
                "--bs=1M",
                "--end_fsync=1",
            ],
        );
        let flushes_before = device.stats().flushes;
        let write = fio(&fs_dir.path, "randwrite", &["--fsync=1"], runtime_s);
        let flushes = device.stats().flushes - flushes_before;
        let read = fio(&fs_dir.path, "randread", &["--direct=1"], runtime_s);
        println!(
            "| {direct_io} | {writeback_cache} | {loop_direct_io} (dio={dio}) | {:.0} | {:.1} | {:.1} | {:.2} | {:.0} | {:.1} |",
            write.iops,
            write.latency_us,
            write.fsync_us,
            flushes as f64 / write.fsyncs.max(1) as f64,
            read.iops,
            read.latency_us,
        );
    }
    mounted.unmount();
}

#[test]
#[ignore = "minutes of fio; run explicitly for docs/design/0002-fuse-caching.md"]
fn caching_modes_under_fio() {
    fuse_support::require_fuse();
    let env_u64 = |name: &str, default: u64| {
        std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
    };
    let runtime_s = env_u64("FIO_RUNTIME_S", 10);
    let rounds = env_u64("FUSE_BENCH_ROUNDS", 1);
    println!("| direct_io | writeback_cache | loop direct-io | randwrite fsync=1 IOPS | write lat µs | fsync lat µs | flushes per fsync | randread IOPS | read lat µs |");
    println!("|---|---|---|---|---|---|---|---|---|");
    // Rounds interleave the modes so that load from other work on a shared machine spreads
    // over all of them instead of penalising one.
    for _round in 0..rounds {
        for (direct_io, writeback_cache) in [(true, false), (false, false), (false, true)] {
            for loop_direct_io in [true, false] {
                measure(direct_io, writeback_cache, loop_direct_io, runtime_s);
            }
        }
    }
}

/// The front end alone: fio straight on the image (no loop device, no ext4), O_DIRECT.
#[test]
#[ignore = "minutes of fio; run explicitly for docs/design/0002-fuse-caching.md"]
fn raw_image_under_fio() {
    fuse_support::require_fuse();
    let env_u64 = |name: &str, default: u64| {
        std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
    };
    let runtime_s = env_u64("FIO_RUNTIME_S", 10);
    let rounds = env_u64("FUSE_BENCH_ROUNDS", 1);
    println!("| direct_io | writeback_cache | randwrite fsync=1 IOPS | write lat µs | fsync lat µs | flushes per fsync | randread IOPS | read lat µs |");
    println!("|---|---|---|---|---|---|---|---|");
    for _round in 0..rounds {
        for (direct_io, writeback_cache) in [(true, false), (false, false), (false, true)] {
            let options = FuseOptions { direct_io, writeback_cache, ..FuseOptions::default() };
            let (mut mounted, device) = Mounted::with_mem_volume("raw", "vol", 256 << 20, options);
            let image = mounted.image("vol");
            let flushes_before = device.stats().flushes;
            let write = fio_on(&image, "randwrite", &["--fsync=1", "--direct=1"], runtime_s);
            let flushes = device.stats().flushes - flushes_before;
            let read = fio_on(&image, "randread", &["--direct=1"], runtime_s);
            println!(
                "| {direct_io} | {writeback_cache} | {:.0} | {:.1} | {:.1} | {:.2} | {:.0} | {:.1} |",
                write.iops,
                write.latency_us,
                write.fsync_us,
                flushes as f64 / write.fsyncs.max(1) as f64,
                read.iops,
                read.latency_us,
            );
            mounted.unmount();
        }
    }
}
