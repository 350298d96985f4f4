//! A small filesystem for the session tests: one directory holding one file `data` backed
//! by a regular file on disk (so a second process serving the same connection sees the
//! same bytes), and helpers to mount it. Real kernel: needs root and /dev/fuse.
#![allow(dead_code)]

pub mod abort;
pub mod holder;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fardisk_fuse::abi::{self, Kstatfs};
use fardisk_fuse::{DirBuf, Errno, Filesystem, InitOptions, KernelInit, Operation, Reply, Request};

pub const FILE_INO: u64 = 2;
pub const FILE_NAME: &[u8] = b"data";
pub const FILE_BYTES: u64 = 1 << 20;

/// `data` is stored in `backing`; a READ at `stall_offset` never answers (to leave a
/// request in flight when the process serving it is killed).
pub struct FileFs {
    pub backing: std::fs::File,
    pub stall_offset: Option<u64>,
    /// Written when a READ at `stall_offset` arrived (the test waits for it).
    pub stall_marker: Option<PathBuf>,
    /// READs at these offsets are kept unanswered in `held`, for the test to drop their
    /// replies later (as a runtime that is shut down drops the tasks holding them); each
    /// writes `held-OFFSET` in `held_marker_dir` when it arrives.
    pub hold_offsets: Vec<u64>,
    pub held_marker_dir: Option<PathBuf>,
    pub held: Mutex<Vec<Reply>>,
    pub want_uring: bool,
    pub reads: AtomicU64,
    pub resent: AtomicU64,
}

impl FileFs {
    pub fn new(backing: &Path) -> FileFs {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(backing)
            .expect("backing file");
        file.set_len(FILE_BYTES).expect("size");
        FileFs {
            backing: file,
            stall_offset: None,
            stall_marker: None,
            hold_offsets: Vec::new(),
            held_marker_dir: None,
            held: Mutex::new(Vec::new()),
            want_uring: false,
            reads: AtomicU64::new(0),
            resent: AtomicU64::new(0),
        }
    }

    fn attr(&self, ino: u64) -> abi::Attr {
        let (mode, size, nlink) = if ino == abi::ROOT_ID {
            (libc::S_IFDIR | 0o755, 0, 2)
        } else {
            (libc::S_IFREG | 0o600, FILE_BYTES, 1)
        };
        abi::Attr {
            ino,
            size,
            mode,
            nlink,
            blksize: 4096,
            blocks: size / 512,
            ..Default::default()
        }
    }
}

const TTL: Duration = Duration::from_secs(1);

impl Filesystem for FileFs {
    fn init(&self, _kernel: &KernelInit) -> InitOptions {
        InitOptions { flags: abi::init_flags::ASYNC_DIO, ..InitOptions::default() }
    }

    fn request(&self, request: &Request<'_>, reply: Reply) {
        if request.is_resend() {
            self.resent.fetch_add(1, Ordering::SeqCst);
        }
        let ino = request.nodeid();
        match request.operation {
            Operation::Lookup { name } if ino == abi::ROOT_ID && name == FILE_NAME => {
                reply.entry(TTL, &self.attr(FILE_INO), 0)
            }
            Operation::Lookup { .. } => reply.error(Errno::ENOENT),
            Operation::Getattr(_) if ino == abi::ROOT_ID || ino == FILE_INO => {
                reply.attr(TTL, &self.attr(ino))
            }
            Operation::Getattr(_) => reply.error(Errno::ENOENT),
            Operation::Open(_) => reply.open(1, abi::fopen::DIRECT_IO | abi::fopen::NOFLUSH),
            Operation::Opendir(_) => reply.open(0, 0),
            Operation::Read(read) => {
                self.reads.fetch_add(1, Ordering::SeqCst);
                if Some(read.offset) == self.stall_offset {
                    if let Some(marker) = &self.stall_marker {
                        std::fs::write(marker, b"stalled").expect("marker");
                    }
                    // Never answered: the process is killed with this request in flight.
                    std::mem::forget(reply);
                    return;
                }
                if self.hold_offsets.contains(&read.offset) {
                    self.held.lock().expect("held replies").push(reply);
                    if let Some(dir) = &self.held_marker_dir {
                        std::fs::write(dir.join(format!("held-{}", read.offset)), b"held")
                            .expect("marker");
                    }
                    return;
                }
                let length = u64::from(read.size).min(FILE_BYTES.saturating_sub(read.offset));
                let mut data = vec![0u8; length as usize];
                match self.backing.read_exact_at(&mut data, read.offset) {
                    Ok(()) => reply.data(data.into()),
                    Err(_) => reply.error(Errno::EIO),
                }
            }
            Operation::Write { arg, data } => match self.backing.write_all_at(data, arg.offset) {
                Ok(()) => reply.written(data.len() as u32),
                Err(_) => reply.error(Errno::EIO),
            },
            Operation::Fsync(_) => match self.backing.sync_data() {
                Ok(()) => reply.ok(),
                Err(_) => reply.error(Errno::EIO),
            },
            Operation::Readdir { arg, plus: false } => {
                let mut dir = DirBuf::default();
                dir.reset(arg.size);
                let entries: [(u64, u32, &[u8]); 3] =
                    [(abi::ROOT_ID, 4, b"."), (abi::ROOT_ID, 4, b".."), (FILE_INO, 8, FILE_NAME)];
                for (index, (ino, kind, name)) in
                    entries.iter().enumerate().skip(arg.offset as usize)
                {
                    if !dir.add(*ino, index as u64 + 1, *kind, name) {
                        break;
                    }
                }
                reply.bytes(dir.as_bytes())
            }
            Operation::Statfs => reply.statfs(&Kstatfs {
                bsize: 4096,
                namelen: 255,
                frsize: 4096,
                ..Default::default()
            }),
            Operation::Flush(_)
            | Operation::Release(_)
            | Operation::Releasedir(_)
            | Operation::Access(_) => reply.ok(),
            _ => reply.error(Errno::ENOSYS),
        }
    }
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh directory, removed (after a lazy unmount) on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!(
            "fardisk-fuse-test-{}-{}-{label}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("temp dir");
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let mount = self.0.join("mnt");
        let _ = fardisk_fuse::mount::unmount(&mount, true);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Root and /dev/fuse, or the reason these tests cannot run here.
pub fn require_fuse() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "FUSE session tests need root (mount(2))");
    assert!(Path::new("/dev/fuse").exists(), "FUSE session tests need /dev/fuse");
}

pub const URING_SWITCH: &str = "/sys/module/fuse/parameters/enable_uring";

/// None when FUSE-over-io_uring can run here, else why not (the tests print it and skip).
pub fn uring_unavailable() -> Option<String> {
    match std::fs::read_to_string(URING_SWITCH) {
        Ok(value) if value.trim() == "Y" => None,
        Ok(_) => {
            Some(format!("{URING_SWITCH} is N (echo Y > {URING_SWITCH} as root to test io_uring)"))
        }
        Err(_) => {
            Some(format!("this kernel has no FUSE-over-io_uring ({URING_SWITCH} is missing)"))
        }
    }
}

pub fn arc_fs(fs: FileFs) -> Arc<FileFs> {
    Arc::new(fs)
}
