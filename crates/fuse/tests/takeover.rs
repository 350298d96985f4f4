//! A live connection changes hands between processes, as issue #20's holder will do it:
//! the test process (the holder) opens /dev/fuse and mounts; engine 1 (a child, this same
//! binary) gets the descriptor over SCM_RIGHTS, answers INIT and serves; a READ is left in
//! flight in engine 1 and engine 1 is SIGKILLed; engine 2 gets the descriptor and the
//! negotiated parameters, resumes without INIT, sends FUSE_NOTIFY_RESEND, and the reader
//! that was blocked in the dead engine gets its data. Real kernel; needs root and Linux
//! 6.9+ (FUSE_NOTIFY_RESEND); skips with a reason on kernels without it.
//!
//! harness = false: main() is the test, or an engine when FARDISK_FUSE_TAKEOVER_ROLE says so.

// Real time is the point here: real processes and a real kernel connection, waited on with bounds.
#![allow(clippy::disallowed_methods)]

mod common;

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::holder::{
    connect_to_holder, engine_config, kernel_has_resend, mount_as_holder, run_as_test,
    start_first_engine, Engine,
};
use common::{FileFs, TempDir};
use fardisk_fuse::{abi, handover, Negotiated, Session, SessionConfig};

const ROLE: &str = "FARDISK_FUSE_TAKEOVER_ROLE";
const DIR: &str = "FARDISK_FUSE_TAKEOVER_DIR";
/// The READ engine 1 never answers.
const STALL_OFFSET: u64 = 7 * 4096;
const WAIT: Duration = Duration::from_secs(20);

fn main() {
    match std::env::var(ROLE).as_deref() {
        Ok("engine1") => engine(true),
        Ok("engine2") => engine(false),
        _ => run_as_test(
            "takeover_answers_the_request_in_flight",
            takeover_answers_the_request_in_flight,
        ),
    }
}

fn config() -> SessionConfig {
    engine_config("take")
}

/// An engine process: connects to the holder, receives the connection, serves it.
fn engine(first: bool) {
    let (dir, socket, message, device) = connect_to_holder(DIR);
    let mut fs = FileFs::new(&dir.join("backing"));
    let session = if first {
        fs.stall_offset = Some(STALL_OFFSET);
        fs.stall_marker = Some(dir.join("stalled"));
        let session = Session::start(device, Arc::new(fs), config()).expect("engine 1: start");
        handover::send_fds(&socket, &session.negotiated().to_bytes(), &[]).expect("report");
        session
    } else {
        let negotiated = Negotiated::from_bytes(&message).expect("engine 2: negotiated parameters");
        eprintln!("engine 2: got the connection");
        let session = Session::resume(device, negotiated, Arc::new(fs), config()).expect("resume");
        eprintln!("engine 2: serving");
        session.notify_resend().expect("FUSE_NOTIFY_RESEND");
        eprintln!("engine 2: resend asked");
        handover::send_fds(&socket, b"resumed", &[]).expect("report");
        session
    };
    session.join();
}

fn spawn_engine(role: &str, dir: &Path) -> Engine {
    Engine::spawn(ROLE, role, DIR, dir)
}

/// Returns Some(reason) when it cannot run here.
fn takeover_answers_the_request_in_flight() -> Option<String> {
    common::require_fuse();
    if let Some(reason) = kernel_has_resend() {
        return Some(reason);
    }
    let dir = TempDir::new("takeover");
    // The holder: opens the connection and mounts it; it never serves a request.
    let (mnt, listener, device, _abort) = mount_as_holder(&dir.0);

    let _engine1 = spawn_engine("engine1", &dir.0);
    let (_socket1, negotiated) = match start_first_engine(&listener, &device) {
        Ok(started) => started,
        Err(reason) => return Some(reason),
    };

    // Data through engine 1, then a READ it never answers.
    let image = mnt.join("data");
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&image).expect("open");
    let pattern: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
    file.write_all_at(&pattern, STALL_OFFSET).expect("write through engine 1");
    let reader = std::thread::spawn(move || {
        let mut got = vec![0u8; 4096];
        let result = file.read_exact_at(&mut got, STALL_OFFSET);
        (result, got)
    });
    let deadline = Instant::now() + WAIT;
    while !dir.0.join("stalled").exists() {
        assert!(Instant::now() < deadline, "engine 1 never received the READ");
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("takeover: engine 1 holds the READ; SIGKILL");
    let mut engine1 = _engine1;
    engine1.0.kill().expect("SIGKILL engine 1");
    let deadline = Instant::now() + WAIT;
    while engine1.0.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let pid = engine1.0.id();
            for task in
                std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten()
            {
                let stack = std::fs::read_to_string(task.path().join("stack")).unwrap_or_default();
                let state = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
                eprintln!("engine 1 task {:?}: {state}\n{stack}", task.file_name());
            }
            panic!("engine 1 did not exit after SIGKILL");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("takeover: engine 1 is gone");
    std::thread::sleep(Duration::from_millis(200));
    assert!(!reader.is_finished(), "the reader must still be waiting, not failed");

    let _engine2 = spawn_engine("engine2", &dir.0);
    eprintln!("takeover: engine 2 started");
    let (socket2, _) = listener.accept().expect("engine 2 connects");
    handover::send_fds(&socket2, &negotiated.to_bytes(), &[device.as_raw_fd()]).expect("hand over");
    let (resumed, _) = handover::recv_fds(&socket2).expect("engine 2 reports");
    assert_eq!(resumed, b"resumed");
    eprintln!("takeover: engine 2 resumed and asked for the resend");

    let deadline = Instant::now() + WAIT;
    while !reader.is_finished() {
        assert!(Instant::now() < deadline, "the READ in flight at the kill was never answered");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (result, got) = reader.join().expect("reader thread");
    result.expect("the resent READ succeeds");
    assert!(got == pattern[..4096], "the resent READ returns the bytes written before the kill");

    // Engine 2 serves new requests too.
    let mut again = std::fs::File::open(&image).expect("open after the takeover");
    let mut head = vec![0u8; 4096];
    again.read_exact(&mut head).expect("read after the takeover");
    let mut out = std::fs::OpenOptions::new().write(true).open(&image).expect("open rw");
    out.write_all(b"after").expect("write after the takeover");
    assert_eq!(abi::UNIQUE_RESEND, 1 << 63);
    None
}
