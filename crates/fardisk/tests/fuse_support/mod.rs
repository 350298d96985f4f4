//! Shared harness of the FUSE tests: a mutable in-memory volume provider, a mounted
//! directory, and guards that always undo what a test set up (ext4 mount, loop device,
//! FUSE mount, temp dir) even when the test fails half way. These tests use the real
//! kernel; they need root and /dev/fuse and fail loudly without them.
#![allow(dead_code)]
// Real time is the point here: mounts, loop devices and unmounts are real and take real time.
#![allow(clippy::disallowed_methods)]

pub mod devices;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fardisk::fuse::{mount, FuseMount, FuseOptions, Transport};
use fardisk_nbd::{BlockDevice, ExportInfo, ExportProvider, MemDevice};
use parking_lot::Mutex;

/// Fails the test with a clear reason when the machine cannot run FUSE tests.
pub fn require_fuse() {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    assert_eq!(uid, 0, "FUSE tests need root (mount, losetup, mkfs); run `cargo test` as root");
    assert!(
        Path::new("/dev/fuse").exists(),
        "FUSE tests need /dev/fuse (modprobe fuse; in a container pass --device /dev/fuse)"
    );
}

/// The io_uring module switch; tests read it, never write it (scripts/test.sh turns it on).
pub const URING_SWITCH: &str = "/sys/module/fuse/parameters/enable_uring";

/// None when FUSE-over-io_uring can run here, else why not.
pub fn uring_unavailable() -> Option<String> {
    match std::fs::read_to_string(URING_SWITCH) {
        Ok(value) if value.trim() == "Y" => None,
        Ok(_) => Some(format!("{URING_SWITCH} is N (scripts/test.sh turns it on)")),
        Err(_) => {
            Some(format!("this kernel has no FUSE-over-io_uring ({URING_SWITCH} is missing)"))
        }
    }
}

/// The transports a test runs in: /dev/fuse always, io_uring when the kernel offers it
/// (with a printed reason when it does not). `FARDISK_FUSE_TEST_TRANSPORT=uring` makes
/// every other FUSE test of the binary run over io_uring too (see [`Mounted::new`]).
pub fn transports(test: &str) -> Vec<bool> {
    match uring_unavailable() {
        None => vec![false, true],
        Some(reason) => {
            println!("{test}: io_uring run SKIPPED: {reason}");
            vec![false]
        }
    }
}

/// Whether this test binary runs its mounts over io_uring (FARDISK_FUSE_TEST_TRANSPORT).
pub fn uring_from_env() -> bool {
    std::env::var("FARDISK_FUSE_TEST_TRANSPORT").as_deref() == Ok("uring")
}

/// Volumes that tests add and remove while mounted.
#[derive(Default)]
pub struct TestProvider {
    volumes: Mutex<BTreeMap<String, Arc<dyn BlockDevice>>>,
}

impl TestProvider {
    pub fn add(&self, name: &str, device: Arc<dyn BlockDevice>) {
        self.volumes.lock().insert(name.to_owned(), device);
    }

    pub fn remove(&self, name: &str) {
        self.volumes.lock().remove(name);
    }
}

impl ExportProvider for TestProvider {
    fn list(&self) -> Vec<ExportInfo> {
        let volumes = self.volumes.lock();
        volumes
            .keys()
            .map(|name| ExportInfo { name: name.clone(), description: String::new() })
            .collect()
    }

    fn open(&self, name: &str) -> Option<Arc<dyn BlockDevice>> {
        self.volumes.lock().get(name).cloned()
    }
}

static DIR_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh directory under /tmp, removed on drop (after whatever was mounted on it).
pub struct TempDir {
    pub path: PathBuf,
}

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        loop {
            let index = DIR_COUNTER.fetch_add(1, Ordering::Relaxed);
            let path =
                PathBuf::from(format!("/tmp/fardisk-fuse-{}-{index}-{label}", std::process::id()));
            match std::fs::create_dir(&path) {
                Ok(()) => return TempDir { path },
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(error) => panic!("create {}: {error}", path.display()),
            }
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A provider mounted on a temp dir with its own runtime. Field order is drop order:
/// the mount goes before the runtime that serves it and the directory under it.
pub struct Mounted {
    pub mount: Option<FuseMount>,
    pub provider: Arc<TestProvider>,
    pub runtime: tokio::runtime::Runtime,
    pub dir: TempDir,
}

impl Mounted {
    /// With FARDISK_FUSE_TEST_TRANSPORT=uring every mount asks for io_uring and must get it.
    pub fn new(label: &str, provider: Arc<TestProvider>, options: FuseOptions) -> Mounted {
        let uring = options.uring || uring_from_env();
        Mounted::with_transport(label, provider, FuseOptions { uring, ..options })
    }

    /// A mount whose transport is what `options.uring` says; io_uring is checked to serve.
    pub fn with_transport(
        label: &str,
        provider: Arc<TestProvider>,
        options: FuseOptions,
    ) -> Mounted {
        require_fuse();
        if options.uring {
            if let Some(reason) = uring_unavailable() {
                panic!("io_uring asked for, but {reason}");
            }
        }
        let dir = TempDir::new(label);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let uring = options.uring;
        let mount = mount(&dir.path, provider.clone(), runtime.handle().clone(), options)
            .unwrap_or_else(|error| panic!("mount at {}: {error}", dir.path.display()));
        let stats = mount.stats();
        let wanted = if uring { Transport::IoUring } else { Transport::Device };
        assert_eq!(stats.transport, wanted, "transport: {}", stats.transport_reason);
        Mounted { mount: Some(mount), provider, runtime, dir }
    }

    /// A mount with one volume `name` backed by a fresh MemDevice of `size_bytes`.
    pub fn with_mem_volume(
        label: &str,
        name: &str,
        size_bytes: u64,
        options: FuseOptions,
    ) -> (Mounted, Arc<MemDevice>) {
        let provider = Arc::new(TestProvider::default());
        let device = Arc::new(MemDevice::new(size_bytes));
        provider.add(name, device.clone());
        (Mounted::new(label, provider, options), device)
    }

    pub fn image(&self, name: &str) -> PathBuf {
        self.dir.path.join(name)
    }

    /// Unmounts, retrying while the kernel still holds the mount busy for a moment (a loop
    /// device just detached releases its file asynchronously).
    pub fn unmount(&mut self) {
        let Some(mount) = self.mount.as_mut() else {
            return;
        };
        let mut last_error = None;
        for _ in 0..100 {
            match mount.unmount() {
                Ok(()) => {
                    self.mount = None;
                    return;
                }
                Err(error) => last_error = Some(error),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("unmount {}: {:?}", self.dir.path.display(), last_error);
    }
}

/// Mount points in /proc/mounts that equal `path`.
pub fn mounted_at(path: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/mounts").expect("read /proc/mounts");
    let wanted = path.to_string_lossy().replace(' ', "\\040");
    mounts.lines().any(|line| line.split(' ').nth(1) == Some(wanted.as_str()))
}

/// Runs a command, failing the test with its output if it does not succeed.
pub fn run(program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("cannot run {program}: {error} (is it installed?)"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{program} {args:?} failed with {}:\nstdout: {stdout}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// A loop device on an image, detached on drop.
pub struct LoopDevice {
    pub device: String,
}

impl LoopDevice {
    pub fn attach(image: &Path, direct_io: bool) -> LoopDevice {
        let direct = if direct_io { "--direct-io=on" } else { "--direct-io=off" };
        let image = image.to_str().expect("utf-8 path");
        let device = run("losetup", &[direct, "-f", "--show", image]).trim().to_owned();
        assert!(device.starts_with("/dev/loop"), "losetup printed {device:?}");
        LoopDevice { device }
    }

    /// "1" when the loop device really runs with direct I/O.
    pub fn dio_state(&self) -> String {
        let name = self.device.trim_start_matches("/dev/");
        std::fs::read_to_string(format!("/sys/block/{name}/loop/dio"))
            .unwrap_or_default()
            .trim()
            .to_owned()
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
    }
}

/// A filesystem mounted from a device, unmounted on drop.
pub struct FsMount {
    pub dir: PathBuf,
    mounted: bool,
}

impl FsMount {
    pub fn mount(device: &str, dir: &Path) -> FsMount {
        run("mount", &[device, dir.to_str().expect("utf-8 path")]);
        FsMount { dir: dir.to_owned(), mounted: true }
    }

    pub fn unmount(&mut self) {
        if self.mounted {
            run("umount", &[self.dir.to_str().expect("utf-8 path")]);
            self.mounted = false;
        }
    }
}

impl Drop for FsMount {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.dir).status();
        }
    }
}

/// Opens an image for reading and writing, with extra open flags (O_DIRECT, O_DSYNC).
pub fn open_rw(path: &Path, flags: i32) -> File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(flags)
        .open(path)
        .unwrap_or_else(|error| panic!("open {} flags {flags:#x}: {error}", path.display()))
}

/// A zeroed buffer whose memory is 4096-aligned, as O_DIRECT may require.
pub struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    pub fn new(len: usize) -> AlignedBuf {
        let storage = vec![0u8; len + 4096];
        let start = storage.as_ptr().align_offset(4096);
        AlignedBuf { storage, start, len }
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

/// statvfs(3) of a path: (block size, blocks, files).
pub fn statvfs(path: &Path) -> (u64, u64, u64) {
    let path_c = CString::new(path.as_os_str().as_bytes()).expect("no NUL");
    // SAFETY: statvfs is plain data; zeroed is a valid value to be overwritten.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: path_c is NUL-terminated and `stat` is a valid out pointer.
    let rc = unsafe { libc::statvfs(path_c.as_ptr(), &mut stat) };
    assert_eq!(rc, 0, "statvfs: {}", std::io::Error::last_os_error());
    (stat.f_frsize, stat.f_blocks, stat.f_files)
}

/// Deterministic xorshift so failures replay exactly.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for byte in buf {
            *byte = self.next() as u8;
        }
    }
}
