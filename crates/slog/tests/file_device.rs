//! The log on real files (O_DIRECT where the file system allows it, fdatasync).

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use fardisk_slog::{
    FileDevice, FileProvider, FormatOptions, IntentLog, LogDevice, OpenOptions, VdevSpec,
};

struct TempDir(PathBuf);

impl TempDir {
    fn new(base: &Path, name: &str) -> Self {
        let dir = base.join(format!("fardisk-slog-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn format_files(dir: &Path, size_bytes: u64) -> fardisk_slog::VdevConfig {
    let mut opts = FormatOptions::new(Arc::new(FileProvider::default()), 11);
    opts.size_bytes = size_bytes;
    let spec = VdevSpec::Mirror(vec![dir.join("log-a"), dir.join("log-b")]);
    IntentLog::format(POOL, POOL_GUID, &spec, &opts).expect("format files")
}

#[test]
fn log_on_real_files_survives_reopen() {
    let rt = runtime();
    let dir = TempDir::new(&std::env::temp_dir(), "files");
    let config = format_files(&dir.0, 4 << 20);
    assert_eq!(std::fs::metadata(dir.0.join("log-a")).expect("created").len(), 4 << 20);
    let opts = OpenOptions::new(Arc::new(FileProvider::default()));
    let batches: Vec<Vec<_>> = (0..16u64)
        .map(|i| {
            vec![
                record(1 + i / 4, i * 2, 1 + (i as usize * 997) % 9000),
                record(1 + i / 4, i * 2 + 1, 0),
            ]
        })
        .collect();
    {
        let log = Arc::new(
            IntentLog::open(POOL, POOL_GUID, std::slice::from_ref(&config), &opts).expect("open"),
        );
        let results = rt.block_on(commit_all(&log, batches.clone()));
        assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
        log.release_through_txg(1);
    }
    let log = IntentLog::open(POOL, POOL_GUID, &[config], &opts).expect("reopen");
    let replay = replay_checked(&log, 1).expect("replay");
    let mut got: Vec<_> = replay.records.iter().map(|r| r.record.clone()).collect();
    let mut want: Vec<_> = batches.into_iter().flatten().filter(|r| r.txg > 1).collect();
    got.sort_by_key(|r| r.offset_bytes);
    want.sort_by_key(|r| r.offset_bytes);
    assert_eq!(got, want);
    assert!(log.status()[0].legs.iter().all(|l| l.state == fardisk_slog::HealthState::Online));
}

#[test]
fn file_device_direct_io_and_unaligned_buffers() {
    let dir = TempDir::new(&std::env::temp_dir(), "direct");
    let path = dir.0.join("dev");
    let device = FileDevice::create(&path, 1 << 20, true).expect("create");
    assert_eq!(device.len_bytes(), 1 << 20);
    // A Vec is not 4 KiB aligned: the device bounces it through an aligned buffer.
    let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
    device.write_at(4096, &data[..4096]).expect("write");
    device.write_at(8192, &data[4096..]).expect("write");
    device.flush().expect("fdatasync");
    let mut back = vec![0u8; 8192];
    device.read_at(4096, &mut back).expect("read");
    assert_eq!(back, data);
    eprintln!("O_DIRECT in use on {}: {}", std::env::temp_dir().display(), device.is_direct());
    let unit = device.write_unit_bytes();
    eprintln!("write unit (physical sector) of {}: {unit}", std::env::temp_dir().display());
    assert!(unit.is_power_of_two() && (512..=4096).contains(&unit), "{unit}");
    // A version 2 block may end on any sector: a 4.5 KiB write from an aligned buffer.
    let block = fardisk_slog::AlignedBuf::zeroed_sectors(4608);
    device.write_at(16384 + 512, &block).expect("sector-granular write");
    let buffered = FileDevice::open(&path, false).expect("open buffered");
    assert!(!buffered.is_direct());
    let mut again = vec![0u8; 8192];
    buffered.read_at(4096, &mut again).expect("read");
    assert_eq!(again, data);
}

#[test]
fn log_on_tmpfs_is_flagged_volatile() {
    let shm = Path::new("/dev/shm");
    if !fardisk_slog::device::is_volatile_path(shm) {
        eprintln!("/dev/shm is not tmpfs here; nothing to check");
        return;
    }
    let dir = TempDir::new(shm, "volatile");
    let config = format_files(&dir.0, 1 << 20);
    let log = IntentLog::open(
        POOL,
        POOL_GUID,
        &[config],
        &OpenOptions::new(Arc::new(FileProvider::default())),
    )
    .expect("open on tmpfs");
    assert!(log.status()[0].legs.iter().all(|l| l.volatile));
    runtime()
        .block_on(log.commit(vec![record(1, 1, 4000)]))
        .expect("commit on tmpfs (buffered fallback if needed)");
}

/// The coarse clock the kernel stamps file times from: (seconds, nanoseconds).
fn coarse_now() -> (i64, i64) {
    // SAFETY: clock_gettime writes into a zeroed timespec we own.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above; CLOCK_REALTIME_COARSE exists on every Linux this crate runs on.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_REALTIME_COARSE)");
    #[allow(clippy::unnecessary_cast)]
    (ts.tv_sec as i64, ts.tv_nsec as i64)
}

/// The file's modification time, (seconds, nanoseconds); fetching it marks the time as queried.
fn mtime_of(path: &Path) -> (i64, i64) {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).expect("stat");
    (meta.mtime(), meta.mtime_nsec())
}

/// A flush must not fetch the log file's times. Since Linux 6.13 (multigrain timestamps) a
/// fetched change time makes the next write take a fine-grained time, so every log write after
/// a flush changed the inode, and on ext4 without a journal every commit's fdatasync wrote the
/// inode block too: one more disk request per commit (docs/design/0004). A write that finds the
/// times unfetched takes the coarse clock's tick and, within one tick, changes nothing.
///
/// Each round: start a new clock tick, write, flush, write again, and (if the tick has not moved
/// on) read the time the last write left. A fine-grained time lies past the tick's start; a
/// coarse one is the tick. On a kernel without multigrain times every write is coarse and the
/// test has nothing to tell apart; a host file system that does not keep nanoseconds is skipped.
#[test]
fn flush_does_not_fetch_file_times() {
    let dir = TempDir::new(&std::env::temp_dir(), "times");
    let path = dir.0.join("dev");
    let device = FileDevice::create(&path, 1 << 20, true).expect("create");
    let block = fardisk_slog::AlignedBuf::zeroed_sectors(4096);
    const ROUNDS_WANTED: usize = 40;
    const ATTEMPTS_MAX: usize = 400;
    // Rounds alternate: with a flush between the two writes, and without (the control). Another
    // process's fine-grained time in the same tick lifts the coarse one for every file (the
    // kernel's floor), which makes a write look fine-grained with or without a flush; the
    // control counts how often that happens here.
    let (mut rounds, mut fine) = ([0usize; 2], [0usize; 2]);
    for attempt in 0..ATTEMPTS_MAX {
        if rounds[0] >= ROUNDS_WANTED && rounds[1] >= ROUNDS_WANTED {
            break;
        }
        let with_flush = attempt % 2;
        // Leave the file's times unfetched: this write takes a fine-grained time (the stat just
        // now queried them) and clears the mark.
        let _ = mtime_of(&path);
        device.write_at(0, &block).expect("write");
        // Wait for the next tick (a few ms at most; bounded), so the round fits in one.
        let start = coarse_now();
        let mut tick = start;
        for _ in 0..1_000_000 {
            tick = coarse_now();
            if tick != start {
                break;
            }
            std::hint::spin_loop();
        }
        if tick == start {
            continue;
        }
        device.write_at(4096, &block).expect("write before the flush");
        if with_flush == 1 {
            device.flush().expect("flush");
        }
        device.write_at(8192, &block).expect("write after the flush");
        if coarse_now() != tick {
            continue; // the tick moved on during the round: it tells nothing
        }
        let mtime = mtime_of(&path);
        if mtime.1 % 1000 == 0 && tick.1 % 1000 != 0 {
            eprintln!("{} keeps no nanoseconds; nothing to check", std::env::temp_dir().display());
            return;
        }
        rounds[with_flush] += 1;
        if mtime > tick {
            fine[with_flush] += 1;
        }
    }
    eprintln!(
        "writes that took a fine-grained time: {} of {} rounds after a flush, {} of {} without",
        fine[1], rounds[1], fine[0], rounds[0]
    );
    assert!(
        rounds.iter().all(|&r| r >= ROUNDS_WANTED / 2),
        "only {rounds:?} rounds fitted in a tick"
    );
    if fine[0] * 2 >= rounds[0] {
        eprintln!(
            "another process lifts the clock floor in most ticks here; nothing to tell apart"
        );
        return;
    }
    // A flush that fetches the times makes every round after it count.
    assert!(
        fine[1] * 2 < rounds[1],
        "{} of {} writes after a flush took a fine-grained time ({} of {} without): the flush fetched the file's times",
        fine[1], rounds[1], fine[0], rounds[0]
    );
}
