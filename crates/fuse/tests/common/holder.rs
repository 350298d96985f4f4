//! The holder's side of the takeover tests: the test process opens and mounts the
//! connection and keeps it open, engines are children (this same test binary in another
//! role) that connect to it, and whatever happens the connection is aborted at the end so
//! that no reader is left blocked in a request nobody will answer.

use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use fardisk_fuse::{handover, mount, MountOptions, Negotiated, SessionConfig};

pub use super::abort::AbortOnDrop;

/// Runs `test` as the whole test binary's one test (harness = false), printing what libtest
/// would: `test NAME ... ok`, `ignored (REASON)` when it returns a reason it cannot run here,
/// or `FAILED` (exit 101) when it panics.
pub fn run_as_test(name: &str, test: fn() -> Option<String>) {
    match std::panic::catch_unwind(test) {
        Ok(Some(reason)) => println!(
            "test {name} ... ignored ({reason})\n\ntest result: ok. 0 passed; 0 failed; 1 ignored"
        ),
        Ok(None) => println!("test {name} ... ok\n\ntest result: ok. 1 passed; 0 failed"),
        Err(_) => {
            println!("test {name} ... FAILED\n\ntest result: FAILED. 0 passed; 1 failed");
            std::process::exit(101);
        }
    }
}

/// An engine's session settings: every worker reads the holder's file itself (no clones), as
/// only requests read on a file that stays open can be resent (a request read on a clone that
/// dies with its process is ended with ECONNABORTED).
pub fn engine_config(name: &str) -> SessionConfig {
    SessionConfig {
        device_threads: 2,
        clone_fds: false,
        uring: false,
        name: name.into(),
        ..SessionConfig::default()
    }
}

/// The holder's side: mounts a fresh connection on `dir/mnt` and listens for engines on
/// `dir/holder.sock`. Returns the mount point, the listener, the connection's file (kept open
/// to the end) and the guard that aborts it.
pub fn mount_as_holder(dir: &Path) -> (PathBuf, UnixListener, OwnedFd, AbortOnDrop) {
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).expect("mount point");
    let listener = UnixListener::bind(dir.join("holder.sock")).expect("holder socket");
    let device = mount::open_device().expect("open /dev/fuse");
    mount::mount_with_fd(std::os::fd::AsFd::as_fd(&device), &mnt, &MountOptions::default())
        .expect("mount");
    let abort = AbortOnDrop::new(&mnt);
    (mnt, listener, device, abort)
}

/// Gives the connection to the first engine, which answers INIT, and returns its socket and
/// what it negotiated; or why resends cannot be tested here (the kernel did not offer
/// FUSE_HAS_RESEND).
pub fn start_first_engine(
    listener: &UnixListener,
    device: &OwnedFd,
) -> Result<(UnixStream, Negotiated), String> {
    let (socket, _) = listener.accept().expect("engine 1 connects");
    handover::send_fds(&socket, b"init", &[std::os::fd::AsRawFd::as_raw_fd(device)])
        .expect("hand over");
    let (negotiated_bytes, _) = handover::recv_fds(&socket).expect("engine 1 reports");
    let negotiated = Negotiated::from_bytes(&negotiated_bytes).expect("negotiated parameters");
    if !negotiated.has_resend() {
        return Err("the kernel does not offer FUSE_HAS_RESEND".to_owned());
    }
    Ok((socket, negotiated))
}

/// An engine's side: connects to the holder in the directory `dir_env` names and receives the
/// connection. Returns the directory, the socket, the holder's message and the file.
pub fn connect_to_holder(dir_env: &str) -> (PathBuf, UnixStream, Vec<u8>, OwnedFd) {
    let dir = PathBuf::from(std::env::var(dir_env).expect("dir"));
    let socket = UnixStream::connect(dir.join("holder.sock")).expect("connect to the holder");
    let (message, mut fds) = handover::recv_fds(&socket).expect("receive the connection");
    let device = fds.pop().expect("a descriptor");
    (dir, socket, message, device)
}

/// Why FUSE_NOTIFY_RESEND cannot be tested here (a kernel older than 6.9), or None.
pub fn kernel_has_resend() -> Option<String> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release.trim().split(['.', '-']).map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if (major, minor) < (6, 9) {
        return Some(format!("kernel {} has no FUSE_NOTIFY_RESEND (6.9+)", release.trim()));
    }
    None
}

/// An engine process (this test binary with `role_env=role`), killed and reaped on drop.
pub struct Engine(pub Child);

impl Engine {
    pub fn spawn(role_env: &str, role: &str, dir_env: &str, dir: &Path) -> Engine {
        let child = Command::new(std::env::current_exe().expect("test binary"))
            .env(role_env, role)
            .env(dir_env, dir)
            .spawn()
            .expect("spawn an engine");
        Engine(child)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
