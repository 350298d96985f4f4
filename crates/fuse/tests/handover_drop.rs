//! A request still running when its engine begins to hand the connection over, whose reply
//! is then dropped (as a runtime that shuts down drops the task holding it), is left in the
//! kernel for the next engine and resent to it, instead of being answered EIO: a database
//! would take that EIO for a failed write or fsync. The test process is the holder (it
//! mounts and keeps the /dev/fuse file open); the engines are children (this same binary):
//! 1. engine 1 holds a READ and drops its reply while serving normally: the reader gets
//!    EIO at once (no request is left hanging in a session that goes on);
//! 2. engine 1 holds another READ, calls `Session::begin_handover`, drops the reply and
//!    exits: the reader must still be waiting;
//! 3. engine 2 resumes without INIT and sends FUSE_NOTIFY_RESEND: the reader gets the bytes
//!    written through engine 1.
//!
//! Real kernel; needs root and Linux 6.9+ (FUSE_NOTIFY_RESEND); skips with a reason on
//! kernels without it. harness = false: main() is the test, or an engine when
//! FARDISK_FUSE_HANDOVER_ROLE says so.

// Real time is the point here: real processes and a real kernel connection, waited on with bounds.
#![allow(clippy::disallowed_methods)]

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::holder::{
    connect_to_holder, engine_config, kernel_has_resend, mount_as_holder, run_as_test,
    start_first_engine, Engine,
};
use common::{FileFs, TempDir};
use fardisk_fuse::{handover, Negotiated, Session, SessionConfig};

const ROLE: &str = "FARDISK_FUSE_HANDOVER_ROLE";
const DIR: &str = "FARDISK_FUSE_HANDOVER_DIR";
/// The READ engine 1 drops while it serves normally.
const DROPPED_OFFSET: u64 = 3 * 4096;
/// The READ engine 1 drops after it began the handover.
const HANDED_OVER_OFFSET: u64 = 7 * 4096;
const WAIT: Duration = Duration::from_secs(20);
const TEST: &str = "a_reply_dropped_during_a_handover_is_resent_to_the_next_engine";

fn main() {
    match std::env::var(ROLE).as_deref() {
        Ok("engine1") => engine1(),
        Ok("engine2") => engine2(),
        _ => run_as_test(TEST, a_reply_dropped_during_a_handover_is_resent),
    }
}

fn config() -> SessionConfig {
    engine_config("handover")
}

/// Answers INIT, then drops the replies of the READs it holds when the holder says so.
fn engine1() {
    let (dir, socket, _, device) = connect_to_holder(DIR);
    let mut fs = FileFs::new(&dir.join("backing"));
    fs.hold_offsets = vec![DROPPED_OFFSET, HANDED_OVER_OFFSET];
    fs.held_marker_dir = Some(dir.clone());
    let fs = Arc::new(fs);
    let session = Session::start(device, fs.clone(), config()).expect("engine 1: start");
    handover::send_fds(&socket, &session.negotiated().to_bytes(), &[]).expect("report");
    // Bounded: the holder sends two commands.
    for _ in 0..2 {
        let (command, _) = handover::recv_fds(&socket).expect("a command from the holder");
        if command == b"hand over" {
            session.begin_handover();
        }
        let replies = std::mem::take(&mut *fs.held.lock().expect("held replies"));
        assert!(!replies.is_empty(), "engine 1: no READ held when told {command:?}");
        drop(replies);
        handover::send_fds(&socket, b"dropped", &[]).expect("report the drop");
        if command == b"hand over" {
            // Leaves without answering anything more; the holder keeps the file open.
            std::process::exit(0);
        }
    }
}

/// Resumes the connection and asks for what engine 1 left unanswered.
fn engine2() {
    let (dir, socket, message, device) = connect_to_holder(DIR);
    let negotiated = Negotiated::from_bytes(&message).expect("engine 2: negotiated parameters");
    let fs = Arc::new(FileFs::new(&dir.join("backing")));
    let session = Session::resume(device, negotiated, fs, config()).expect("resume");
    session.notify_resend().expect("FUSE_NOTIFY_RESEND");
    handover::send_fds(&socket, b"resumed", &[]).expect("report");
    session.join();
}

type Reader = JoinHandle<(std::io::Result<()>, Vec<u8>)>;

/// A 4 KiB read at `offset` on its own thread (it blocks while its READ is held).
fn start_reader(image: &Path, offset: u64) -> Reader {
    let file = std::fs::File::open(image).expect("open the image");
    std::thread::spawn(move || {
        let mut got = vec![0u8; 4096];
        let result = file.read_exact_at(&mut got, offset);
        (result, got)
    })
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn command(socket: &UnixStream, command: &[u8]) {
    handover::send_fds(socket, command, &[]).expect("command engine 1");
    let (answer, _) = handover::recv_fds(socket).expect("engine 1 answers");
    assert_eq!(answer, b"dropped");
}

/// Returns Some(reason) when it cannot run here.
fn a_reply_dropped_during_a_handover_is_resent() -> Option<String> {
    common::require_fuse();
    if let Some(reason) = kernel_has_resend() {
        return Some(reason);
    }
    let dir = TempDir::new("handover-drop");
    let (mnt, listener, device, _abort) = mount_as_holder(&dir.0);

    let mut engine1 = Engine::spawn(ROLE, "engine1", DIR, &dir.0);
    let (socket1, negotiated) = match start_first_engine(&listener, &device) {
        Ok(started) => started,
        Err(reason) => return Some(reason),
    };
    let image = mnt.join("data");
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    let writer = std::fs::OpenOptions::new().write(true).open(&image).expect("open rw");
    writer.write_all_at(&pattern, HANDED_OVER_OFFSET).expect("write through engine 1");

    // 1. Serving normally: a dropped reply answers EIO, so no request hangs.
    let reader = start_reader(&image, DROPPED_OFFSET);
    wait_for("engine 1 holds the first READ", || {
        dir.0.join(format!("held-{DROPPED_OFFSET}")).exists()
    });
    command(&socket1, b"drop");
    wait_for("the dropped READ is answered", || reader.is_finished());
    let (result, _) = reader.join().expect("reader thread");
    let errno = result.expect_err("a dropped reply is an error").raw_os_error();
    assert_eq!(errno, Some(libc::EIO), "a reply dropped while serving answers EIO");

    // 2. Handing over: the dropped reply is left for the next engine.
    let reader = start_reader(&image, HANDED_OVER_OFFSET);
    wait_for("engine 1 holds the second READ", || {
        dir.0.join(format!("held-{HANDED_OVER_OFFSET}")).exists()
    });
    command(&socket1, b"hand over");
    wait_for("engine 1 exits", || engine1.0.try_wait().expect("wait").is_some());
    std::thread::sleep(Duration::from_millis(200));
    if reader.is_finished() {
        let (result, _) = reader.join().expect("reader thread");
        panic!("the READ whose reply engine 1 dropped after it began the handover was answered ({result:?}) instead of left for the next engine");
    }

    // 3. The next engine gets it again and answers it with the bytes written before.
    let _engine2 = Engine::spawn(ROLE, "engine2", DIR, &dir.0);
    let (socket2, _) = listener.accept().expect("engine 2 connects");
    handover::send_fds(&socket2, &negotiated.to_bytes(), &[device.as_raw_fd()]).expect("hand over");
    let (resumed, _) = handover::recv_fds(&socket2).expect("engine 2 reports");
    assert_eq!(resumed, b"resumed");
    wait_for("the resent READ is answered", || reader.is_finished());
    let (result, got) = reader.join().expect("reader thread");
    result.expect("the resent READ succeeds");
    assert!(got == pattern, "the resent READ returns the bytes written through engine 1");
    None
}
