//! One engine's life under the holder: start it with its end of the link, hand it the
//! connection, answer its messages, and see how it ends.

use super::link::{self, EngineMessage, Handover, UnmountReply};
use super::HolderConfig;
use anyhow::{Context, Result};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ExitStatus};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The exit status of an engine that handed over for an upgrade (EX_TEMPFAIL).
pub const UPGRADE_EXIT_CODE: i32 = 75;
/// How often the holder looks at its child between messages.
const POLL: Duration = Duration::from_millis(20);

/// How an engine ended.
pub struct Outcome {
    pub pid: u32,
    pub status: ExitStatus,
    /// The INIT parameters it reported when it began to serve (None: it never served).
    pub negotiated: Option<Vec<u8>>,
    pub exported: bool,
    pub upgrading: bool,
    /// The engine asked for the unmount (export) and the holder did it.
    pub unmounted: bool,
    /// Set when the holder killed the engine because its keepalives stopped: why.
    pub hung: Option<String>,
}

/// systemd's watchdog as the holder keeps it: the holder (the service's main process) tells
/// systemd `WATCHDOG=1` while its engine is importing or sends [`EngineMessage::Alive`]; a
/// serving engine silent for `timeout` is killed (SIGKILL) and restarted like a crash, the
/// mount kept. systemd itself then only acts when the holder hangs.
pub struct Watchdog {
    pub notifier: crate::sd_notify::Notifier,
    /// `$WATCHDOG_USEC`.
    pub timeout: Duration,
}

/// Starts an engine, hands it the connection and waits until it exits. An engine that has
/// not begun to serve by `serve_by` (a hung import: the holder's bound on how long requests
/// wait without a server) is killed, and `hung` says why.
pub fn engine(
    cfg: &HolderConfig,
    watchdog: Option<&Watchdog>,
    handover: &Handover,
    device: BorrowedFd<'_>,
    mountpoint: &Path,
    serve_by: Option<Instant>,
) -> Result<Outcome> {
    let (holder_end, engine_end) = link::socket_pair().context("holder: socketpair")?;
    let mut child = spawn(cfg, &engine_end)?;
    drop(engine_end);
    let pid = child.id();
    tracing::info!(pid, generation = handover.generation, exe = %cfg.engine_exe.display(), "holder: engine started");
    if let Err(e) = link::send_json(&holder_end, handover, &[device.as_raw_fd()]) {
        // The engine died before it read the handover; its exit says why.
        tracing::warn!(pid, error = %e, "holder: could not hand the connection over");
    }
    let messages = read_messages(&holder_end)?;
    let mut outcome = Outcome {
        pid,
        status: ExitStatus::default(),
        negotiated: None,
        exported: false,
        upgrading: false,
        unmounted: false,
        hung: None,
    };
    let mut stop_forwarded = false;
    let mut last_alive = Instant::now();
    let mut last_keepalive_sent: Option<Instant> = None;
    loop {
        match messages.recv_timeout(POLL) {
            Ok(message) => {
                last_alive = Instant::now();
                handle(message, &holder_end, mountpoint, &mut outcome)
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(POLL),
        }
        if outcome.negotiated.is_none()
            && outcome.hung.is_none()
            && serve_by.is_some_and(|t| Instant::now() >= t)
        {
            let why =
                format!("did not serve within --reimport-wait ({} s)", cfg.reimport_wait.as_secs());
            tracing::error!(pid, "holder: engine {why}; killing it");
            // SAFETY: kill(2) on our own child's pid (not yet reaped, so not reused).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            outcome.hung = Some(why);
        }
        if let Some(w) = watchdog {
            let serving = outcome.negotiated.is_some();
            let silent = last_alive.elapsed();
            if serving && silent > w.timeout && outcome.hung.is_none() {
                let why = format!(
                    "hung: no keepalive for {} ms (watchdog {} ms)",
                    silent.as_millis(),
                    w.timeout.as_millis()
                );
                tracing::error!(pid, "holder: engine {why}; killing it (the mount stays, the next engine replays the log)");
                // SAFETY: kill(2) on our own child's pid (not yet reaped, so not reused).
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                outcome.hung = Some(why);
            }
            if last_keepalive_sent.is_none_or(|t| t.elapsed() >= w.timeout / 2) {
                w.notifier.watchdog();
                last_keepalive_sent = Some(Instant::now());
            }
        }
        if super::stop_asked() && !stop_forwarded {
            tracing::info!(pid, "holder: asked to stop; asking the engine to export");
            // SAFETY: kill(2) on our own child's pid (not yet reaped, so not reused).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
            stop_forwarded = true;
        }
        if let Some(status) = child.try_wait().context("holder: wait for the engine")? {
            // Messages sent just before the exit are still in the socket.
            while let Ok(message) = messages.recv_timeout(POLL) {
                handle(message, &holder_end, mountpoint, &mut outcome);
            }
            outcome.status = status;
            return Ok(outcome);
        }
    }
}

fn handle(message: EngineMessage, socket: &UnixStream, mountpoint: &Path, outcome: &mut Outcome) {
    match message {
        EngineMessage::Serving { negotiated } => outcome.negotiated = Some(negotiated),
        // Its arrival already counted (the caller notes the time of every message).
        EngineMessage::Alive => {}
        EngineMessage::Unmount => {
            let error = super::unmount(mountpoint);
            outcome.unmounted = true;
            if let Err(e) = link::send_json(socket, &UnmountReply { error }, &[]) {
                tracing::warn!(error = %e, "holder: could not answer the engine's unmount");
            }
        }
        EngineMessage::Exported => outcome.exported = true,
        EngineMessage::Upgrading => outcome.upgrading = true,
    }
}

/// A thread that reads the engine's messages until it closes its end.
fn read_messages(socket: &UnixStream) -> Result<mpsc::Receiver<EngineMessage>> {
    let reader = socket.try_clone().context("holder: clone the link")?;
    let (tx, rx) = mpsc::sync_channel(16);
    std::thread::Builder::new().name("holder-link".into()).spawn(move || loop {
        match link::recv_json::<EngineMessage>(&reader) {
            Ok((message, _)) => {
                if tx.send(message).is_err() {
                    return;
                }
            }
            // A message this holder cannot read (damaged, or from a newer engine): said in
            // one line and skipped; the engine's exit status still decides what happens next.
            Err(e) if e.downcast_ref::<std::io::Error>().is_none() => {
                tracing::error!("holder: refused a message from the engine: {e:#}");
            }
            // The engine closed its end (it exited): nothing more will come.
            Err(_) => return,
        }
    })?;
    Ok(rx)
}

fn spawn(cfg: &HolderConfig, engine_end: &UnixStream) -> Result<Child> {
    let fd = engine_end.as_raw_fd();
    let mut cmd = std::process::Command::new(&cfg.engine_exe);
    cmd.args(&cfg.engine_args)
        .env(link::HOLDER_FD_ENV, fd.to_string())
        .stdin(std::process::Stdio::null());
    // SAFETY: between fork and exec the closure only calls fcntl(2), open(2), write(2) and
    // close(2) on fixed arguments: async-signal-safe, no allocation, no locks.
    unsafe {
        cmd.pre_exec(move || {
            // The engine's end of the link survives exec.
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The holder's OOM protection is not the engine's.
            let path = c"/proc/self/oom_score_adj";
            let out = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if out >= 0 {
                libc::write(out, b"0".as_ptr().cast(), 1);
                libc::close(out);
            }
            Ok(())
        });
    }
    cmd.spawn()
        .with_context(|| format!("holder: cannot start the engine {}", cfg.engine_exe.display()))
}
