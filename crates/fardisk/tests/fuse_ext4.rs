//! The way users run it: a loop device on the image, ext4 on the loop device, files on
//! ext4. Checks that mkfs discards through to trim, that ext4's syncs reach flush(), that
//! e2fsck finds the filesystem clean, and that what ext4 fsync'd is in the image a power
//! cut would leave. Real kernel and tools; needs root, /dev/fuse, losetup and e2fsprogs.

mod fuse_support;

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use fardisk::fuse::FuseOptions;
use fuse_support::devices::CrashDevice;
use fuse_support::{run, FsMount, LoopDevice, Mounted, Rng, TempDir, TestProvider};

const MIB: u64 = 1 << 20;
const VOLUME_BYTES: u64 = 128 * MIB;

fn pseudo_random(seed: u64, length: usize) -> Vec<u8> {
    let mut data = vec![0u8; length];
    Rng(seed).fill(&mut data);
    data
}

/// Writes `data` to `path` and fsyncs the file and its directory, as a database does.
fn write_durably(path: &Path, data: &[u8]) {
    let mut file = std::fs::File::create(path).expect("create");
    file.write_all(data).expect("write");
    file.sync_all().expect("fsync file");
    let dir = std::fs::File::open(path.parent().expect("parent")).expect("open dir");
    dir.sync_all().expect("fsync dir");
}

#[test]
fn ext4_on_a_direct_io_loop_device_is_clean_and_keeps_its_files() {
    let (mut mounted, device) =
        Mounted::with_mem_volume("ext4", "vol", VOLUME_BYTES, FuseOptions::default());
    let fs_dir = TempDir::new("ext4-mnt");
    let files: Vec<(String, Vec<u8>)> = (0..4)
        .map(|index| {
            (format!("file-{index}"), pseudo_random(index + 1, 300_000 * index as usize + 777))
        })
        .collect();
    {
        let loop_device = LoopDevice::attach(&mounted.image("vol"), true);
        assert_eq!(loop_device.dio_state(), "1", "loop device did not enable direct I/O");
        let trims_before = device.stats().trims;
        run("mkfs.ext4", &["-q", &loop_device.device]);
        assert!(device.stats().trims > trims_before, "mkfs.ext4's discard did not reach trim()");
        let mut ext4 = FsMount::mount(&loop_device.device, &fs_dir.path);
        for (name, data) in &files {
            std::fs::write(fs_dir.path.join(name), data).expect("write file");
        }
        let flushes_before = device.stats().flushes;
        run("sync", &[]);
        assert!(device.stats().flushes > flushes_before, "sync on ext4 did not reach flush()");
        ext4.unmount();
        run("e2fsck", &["-fn", &loop_device.device]);
    }
    // A second loop device on the same image sees the same files.
    {
        let loop_device = LoopDevice::attach(&mounted.image("vol"), true);
        let _ext4 = FsMount::mount(&loop_device.device, &fs_dir.path);
        for (name, data) in &files {
            let read = std::fs::read(fs_dir.path.join(name)).expect("read file");
            assert!(read == *data, "{name} differs after remount");
        }
    }
    mounted.unmount();
}

/// Power cut right after a database-style fsync: the image holding only what flush() made
/// durable must fsck clean and contain the fsync'd file, in every caching mode and with
/// the loop device in direct-io and buffered mode.
#[test]
fn fsynced_files_survive_a_power_cut_in_every_mode() {
    let modes = [(true, false), (false, false), (false, true)];
    for uring in fuse_support::transports("fsynced_files_survive_a_power_cut_in_every_mode") {
        for (direct_io, writeback_cache) in modes {
            for loop_direct_io in [true, false] {
                let label = format!(
                    "uring={uring} direct_io={direct_io} writeback={writeback_cache} loop_dio={loop_direct_io}"
                );
                let options =
                    FuseOptions { direct_io, writeback_cache, uring, ..FuseOptions::default() };
                power_cut_after_fsync(options, loop_direct_io, &label);
            }
        }
    }
}

fn power_cut_after_fsync(options: FuseOptions, loop_direct_io: bool, label: &str) {
    let provider = Arc::new(TestProvider::default());
    let device = Arc::new(CrashDevice::new(VOLUME_BYTES));
    provider.add("vol", device.clone());
    let mounted = Mounted::new("crash", provider, options);
    let fs_dir = TempDir::new("crash-mnt");
    let data = pseudo_random(0xc0ffee, 1_234_567);
    let durable_image = {
        let loop_device = LoopDevice::attach(&mounted.image("vol"), loop_direct_io);
        run("mkfs.ext4", &["-q", &loop_device.device]);
        let _ext4 = FsMount::mount(&loop_device.device, &fs_dir.path);
        write_durably(&fs_dir.path.join("committed"), &data);
        // The power cut: only what has been flushed so far survives.
        device.durable_image()
    };
    check_crash_image(&durable_image, &data, label);
}

/// Writes the surviving image to a plain file, lets e2fsck replay the journal, requires a
/// clean second check, and reads the committed file back through a loop mount.
fn check_crash_image(image: &[u8], expected: &[u8], label: &str) {
    let work = TempDir::new("crash-img");
    let image_path = work.path.join("image");
    std::fs::write(&image_path, image).expect("write crash image");
    let image_str = image_path.to_str().expect("utf-8");
    let replay = Command::new("e2fsck").args(["-fy", image_str]).output().expect("run e2fsck");
    // 0: clean; 1: errors corrected (journal replay counts as such on some versions).
    let code = replay.status.code();
    assert!(
        matches!(code, Some(0) | Some(1)),
        "{label}: e2fsck -fy on the power-cut image exited {code:?}: {}",
        String::from_utf8_lossy(&replay.stdout)
    );
    run("e2fsck", &["-fn", image_str]);
    let mount_dir = TempDir::new("crash-check");
    let loop_device = LoopDevice::attach(&image_path, false);
    let _ext4 = FsMount::mount(&loop_device.device, &mount_dir.path);
    let read = std::fs::read(mount_dir.path.join("committed")).unwrap_or_else(|error| {
        panic!("{label}: fsync'd file missing after the power cut: {error}")
    });
    assert!(read == expected, "{label}: fsync'd file differs after the power cut");
}
