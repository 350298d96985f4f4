//! The holder ⇄ engine link: one SOCK_SEQPACKET socket pair per engine (each message arrives
//! whole), JSON messages each in a [`frame`](super::frame) (magic, version, xxh3), and the
//! /dev/fuse descriptor passed with the first one (SCM_RIGHTS).
//!
//! holder → engine, once at start: [`Handover`] + the /dev/fuse descriptor.
//! engine → holder: [`EngineMessage`]s; `Unmount` is answered with [`UnmountReply`].

use super::frame;
use super::restarts::{EngineExit, RestartPolicy};
use anyhow::{bail, Context, Result};
use fardisk_fuse::handover;
use serde::{Deserialize, Serialize};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::time::Duration;

/// The environment variable that tells an engine it runs under a holder: the number of its
/// end of the link (inherited across exec).
pub const HOLDER_FD_ENV: &str = "FARDISK_HOLDER_FD";
/// How long an engine waits for the holder to answer an unmount.
const UNMOUNT_REPLY_WAIT: Duration = Duration::from_secs(30);

/// What the holder tells each engine it starts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Handover {
    pub holder_pid: u32,
    /// 1 for the first engine, +1 per restart or upgrade.
    pub generation: u64,
    /// The INIT parameters a predecessor negotiated (`Negotiated::to_bytes`), or None when
    /// the kernel's INIT still waits to be answered.
    pub negotiated: Option<Vec<u8>>,
    pub policy: RestartPolicy,
    pub restarts_total: u64,
    pub upgrades_total: u64,
    /// Unplanned exits inside the current window.
    pub crashes_in_window: u64,
    /// The newest exits, oldest first (the last one is why this engine was started).
    pub recent: Vec<EngineExit>,
}

/// What an engine tells its holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineMessage {
    /// The connection is served; these are its INIT parameters (for the next engine).
    Serving { negotiated: Vec<u8> },
    /// A keepalive from the serving loop (sent at half of `$WATCHDOG_USEC` when systemd's
    /// watchdog is on): a serving engine that stops sending them is killed and restarted.
    Alive,
    /// Export: unmount the directory (answered with [`UnmountReply`]).
    Unmount,
    /// The pool is exported; the holder stops when this engine exits with status 0.
    Exported,
    /// Handing over to a new engine (`fardisk upgrade`): the pool is exported, data requests
    /// left unanswered are for the next engine; start it when this one exits.
    Upgrading,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnmountReply {
    /// None: unmounted; Some(why) otherwise (then detached lazily).
    pub error: Option<String>,
}

/// A connected pair of SOCK_SEQPACKET sockets, both close-on-exec.
pub fn socket_pair() -> std::io::Result<(UnixStream, UnixStream)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: socketpair writes two descriptors into `fds`, which we then own.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and owned by nobody else.
    Ok(unsafe { (UnixStream::from_raw_fd(fds[0]), UnixStream::from_raw_fd(fds[1])) })
}

/// What a refused link message is called in its one line.
const LINK_WHAT: &str = "holder link message";

/// `value` as the bytes of one link message (JSON in a frame).
pub fn encode_message<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    let payload = serde_json::to_vec(value)?;
    Ok(frame::encode(frame::LINK_MAGIC, &payload))
}

/// One link message from its bytes: the frame is verified before the JSON is parsed.
pub fn decode_message<T: for<'a> Deserialize<'a>>(bytes: &[u8]) -> Result<T> {
    let payload = frame::decode(frame::LINK_MAGIC, LINK_WHAT, bytes)?;
    serde_json::from_slice(payload).context("holder link: a malformed message")
}

pub fn send_json<T: Serialize>(socket: &UnixStream, value: &T, fds: &[RawFd]) -> Result<()> {
    let bytes = encode_message(value)?;
    if bytes.len() > handover::MESSAGE_BYTES_MAX {
        bail!(
            "holder link: a {} byte message is over the {} byte limit",
            bytes.len(),
            handover::MESSAGE_BYTES_MAX
        );
    }
    handover::send_fds(socket, &bytes, fds).context("holder link: send")
}

pub fn recv_json<T: for<'a> Deserialize<'a>>(socket: &UnixStream) -> Result<(T, Vec<OwnedFd>)> {
    let (bytes, fds) = handover::recv_fds(socket).context("holder link: receive")?;
    Ok((decode_message(&bytes)?, fds))
}

/// The engine's end of the link.
pub struct HolderLink {
    socket: Mutex<UnixStream>,
    pub handover: Handover,
    device: Mutex<Option<OwnedFd>>,
}

impl std::fmt::Debug for HolderLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HolderLink").field("handover", &self.handover).finish()
    }
}

impl HolderLink {
    /// The link when this process was started by a holder ([`HOLDER_FD_ENV`]); blocks until
    /// the holder's handover arrives (the holder sends it right after the start).
    pub fn from_env() -> Result<Option<HolderLink>> {
        let Some(text) = std::env::var_os(HOLDER_FD_ENV) else { return Ok(None) };
        let fd: RawFd = text
            .to_str()
            .and_then(|t| t.parse().ok())
            .filter(|fd| *fd > 2)
            .with_context(|| format!("{HOLDER_FD_ENV}={text:?} is not a descriptor number"))?;
        // SAFETY: the holder passed this descriptor to us across exec for exactly this use;
        // nothing else in the process owns it.
        let socket = unsafe { UnixStream::from_raw_fd(fd) };
        // Not passed on to processes this engine starts (fusermount, ...).
        // SAFETY: fcntl on a descriptor we own.
        unsafe { libc::fcntl(socket.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
        let (handover, mut fds): (Handover, _) = recv_json(&socket)?;
        let Some(device) = fds.pop() else { bail!("the holder sent no /dev/fuse descriptor") };
        Ok(Some(HolderLink {
            socket: Mutex::new(socket),
            handover,
            device: Mutex::new(Some(device)),
        }))
    }

    /// The /dev/fuse descriptor (once).
    pub fn take_device(&self) -> Option<OwnedFd> {
        self.device.lock().ok()?.take()
    }

    pub fn tell(&self, message: &EngineMessage) -> Result<()> {
        let socket = self.socket.lock().map_err(|_| anyhow::anyhow!("holder link poisoned"))?;
        send_json(&socket, message, &[])
    }

    /// Asks the holder to unmount and waits for its answer.
    pub fn unmount(&self) -> std::io::Result<()> {
        let socket = self.socket.lock().map_err(|_| std::io::Error::other("link poisoned"))?;
        send_json(&socket, &EngineMessage::Unmount, &[]).map_err(std::io::Error::other)?;
        socket.set_read_timeout(Some(UNMOUNT_REPLY_WAIT))?;
        let (reply, _): (UnmountReply, _) = recv_json(&socket).map_err(std::io::Error::other)?;
        match reply.error {
            None => Ok(()),
            Some(why) => Err(std::io::Error::other(why)),
        }
    }

    /// The reason this engine was started, for the history: "first engine" or the exit of its
    /// predecessor.
    pub fn start_reason(&self) -> String {
        let h = &self.handover;
        match h.recent.last() {
            None => format!("engine started by holder pid {} (first engine)", h.holder_pid),
            Some(exit) => format!(
                "engine started by holder pid {} after engine pid {} {}: generation {}, {} restarts and {} upgrades so far ({} unplanned in the last {} s, at most {})",
                h.holder_pid,
                exit.pid,
                match exit.kind {
                    super::restarts::ExitKind::Upgrade => "handed over (upgrade)".to_owned(),
                    super::restarts::ExitKind::Crash => format!("went ({})", exit.reason),
                },
                h.generation,
                h.restarts_total,
                h.upgrades_total,
                h.crashes_in_window,
                h.policy.window_s,
                h.policy.restarts_max
            ),
        }
    }

    /// The `holder` object of `status --json`.
    pub fn status_json(&self) -> serde_json::Value {
        let h = &self.handover;
        serde_json::json!({
            "pid": h.holder_pid,
            "generation": h.generation,
            "restarts": h.restarts_total,
            "upgrades": h.upgrades_total,
            "restarts_in_window": h.crashes_in_window,
            "restarts_max": h.policy.restarts_max,
            "restart_window_s": h.policy.window_s,
            "recent_exits": h.recent,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::restarts::ExitKind;
    use super::*;

    #[test]
    fn the_largest_handover_fits_one_message() {
        let exit = EngineExit {
            at_ms: u64::MAX,
            pid: u32::MAX,
            kind: ExitKind::Crash,
            // RestartLog::record cuts reasons to 160 characters.
            reason: "x".repeat(160),
        };
        let handover = Handover {
            holder_pid: u32::MAX,
            generation: u64::MAX,
            negotiated: Some(vec![255; fardisk_fuse::init::NEGOTIATED_BYTES]),
            policy: RestartPolicy { restarts_max: u32::MAX, window_s: u64::MAX },
            restarts_total: u64::MAX,
            upgrades_total: u64::MAX,
            crashes_in_window: u64::MAX,
            recent: vec![exit; super::super::restarts::RECENT_EXITS_KEPT],
        };
        let bytes = encode_message(&handover).expect("encode");
        assert!(bytes.len() <= handover::MESSAGE_BYTES_MAX, "{} bytes", bytes.len());
    }

    #[test]
    fn messages_cross_a_socket_pair_whole() {
        let (holder, engine) = socket_pair().expect("socketpair");
        send_json(&engine, &EngineMessage::Serving { negotiated: vec![1, 2, 3] }, &[])
            .expect("send");
        send_json(&engine, &EngineMessage::Exported, &[]).expect("send");
        let (first, _): (EngineMessage, _) = recv_json(&holder).expect("first");
        let (second, _): (EngineMessage, _) = recv_json(&holder).expect("second");
        assert_eq!(first, EngineMessage::Serving { negotiated: vec![1, 2, 3] });
        assert_eq!(second, EngineMessage::Exported);
    }

    #[test]
    fn a_message_of_a_newer_format_is_refused_in_one_line() {
        let (holder, engine) = socket_pair().expect("socketpair");
        // What a newer holder would send: version 2, a correct checksum.
        let mut w = fardisk_engine::codec::Writer::with_capacity(64);
        w.bytes(frame::LINK_MAGIC).u32(frame::FRAME_VERSION + 1).u32(2).bytes(b"{}");
        w.seal();
        handover::send_fds(&holder, &w.into_inner(), &[]).expect("send");
        let e = recv_json::<Handover>(&engine).expect_err("refused");
        let line = format!("{e:#}");
        assert!(line.starts_with("holder link message: format version 2 is newer"), "{line}");
        assert!(e.downcast_ref::<std::io::Error>().is_none(), "not a receive error: {line}");
        assert!(!line.contains('\n'), "{line}");
    }
}
