//! systemd readiness and watchdog (the `sd_notify` datagram protocol, spoken directly: one
//! datagram of `KEY=VALUE` lines to the socket named by `$NOTIFY_SOCKET`; a name starting with
//! '@' is in the abstract namespace). The daemon sends `READY=1` once the pool serves,
//! `STATUS=...` lines as it goes, `STOPPING=1` on export, and `WATCHDOG=1` at half of
//! `$WATCHDOG_USEC` from its serving loop (contrib/systemd/fardisk@.service: Type=notify,
//! NotifyAccess=all, WatchdogSec=). Outside systemd (no `$NOTIFY_SOCKET`) all of it is a no-op.
//!
//! Failures to send are logged once at debug level and never fatal: readiness is advice to the
//! service manager, the pool serves either way.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// The environment variable naming the service manager's socket.
pub const NOTIFY_SOCKET_ENV: &str = "NOTIFY_SOCKET";
/// The watchdog timeout the service manager expects keepalives within (microseconds).
pub const WATCHDOG_USEC_ENV: &str = "WATCHDOG_USEC";
/// The process the watchdog is meant for (systemd sets it to the service's main process).
pub const WATCHDOG_PID_ENV: &str = "WATCHDOG_PID";
/// Longest STATUS= text sent (a datagram stays small).
const STATUS_BYTES_MAX: usize = 400;

/// A connection to the service manager's notify socket.
#[derive(Debug)]
pub struct Notifier {
    socket: UnixDatagram,
    addr: SocketAddr,
}

impl Notifier {
    /// The notifier named by `$NOTIFY_SOCKET`, or None outside systemd (or when the name is
    /// unusable: said at debug level).
    pub fn from_env() -> Option<Notifier> {
        let name = std::env::var(NOTIFY_SOCKET_ENV).ok()?;
        match Notifier::connect(&name) {
            Ok(n) => Some(n),
            Err(e) => {
                tracing::debug!(error = %e, socket = %name, "sd_notify: cannot use NOTIFY_SOCKET");
                None
            }
        }
    }

    /// A notifier for socket `name`: a path, or '@' + an abstract name.
    pub fn connect(name: &str) -> std::io::Result<Notifier> {
        let addr = match name.strip_prefix('@') {
            Some(abstract_name) => {
                use std::os::linux::net::SocketAddrExt;
                SocketAddr::from_abstract_name(abstract_name.as_bytes())?
            }
            None if name.starts_with('/') => SocketAddr::from_pathname(name)?,
            None => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "NOTIFY_SOCKET is neither an absolute path nor an @abstract name",
                ))
            }
        };
        Ok(Notifier { socket: UnixDatagram::unbound()?, addr })
    }

    /// Sends `state` (newline-separated `KEY=VALUE` lines) in one datagram.
    pub fn send(&self, state: &str) -> std::io::Result<()> {
        self.socket.send_to_addr(state.as_bytes(), &self.addr).map(|_| ())
    }

    /// `READY=1` with a status line.
    pub fn ready(&self, status: &str) {
        self.quietly(&format!("READY=1\nSTATUS={}", clip(status)));
    }

    pub fn status(&self, status: &str) {
        self.quietly(&format!("STATUS={}", clip(status)));
    }

    pub fn stopping(&self, status: &str) {
        self.quietly(&format!("STOPPING=1\nSTATUS={}", clip(status)));
    }

    pub fn watchdog(&self) {
        self.quietly("WATCHDOG=1");
    }

    fn quietly(&self, state: &str) {
        if let Err(e) = self.send(state) {
            tracing::debug!(error = %e, "sd_notify: send failed");
        }
    }
}

/// One line, at most [`STATUS_BYTES_MAX`] bytes (cut on a character boundary).
fn clip(status: &str) -> String {
    let line = status.replace('\n', " ");
    let mut end = line.len().min(STATUS_BYTES_MAX);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].to_string()
}

/// How often to send `WATCHDOG=1`: half of `watchdog_usec`, when the watchdog is meant for this
/// process. `watchdog_pid` (systemd's `$WATCHDOG_PID`) names the main process; an engine
/// started by a holder (`under_holder`) keeps its holder's watchdog alive, so its parent's pid
/// counts as its own.
pub fn watchdog_interval(
    watchdog_usec: Option<&str>,
    watchdog_pid: Option<&str>,
    own_pid: u32,
    parent_pid: u32,
    under_holder: bool,
) -> Option<Duration> {
    let usec: u64 = watchdog_usec?.trim().parse().ok().filter(|u| *u > 0)?;
    if let Some(pid) = watchdog_pid {
        let pid: u32 = pid.trim().parse().ok()?;
        if pid != own_pid && !(under_holder && pid == parent_pid) {
            return None;
        }
    }
    Some(Duration::from_micros(usec / 2).max(Duration::from_millis(1)))
}

/// [`watchdog_interval`] from this process's environment.
pub fn watchdog_interval_from_env(under_holder: bool) -> Option<Duration> {
    let usec = std::env::var(WATCHDOG_USEC_ENV).ok();
    let pid = std::env::var(WATCHDOG_PID_ENV).ok();
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() } as u32;
    watchdog_interval(usec.as_deref(), pid.as_deref(), std::process::id(), parent, under_holder)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receive(socket: &UnixDatagram) -> String {
        let mut buf = [0u8; 1024];
        let n = socket.recv(&mut buf).expect("recv");
        String::from_utf8(buf[..n].to_vec()).expect("utf-8")
    }

    #[test]
    fn messages_reach_a_real_notify_socket_by_path() {
        let dir = std::env::temp_dir().join(format!("fardisk-sd-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let manager = UnixDatagram::bind(&path).expect("bind");
        manager.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        let n = Notifier::connect(path.to_str().expect("utf-8 path")).expect("connect");
        n.ready("serving pool tank\nsecond line");
        assert_eq!(receive(&manager), "READY=1\nSTATUS=serving pool tank second line");
        n.watchdog();
        assert_eq!(receive(&manager), "WATCHDOG=1");
        n.status(&"é".repeat(300));
        let status = receive(&manager);
        assert!(status.starts_with("STATUS=é") && status.len() <= 7 + STATUS_BYTES_MAX, "{status}");
        n.stopping("exporting");
        assert_eq!(receive(&manager), "STOPPING=1\nSTATUS=exporting");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_abstract_notify_socket_is_honoured() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("fardisk-sd-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("addr");
        let manager = UnixDatagram::bind_addr(&addr).expect("bind abstract");
        manager.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        let n = Notifier::connect(&format!("@{name}")).expect("connect");
        n.ready("serving");
        assert_eq!(receive(&manager), "READY=1\nSTATUS=serving");
    }

    #[test]
    fn a_relative_notify_socket_is_refused() {
        assert!(Notifier::connect("notify.sock").is_err());
    }

    #[test]
    fn the_watchdog_interval_is_half_the_timeout_and_only_for_its_process() {
        let half = Some(Duration::from_secs(15));
        assert_eq!(watchdog_interval(Some("30000000"), None, 10, 1, false), half);
        assert_eq!(watchdog_interval(Some("30000000"), Some("10"), 10, 1, false), half);
        assert_eq!(watchdog_interval(Some("30000000"), Some("11"), 10, 1, false), None);
        // An engine under a holder: the watchdog is the holder's (the service's main process).
        assert_eq!(watchdog_interval(Some("30000000"), Some("7"), 10, 7, true), half);
        assert_eq!(watchdog_interval(Some("30000000"), Some("7"), 10, 7, false), None);
        assert_eq!(watchdog_interval(None, None, 10, 1, false), None);
        assert_eq!(watchdog_interval(Some("0"), None, 10, 1, false), None);
        assert_eq!(watchdog_interval(Some("x"), None, 10, 1, false), None);
    }
}
