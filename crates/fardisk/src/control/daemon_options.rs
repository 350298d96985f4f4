//! What `fardisk import` hands the daemon it starts: where the pool is, how to serve it, and the
//! function that runs a daemon in this process (`import --foreground`). The binary passes
//! `daemon::run_foreground` to the CLI, so the CLI starts a daemon without depending on it.

use crate::config::Config;
use anyhow::{bail, Context, Result};
use fardisk_engine::objstore::{EncryptionKey, SimulateSpec};
use fardisk_engine::PoolConfig;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Runs a daemon in this process until it exports (`import --foreground`).
pub type DaemonRunner = fn(DaemonOptions, &Config) -> Result<()>;

#[derive(Debug, Clone, PartialEq)]
pub enum NbdListen {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

impl NbdListen {
    pub fn parse(s: &str) -> Result<NbdListen> {
        if let Some(p) = s.strip_prefix("unix:") {
            return Ok(NbdListen::Unix(PathBuf::from(p)));
        }
        if let Some(a) = s.strip_prefix("tcp:") {
            let addr: SocketAddr = a.parse().with_context(|| {
                format!("--nbd {s}: expected tcp:HOST:PORT, e.g. tcp:127.0.0.1:10809")
            })?;
            return Ok(NbdListen::Tcp(addr));
        }
        bail!("--nbd {s}: expected unix:PATH or tcp:HOST:PORT")
    }
}

#[derive(Debug, Clone)]
pub struct DaemonOptions {
    pub pool: String,
    pub store_url: String,
    pub simulate: Option<SimulateSpec>,
    pub mount: Option<PathBuf>,
    pub nbd: Vec<NbdListen>,
    pub force: bool,
    pub missing_log: bool,
    /// `--rewind`: import at the newest intact root when newer ones are damaged.
    pub rewind: bool,
    pub config: PoolConfig,
    pub key: Option<EncryptionKey>,
    /// Where to serve Prometheus metrics (`--metrics`); None: no endpoint.
    pub metrics: Option<SocketAddr>,
    /// Open read-only at this point (`--read-only`, `--txg`, `--at`): nothing is written to the
    /// store, the log or the cache devices.
    pub read_only: Option<fardisk_engine::pool::PointInTime>,
    /// The pool's name in its store (`pool` is its name on this host, which `--as` may change).
    pub store_pool: String,
    /// `--fuse-uring`: whether the FUSE mount uses io_uring (and may turn the kernel's switch on).
    pub fuse_uring: crate::fuse::UringMode,
    /// `--block-devices`: each volume's image on a loop device, at /dev/fardisk/POOL/VOLUME.
    pub block_devices: bool,
}

/// Port used when `--metrics` gives only a host or nothing (9464 is the Prometheus exporter
/// convention for "OpenTelemetry/other" and free of well-known clashes).
pub const METRICS_PORT_DEFAULT: u16 = 9464;

/// Parses `--metrics ADDR`: `HOST:PORT`, `:PORT`/`PORT` (loopback), or empty (loopback, default
/// port). Refuses a non-loopback address unless `public`.
pub fn parse_listen(text: &str, public: bool) -> Result<SocketAddr> {
    let t = text.trim();
    let addr: SocketAddr = if t.is_empty() {
        SocketAddr::from(([127, 0, 0, 1], METRICS_PORT_DEFAULT))
    } else if let Ok(port) = t.trim_start_matches(':').parse::<u16>() {
        SocketAddr::from(([127, 0, 0, 1], port))
    } else {
        t.parse().with_context(|| {
            format!(
                "--metrics {t}: expected HOST:PORT or PORT, e.g. 127.0.0.1:{METRICS_PORT_DEFAULT}"
            )
        })?
    };
    if !addr.ip().is_loopback() && !public {
        bail!("--metrics {addr}: not a loopback address; pool figures would be visible to the network. Use 127.0.0.1:PORT, or add --metrics-public to mean it");
    }
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!(parse_listen("", false).unwrap(), "127.0.0.1:9464".parse().unwrap());
        assert_eq!(parse_listen("9100", false).unwrap(), "127.0.0.1:9100".parse().unwrap());
        assert_eq!(parse_listen(":9100", false).unwrap(), "127.0.0.1:9100".parse().unwrap());
        assert_eq!(parse_listen("[::1]:9100", false).unwrap(), "[::1]:9100".parse().unwrap());
        let e = parse_listen("0.0.0.0:9100", false).unwrap_err().to_string();
        assert!(e.contains("not a loopback address") && e.contains("--metrics-public"), "{e}");
        assert_eq!(parse_listen("0.0.0.0:9100", true).unwrap(), "0.0.0.0:9100".parse().unwrap());
        assert!(parse_listen("localhost:x", false)
            .unwrap_err()
            .to_string()
            .contains("expected HOST:PORT"));
    }
}
