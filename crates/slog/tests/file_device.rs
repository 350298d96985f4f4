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
