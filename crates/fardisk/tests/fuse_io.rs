//! Reads, writes and syncs on the image through std::fs in every caching mode: bytes at
//! odd offsets and sizes land exactly, fsync reaches (and waits for) the device's flush,
//! and O_DSYNC writes are durable before they return. Real kernel; needs root and /dev/fuse.

// Real time is the point here: the FUSE mount and its writers are real and take real time.
#![allow(clippy::disallowed_methods)]

mod fuse_support;

use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fardisk::fuse::FuseOptions;
use fardisk_nbd::SectorDevice;
use fardisk_nbd::{BlockDevice, MemDevice, PartsDevice};
use fuse_support::devices::GatedDevice;
use fuse_support::{open_rw, transports, AlignedBuf, Mounted, Rng, TestProvider};

const MIB: u64 = 1 << 20;

/// (direct_io, writeback_cache): the caching modes a mount can have.
const MODES: [(bool, bool); 4] = [(true, false), (false, false), (false, true), (true, true)];

fn options(direct_io: bool, writeback_cache: bool) -> FuseOptions {
    FuseOptions { direct_io, writeback_cache, ..FuseOptions::default() }
}

/// Random pwrite/pread at odd offsets and sizes, checked against a model; then fsync and
/// check that the device itself holds exactly the model.
fn random_io_matches_model(
    file: &std::fs::File,
    device: &dyn Fn() -> Vec<u8>,
    size: u64,
    seed: u64,
    label: &str,
) {
    let mut rng = Rng(seed);
    let mut model = vec![0u8; size as usize];
    let mut buf = AlignedBuf::new(40_000);
    for step in 0..150 {
        let length = rng.below(20_000) as usize + 1;
        let offset = rng.below(size - length as u64);
        let range = offset as usize..offset as usize + length;
        if rng.below(3) < 2 {
            rng.fill(&mut buf.as_mut_slice()[..length]);
            file.write_all_at(&buf.as_slice()[..length], offset).unwrap_or_else(|error| {
                panic!("{label} step {step}: write {offset}+{length}: {error}")
            });
            model[range].copy_from_slice(&buf.as_slice()[..length]);
        } else {
            file.read_exact_at(&mut buf.as_mut_slice()[..length], offset).unwrap_or_else(|error| {
                panic!("{label} step {step}: read {offset}+{length}: {error}")
            });
            assert!(
                buf.as_slice()[..length] == model[range],
                "{label} step {step}: read {offset}+{length} differs"
            );
        }
    }
    file.sync_all().unwrap_or_else(|error| panic!("{label}: fsync: {error}"));
    assert!(device() == model, "{label}: device contents differ from what was written");
}

#[test]
fn odd_offsets_and_sizes_land_exactly_in_every_mode() {
    let size = 2 * MIB;
    for (index, (direct_io, writeback_cache)) in MODES.into_iter().enumerate() {
        for o_direct in [false, true] {
            let label =
                format!("direct_io={direct_io} writeback={writeback_cache} O_DIRECT={o_direct}");
            let (mounted, device) =
                Mounted::with_mem_volume("odd", "vol", size, options(direct_io, writeback_cache));
            let flags = if o_direct { libc::O_DIRECT } else { 0 };
            let file = open_rw(&mounted.image("vol"), flags);
            let contents = || device.contents(0, size).expect("contents");
            random_io_matches_model(
                &file,
                &contents,
                size,
                0x5eed + index as u64 * 2 + o_direct as u64,
                &label,
            );
        }
    }
}

#[test]
fn reads_answered_in_parts_arrive_whole_on_both_transports() {
    let size = 2 * MIB;
    for uring in transports("reads_answered_in_parts_arrive_whole_on_both_transports") {
        for (direct_io, part_bytes) in [(true, 4096), (false, 4096), (true, 1000)] {
            let label = format!("uring={uring} direct_io={direct_io} parts of {part_bytes} bytes");
            let provider = Arc::new(TestProvider::default());
            let device = Arc::new(PartsDevice::new(size, part_bytes));
            provider.add("vol", device.clone());
            let options = FuseOptions { uring, ..options(direct_io, false) };
            let mounted = Mounted::with_transport("parts", provider, options);
            let file = open_rw(&mounted.image("vol"), libc::O_DIRECT);
            let contents = || device.inner.contents(0, size).expect("contents");
            random_io_matches_model(&file, &contents, size, 0xa11 + part_bytes as u64, &label);
            // A read of 256 KiB: 64 parts or more in one reply.
            let mut buf = AlignedBuf::new(256 << 10);
            file.read_exact_at(buf.as_mut_slice(), 4096).expect("big read");
            assert!(buf.as_slice() == &contents()[4096..4096 + (256 << 10)], "{label}: big read");
            assert!(device.parts_reads.load(Ordering::SeqCst) > 0, "{label}: read in parts");
        }
    }
}

#[test]
fn unaligned_io_on_a_sector_device_is_read_modify_written() {
    let size = MIB;
    for direct_io in [true, false] {
        for o_direct in [false, true] {
            let label = format!("sector device direct_io={direct_io} O_DIRECT={o_direct}");
            let provider = Arc::new(TestProvider::default());
            let device = Arc::new(SectorDevice::new(size));
            provider.add("vol", device.clone());
            let mounted = Mounted::new("sector", provider, options(direct_io, false));
            let file = open_rw(&mounted.image("vol"), if o_direct { libc::O_DIRECT } else { 0 });
            let contents = || device.inner.contents(0, size).expect("contents");
            random_io_matches_model(&file, &contents, size, 0xa11 + o_direct as u64, &label);
            assert_eq!(
                device.refused.load(Ordering::SeqCst),
                0,
                "{label}: an unaligned request reached the device"
            );
        }
    }
}

#[test]
fn concurrent_writers_on_disjoint_ranges() {
    let size = 4 * MIB;
    let (mounted, device) =
        Mounted::with_mem_volume("concurrent", "vol", size, FuseOptions::default());
    let image = mounted.image("vol");
    let writers: Vec<_> = (0..4u64)
        .map(|writer| {
            let image = image.clone();
            std::thread::spawn(move || {
                let file = open_rw(&image, 0);
                let mut rng = Rng(writer + 1);
                let base = writer * MIB;
                let mut model = vec![0u8; MIB as usize];
                for _ in 0..100 {
                    let length = rng.below(9_000) as usize + 1;
                    let offset = rng.below(MIB - length as u64) as usize;
                    rng.fill(&mut model[offset..offset + length]);
                    file.write_all_at(&model[offset..offset + length], base + offset as u64)
                        .expect("write");
                }
                file.sync_data().expect("fdatasync");
                model
            })
        })
        .collect();
    for (writer, handle) in writers.into_iter().enumerate() {
        let model = handle.join().expect("writer thread");
        let got = device.contents(writer as u64 * MIB, MIB).expect("contents");
        assert!(got == model, "writer {writer}'s range differs");
    }
}

#[test]
fn fsync_and_fdatasync_reach_flush_in_every_mode() {
    for uring in fuse_support::transports("fsync_and_fdatasync_reach_flush_in_every_mode") {
        for (direct_io, writeback_cache) in MODES {
            fsync_reaches_flush(FuseOptions { uring, ..options(direct_io, writeback_cache) });
        }
    }
}

fn fsync_reaches_flush(options: FuseOptions) {
    {
        let label = format!(
            "uring={} direct_io={} writeback={}",
            options.uring, options.direct_io, options.writeback_cache
        );
        let (mounted, device) = Mounted::with_mem_volume("fsync", "vol", MIB, options);
        let file = open_rw(&mounted.image("vol"), 0);
        file.write_all_at(b"durable please", 12_345).expect("write");
        let before = device.stats().flushes;
        file.sync_all().expect("fsync");
        let after_fsync = device.stats().flushes;
        assert!(after_fsync > before, "{label}: fsync did not reach flush()");
        assert_eq!(device.contents(12_345, 14).expect("contents"), b"durable please", "{label}");
        file.write_all_at(b"again", 99).expect("write");
        file.sync_data().expect("fdatasync");
        assert!(device.stats().flushes > after_fsync, "{label}: fdatasync did not reach flush()");
        assert_eq!(device.contents(99, 5).expect("contents"), b"again", "{label}");
    }
}

#[test]
fn fsync_returns_only_after_flush_returns() {
    for uring in fuse_support::transports("fsync_returns_only_after_flush_returns") {
        fsync_waits_for_flush(FuseOptions { uring, ..FuseOptions::default() });
    }
}

fn fsync_waits_for_flush(options: FuseOptions) {
    let provider = Arc::new(TestProvider::default());
    let device = Arc::new(GatedDevice::new(MIB));
    provider.add("vol", device.clone());
    let mounted = Mounted::new("gated", provider, options);
    let image = mounted.image("vol");
    let fsync_returned = Arc::new(AtomicBool::new(false));
    let syncer = {
        let fsync_returned = fsync_returned.clone();
        std::thread::spawn(move || {
            let file = open_rw(&image, 0);
            file.write_all_at(b"x", 0).expect("write");
            let result = file.sync_all();
            fsync_returned.store(true, Ordering::SeqCst);
            result
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while device.flushes_started.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "fsync never reached flush()");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !fsync_returned.load(Ordering::SeqCst),
        "fsync returned while flush() was still running"
    );
    for _ in 0..16 {
        device.release_flush();
    }
    syncer.join().expect("syncer thread").expect("fsync succeeds once flush returns");
    assert!(device.flushes_finished.load(Ordering::SeqCst) >= 1);
}

#[test]
fn o_dsync_and_rwf_dsync_writes_are_durable_before_they_return() {
    for uring in
        fuse_support::transports("o_dsync_and_rwf_dsync_writes_are_durable_before_they_return")
    {
        dsync_writes_are_durable(uring);
    }
}

fn dsync_writes_are_durable(uring: bool) {
    for (direct_io, writeback_cache) in MODES {
        let label = format!("uring={uring} direct_io={direct_io} writeback={writeback_cache}");
        let options = FuseOptions { uring, ..options(direct_io, writeback_cache) };
        let (mounted, device) = Mounted::with_mem_volume("dsync", "vol", MIB, options);
        let file = open_rw(&mounted.image("vol"), libc::O_DSYNC);
        let before = device.stats();
        file.write_all_at(&[7u8; 4096], 8192).expect("write");
        let after = device.stats();
        let durable = after.fua_writes > before.fua_writes || after.flushes > before.flushes;
        assert!(durable, "{label}: O_DSYNC write returned without FUA or flush: {after:?}");
        assert_eq!(device.contents(8192, 4096).expect("contents"), vec![7u8; 4096], "{label}");
        if direct_io {
            assert!(after.fua_writes > before.fua_writes, "{label}: direct write should carry FUA");
        }
    }
    let options = FuseOptions { uring, ..options(true, false) };
    let (mounted, device) = Mounted::with_mem_volume("rwf", "vol", MIB, options);
    let file = open_rw(&mounted.image("vol"), 0);
    let before = device.stats().fua_writes;
    let data = [9u8; 512];
    let iov = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
    // SAFETY: the fd is open, iov points at `data`, which outlives the call.
    let written = unsafe { libc::pwritev2(file.as_raw_fd(), &iov, 1, 4096, libc::RWF_DSYNC) };
    assert_eq!(written, 512, "pwritev2: {}", std::io::Error::last_os_error());
    assert!(device.stats().fua_writes > before, "RWF_DSYNC write should carry FUA");
}

#[test]
fn reads_of_a_hole_and_of_the_tail_are_correct() {
    let size = MIB + 1000;
    let provider = Arc::new(TestProvider::default());
    let device = Arc::new(MemDevice::new(size));
    device.fill(size - 10, b"0123456789").expect("fill");
    provider.add("vol", device.clone() as Arc<dyn BlockDevice>);
    for direct_io in [true, false] {
        let mounted = Mounted::new("tail", provider.clone(), options(direct_io, false));
        let file = std::fs::File::open(mounted.image("vol")).expect("open");
        let mut buf = vec![1u8; 8192];
        assert_eq!(file.read_at(&mut buf, 4096).expect("read hole"), 8192);
        assert!(buf.iter().all(|byte| *byte == 0), "a hole reads as zeroes");
        let got = file.read_at(&mut buf, size - 10).expect("read tail");
        assert_eq!(&buf[..got], b"0123456789", "direct_io={direct_io}");
        assert_eq!(file.read_at(&mut buf, size).expect("read at end"), 0);
    }
}

#[test]
fn shared_mmap_of_an_image_reaches_the_device_on_msync() {
    for direct_io in [true, false] {
        let (mounted, device) =
            Mounted::with_mem_volume("mmap", "vol", MIB, options(direct_io, false));
        let file = open_rw(&mounted.image("vol"), 0);
        let length = 64 * 1024;
        // SAFETY: a fresh shared mapping of an open file, unmapped below before the file closes.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                length,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(
            map,
            libc::MAP_FAILED,
            "direct_io={direct_io}: mmap: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: `map` is a valid writable mapping of `length` bytes.
        unsafe {
            std::ptr::write_bytes((map as *mut u8).add(4096 + 3), 0x5a, 100);
            assert_eq!(
                libc::msync(map, length, libc::MS_SYNC),
                0,
                "msync: {}",
                std::io::Error::last_os_error()
            );
            libc::munmap(map, length);
        }
        file.sync_all().expect("fsync");
        assert_eq!(
            device.contents(4096 + 3, 100).expect("contents"),
            vec![0x5a; 100],
            "direct_io={direct_io}"
        );
    }
}
