//! `fardisk import` (start the daemon, in the background by default) and `fardisk export`.

use crate::config::Config;
use crate::control::daemon_options::parse_listen;
use crate::control::{call, is_alive, DaemonOptions, DaemonRunner, NbdListen, Request};
use crate::paths::PoolRecord;
use anyhow::{bail, Context, Result};
use fardisk_engine::objstore::SimulateSpec;
use fardisk_engine::pool::PointInTime;
use fardisk_engine::PoolConfig;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, clap::Args)]
pub struct ImportArgs {
    pub pool: String,
    /// Where the pool lives; defaults to the URL it was created or last imported with
    pub store_url: Option<String>,
    /// Mount a directory where each volume is an image file DIR/VOLUME
    #[arg(long, value_name = "DIR")]
    pub mount: Option<PathBuf>,
    /// Serve volumes over NBD: unix:PATH or tcp:HOST:PORT (repeatable)
    #[arg(long, value_name = "ADDR")]
    pub nbd: Vec<String>,
    /// Import even though a log device is missing (like `zpool import -m`)
    #[arg(long)]
    pub missing_log: bool,
    /// Take the pool over from another live writer, which is fenced
    #[arg(long)]
    pub force: bool,
    /// The newest root does not verify: import at the newest intact one and discard the damaged
    /// txgs (like `zpool import -F`); says what it discards and writes it into the history
    #[arg(long)]
    pub rewind: bool,
    /// Stay in the foreground (logs to stderr) instead of starting a background daemon
    #[arg(long)]
    pub foreground: bool,
    /// Put the store "far away": latency=MS[,jitter=MS][,bandwidth=BYTES_PER_S]
    #[arg(long, value_name = "SPEC")]
    pub simulate: Option<String>,
    /// The pool's encryption key file (default: FARDISK_KEY, FARDISK_KEY_FILE, or the file
    /// recorded on this host at create/import)
    #[arg(long, value_name = "PATH")]
    pub key_file: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics (ADDR: HOST:PORT or PORT; loopback only
    /// unless --metrics-public). Off by default
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "")]
    pub metrics: Option<String>,
    /// Allow --metrics on a non-loopback address
    #[arg(long)]
    pub metrics_public: bool,
    /// Open the pool read-only: nothing is written to the store, the log or the cache devices,
    /// and the writer (if any) goes on. Implied by --txg and --at
    #[arg(long)]
    pub read_only: bool,
    /// Read-only, as the pool was at this txg (any root still retained: see root_retention_s)
    #[arg(long, value_name = "TXG", conflicts_with = "at")]
    pub txg: Option<u64>,
    /// Read-only, as the pool was at this time: the newest root published at or before it
    /// (UTC, "YYYY-MM-DD HH:MM:SS", or Unix seconds)
    #[arg(long, value_name = "TIME")]
    pub at: Option<String>,
    /// The name to give the pool on this host (its socket, logs, mount label), so a read-only
    /// import can run beside the writer's
    #[arg(long = "as", value_name = "NAME")]
    pub local_name: Option<String>,
    /// FUSE over io_uring for --mount: auto (when the kernel offers it, i.e.
    /// /sys/module/fuse/parameters/enable_uring is Y), on (turn that switch on if it is off;
    /// refuse on a kernel without it), off (/dev/fuse only)
    #[arg(long, value_name = "on|off|auto", default_value = "auto")]
    pub fuse_uring: String,
    /// Keep the FUSE mount alive across engine restarts: a small holder process owns the
    /// mount and restarts the engine whenever it exits (log replay, then the requests that
    /// were in flight are sent again), so users of the images see a pause, not an error.
    /// Serves through /dev/fuse (not io_uring). Enables `fardisk upgrade`
    #[arg(long, requires = "mount")]
    pub holder: bool,
    /// Attach each volume's image to a loop device with direct I/O and keep
    /// /dev/fardisk/POOL/VOLUME pointing at it, across engine restarts and upgrades; new
    /// volumes get theirs at once; detached at export (refused while one is mounted)
    #[arg(long, requires = "mount")]
    pub block_devices: bool,
    /// With --holder: most unplanned engine restarts within --restart-window; one more and the
    /// holder stops (and the mount with it)
    #[arg(long, default_value = "10", value_name = "N")]
    pub restart_max: u32,
    /// With --holder: the window --restart-max counts in
    #[arg(long, default_value = "60", value_name = "SECONDS")]
    pub restart_window: u64,
    /// With --holder: how long the mount's requests wait in the kernel for a new engine after
    /// the last one went, while new engines cannot import (store unreachable, a device
    /// missing) or hang in import; then every request fails with EIO and `status` says why
    #[arg(long, default_value = "300", value_name = "SECONDS")]
    pub reimport_wait: u64,
    /// How long to wait for a background import to be ready
    #[arg(long, default_value = "600", value_name = "SECONDS")]
    pub wait: u64,
}

fn resolve(a: &ImportArgs, cfg: &Config) -> Result<(PoolRecord, DaemonOptions)> {
    let known = cfg.paths.load_record(&a.pool);
    let store_url = match (&a.store_url, &known) {
        (Some(u), _) => u.clone(),
        (None, Some(r)) => r.store_url.clone(),
        (None, None) => bail!("pool '{}' is not known on this host; give its STORE_URL", a.pool),
    };
    let simulate_text =
        a.simulate.clone().or_else(|| known.as_ref().and_then(|r| r.simulate.clone()));
    let simulate = simulate_text
        .as_deref()
        .map(SimulateSpec::parse)
        .transpose()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let nbd = a.nbd.iter().map(|s| NbdListen::parse(s)).collect::<Result<Vec<_>>>()?;
    let key = crate::keys::resolve(
        cfg,
        a.key_file.as_deref(),
        known.as_ref().and_then(|r| r.key_file.as_deref()),
    )?;
    let key_file = key.as_ref().and_then(|k| k.file.as_ref()).map(|p| p.display().to_string());
    let record = PoolRecord {
        name: a.local_name.clone().unwrap_or_else(|| a.pool.clone()),
        store_url: store_url.clone(),
        simulate: simulate_text,
        key_file,
    };
    let read_only = point_in_time(a)?;
    if a.local_name.is_some() && read_only.is_none() {
        bail!("--as names a read-only import; add --read-only, --txg or --at");
    }
    let fuse_uring =
        crate::fuse::UringMode::parse(&a.fuse_uring).map_err(|e| anyhow::anyhow!("{e}"))?;
    let opts = DaemonOptions {
        fuse_uring,
        block_devices: a.block_devices,
        read_only,
        store_pool: a.pool.clone(),
        pool: a.local_name.clone().unwrap_or_else(|| a.pool.clone()),
        store_url,
        simulate,
        mount: a.mount.clone(),
        nbd,
        force: a.force,
        missing_log: a.missing_log,
        rewind: a.rewind,
        config: PoolConfig {
            held_records_dir: Some(cfg.paths.held_dir()),
            ..PoolConfig::default()
        },
        key: key.map(|k| k.key),
        metrics: a
            .metrics
            .clone()
            .or_else(|| cfg.metrics.clone())
            .as_deref()
            .map(|m| parse_listen(m, a.metrics_public))
            .transpose()?,
    };
    Ok((record, opts))
}

/// `--read-only`, `--txg N` or `--at TIME` as the point the pool opens at.
fn point_in_time(a: &ImportArgs) -> Result<Option<PointInTime>> {
    if (a.force || a.missing_log || a.rewind) && (a.read_only || a.txg.is_some() || a.at.is_some())
    {
        bail!("--force, --missing-log and --rewind concern a writable import; a read-only one needs none of them");
    }
    Ok(match (a.txg, &a.at) {
        (Some(t), _) => Some(PointInTime::Txg(t)),
        (None, Some(at)) => Some(PointInTime::TimeMs(super::utc::parse_time_ms(at)?)),
        (None, None) if a.read_only => Some(PointInTime::Latest),
        (None, None) => None,
    })
}

pub fn run(a: ImportArgs, cfg: &Config, run_daemon: DaemonRunner) -> Result<()> {
    let (record, opts) = resolve(&a, cfg)?;
    if a.force && !a.foreground {
        eprintln!(
            "fardisk: --force takes the pool from its writer. With multihost=off, a writer that is still running keeps acknowledging sync writes from its own intent log until its next commit finds it fenced, and those writes are lost; with multihost=on this import first waits out that writer's lease (fardisk set multihost=on POOL)."
        );
    }
    let engine_of_holder = std::env::var_os(crate::holder::link::HOLDER_FD_ENV).is_some();
    if a.holder && a.fuse_uring == "on" {
        bail!("--holder serves through /dev/fuse: a request inside an io_uring entry when an engine dies is not sent again by the kernel (Linux 6.18), so a restart could lose it. Leave out --fuse-uring on (or give --fuse-uring off)");
    }
    if !engine_of_holder && crate::holder::is_held(&cfg.paths, &opts.pool) {
        bail!(
            "pool '{}' already has a holder on this host (its engine is restarting, or it gave up: `fardisk status {}` says which)",
            opts.pool,
            opts.pool
        );
    }
    if !engine_of_holder {
        // What a holder that gave up left for `status` is history once the pool is imported.
        crate::holder::state::remove(&crate::holder::state::path(&cfg.paths, &opts.pool));
    }
    let socket = cfg.paths.control_socket(&opts.pool);
    let imported = std::os::unix::net::UnixStream::connect(&socket).is_ok();
    if let (true, false, false, Some(dir)) = (a.block_devices, engine_of_holder, imported, &a.mount)
    {
        // Before anything mounts there: devices a daemon that died without a holder left over
        // its images (the dead mount still names them by path).
        for line in crate::blockdev::clear_stale(dir) {
            eprintln!("fardisk: {}", line.unwrap_or_else(|e| e));
        }
    }
    if imported {
        let hint = if opts.read_only.is_some() {
            "; give the read-only import another local name with --as NAME"
        } else {
            ""
        };
        bail!(
            "pool '{}' is already imported on this host (control socket {}){hint}",
            opts.pool,
            socket.display()
        );
    }
    if a.foreground && a.holder && !engine_of_holder {
        return crate::holder::run(crate::holder::HolderConfig {
            pool: opts.pool.clone(),
            mount: opts.mount.clone().context("--holder needs --mount DIR")?,
            engine_exe: engine_exe()?,
            engine_args: std::env::args().skip(1).collect(),
            policy: crate::holder::restarts::RestartPolicy {
                restarts_max: a.restart_max,
                window_s: a.restart_window.max(1),
            },
            reimport_wait: Duration::from_secs(a.reimport_wait),
            paths: cfg.paths.clone(),
            allow_other: false,
        });
    }
    if a.foreground {
        return run_daemon(opts, cfg);
    }
    start_background(&a, cfg, &record, opts.read_only.is_some())
}

/// Re-executes this binary with --foreground, detached, logging to the pool's log file, and waits
/// until its control socket answers (or it dies, whose last log line is then the error).
fn start_background(
    a: &ImportArgs,
    cfg: &Config,
    record: &PoolRecord,
    read_only: bool,
) -> Result<()> {
    let name = record.name.as_str();
    let log = cfg.paths.log_file(name);
    std::fs::create_dir_all(log.parent().context("log dir")?)?;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .with_context(|| format!("cannot open {}", log.display()))?;
    let start_len = out.metadata().map(|m| m.len()).unwrap_or(0);
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    args.push("--foreground".into());
    let exe = std::env::current_exe()?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(&args).stdin(std::process::Stdio::null()).stdout(out.try_clone()?).stderr(out);
    // The daemon reads the same configuration (environment and config file) when it starts;
    // without a log filter there it logs at info.
    if cfg.log.is_none() {
        cmd.env("FARDISK_LOG", "info");
    }
    // The allocator's start-time settings, so the daemon need not start itself again for them.
    fardisk_common::malloc::with_tunables(&mut cmd);
    // SAFETY: the pre_exec closure only calls setsid(2), which is async-signal-safe and touches
    // no memory of the parent.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("cannot start the daemon")?;
    let socket = cfg.paths.control_socket(name);
    let deadline = Instant::now() + Duration::from_secs(a.wait);
    let rt = super::runtime()?;
    // On a terminal: a spinner showing what the daemon is doing (log replay, L2ARC open, mount).
    let spinner = crate::progress::spinner(cfg.progress, &format!("importing {name}"));
    while Instant::now() < deadline {
        if let Some(sp) = &spinner {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(last) = text
                .get(start_len as usize..)
                .and_then(|t| t.lines().rev().find(|l| !l.trim().is_empty()))
            {
                sp.set_message(format!("importing {name}: {}", daemon_log_message(last)));
            }
        }
        if let Some(status) = child.try_wait()? {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let tail = text.get(start_len as usize..).unwrap_or("");
            let last = tail.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
            let last = last.trim_start_matches("fardisk: ");
            bail!("{last} (daemon exited with {status}; log: {})", log.display());
        }
        if rt.block_on(is_alive(&socket)) {
            if let Some(sp) = &spinner {
                sp.finish_and_clear();
            }
            if read_only {
                // Not remembered: a later plain `fardisk import` must not come back read-only.
                println!(
                    "pool '{}' imported read-only as '{name}' (daemon pid {}, log {})",
                    a.pool,
                    child.id(),
                    log.display()
                );
            } else {
                cfg.paths.save_record(record)?;
                if a.holder {
                    // The child is the holder; the engine that answers is its child.
                    let engine = rt
                        .block_on(call(&socket, Request::Ping))
                        .ok()
                        .and_then(|p| p["pid"].as_u64())
                        .map_or_else(|| "unknown".to_owned(), |p| p.to_string());
                    println!(
                        "pool '{name}' imported (holder pid {}, engine pid {engine}, log {})",
                        child.id(),
                        log.display()
                    );
                    // Under a holder every write is durable before its reply; without a log
                    // that is a txg per write (or per group of concurrent writes).
                    let has_log =
                        rt.block_on(call(&socket, Request::Status)).map(|st| !st["log"].is_null());
                    if matches!(has_log, Ok(false)) {
                        println!(
                            "note: pool '{name}' has no log device: under --holder each write waits for a txg in the store; add one for writes at log speed (fardisk add {name} log DEVICE)"
                        );
                    }
                } else {
                    println!(
                        "pool '{name}' imported (daemon pid {}, log {})",
                        child.id(),
                        log.display()
                    );
                }
            }
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("the daemon did not become ready within {} s; see {}", a.wait, log.display())
}

/// The binary the holder starts as each engine: the path this one was started from, so an
/// upgrade that replaced the file starts the new binary.
fn engine_exe() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find this binary")?;
    // After the file was replaced, /proc/self/exe reads "PATH (deleted)".
    let text = exe.to_string_lossy();
    Ok(PathBuf::from(text.strip_suffix(" (deleted)").unwrap_or(&text)))
}

/// `fardisk upgrade POOL`: the engine hands over to a new one started from the installed
/// binary; waits until the new engine answers.
pub async fn upgrade(pool: &str, wait_s: u64, cfg: &Config) -> Result<()> {
    let socket = cfg.paths.control_socket(pool);
    if !is_alive(&socket).await {
        bail!("pool '{pool}' is not imported on this host (or its engine is restarting: `fardisk status {pool}`)");
    }
    let started = Instant::now();
    let v = call(&socket, Request::Upgrade).await.context("upgrade refused")?;
    let old_pid = v["pid"].as_u64().unwrap_or(0);
    let deadline = started + Duration::from_secs(wait_s);
    while Instant::now() < deadline {
        if let Ok(p) = call(&socket, Request::Ping).await {
            let new_pid = p["pid"].as_u64().unwrap_or(0);
            if new_pid != old_pid && new_pid != 0 {
                let took_s = started.elapsed().as_secs_f64();
                // A new engine also answers when the old one died or failed its export: the
                // holder then starts one as after a crash. Only its record of the old engine's
                // exit says which.
                let status = call(&socket, Request::Status).await.ok();
                return match old_engine_exit(status.as_ref(), old_pid) {
                    OldEngineExit::HandedOver => {
                        println!(
                            "pool '{pool}' upgraded: engine pid {old_pid} handed over to pid {new_pid} in {took_s:.1} s"
                        );
                        Ok(())
                    }
                    OldEngineExit::Went(reason) => bail!(
                        "pool '{pool}': engine pid {old_pid} did not hand over, it went ({reason}); the holder started pid {new_pid} as after a crash, which replayed the log (acknowledged writes are kept): see the pool's log for why, then `fardisk upgrade {pool}` again"
                    ),
                    OldEngineExit::Unknown => bail!(
                        "pool '{pool}': a new engine (pid {new_pid}) answers, but its holder does not say how engine pid {old_pid} went; see `fardisk status {pool}` and the pool's log"
                    ),
                };
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("the new engine of pool '{pool}' did not answer within {wait_s} s; see `fardisk status {pool}` and the pool's log")
}

/// How the engine an upgrade asked to hand over went, from the new engine's `status --json`
/// (`engine_holder.recent_exits`, newest last).
#[derive(Debug, PartialEq, Eq)]
enum OldEngineExit {
    HandedOver,
    /// It exited otherwise (a crash, a failed export): the holder's reason.
    Went(String),
    Unknown,
}

fn old_engine_exit(status: Option<&serde_json::Value>, old_pid: u64) -> OldEngineExit {
    let exits = status.and_then(|s| s["engine_holder"]["recent_exits"].as_array());
    let Some(exit) =
        exits.and_then(|e| e.iter().rev().find(|x| x["pid"].as_u64() == Some(old_pid)))
    else {
        return OldEngineExit::Unknown;
    };
    match exit["kind"].as_str() {
        Some("upgrade") => OldEngineExit::HandedOver,
        Some(_) => {
            OldEngineExit::Went(exit["reason"].as_str().unwrap_or("no reason given").to_owned())
        }
        None => OldEngineExit::Unknown,
    }
}

/// A daemon log line without its timestamp and level, for the import spinner.
fn daemon_log_message(line: &str) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    let start = words
        .iter()
        .position(|w| matches!(*w, "INFO" | "WARN" | "ERROR" | "DEBUG"))
        .map(|i| i + 1)
        .unwrap_or(0);
    let text = words[start..].join(" ");
    text.chars().take(100).collect()
}

/// How long `export` waits for a holder to exit after its engine exported (it unmounts and
/// removes its state first) or after it was asked to stop.
const HOLDER_EXIT_WAIT: Duration = Duration::from_secs(30);

pub async fn export(pool: &str, cfg: &Config) -> Result<()> {
    let socket = cfg.paths.control_socket(pool);
    let held = crate::holder::is_held(&cfg.paths, pool);
    if !is_alive(&socket).await {
        if held {
            return stop_holder_without_engine(pool, cfg);
        }
        bail!("{}", super::query::not_imported(pool, &socket));
    }
    // The daemon stops answering other requests while it drains; say up front how much there is.
    let dirty = call(&socket, Request::Status)
        .await
        .ok()
        .and_then(|v| v["dirty_bytes"].as_u64())
        .unwrap_or(0);
    let spinner = crate::progress::spinner(
        cfg.progress,
        &format!("exporting {pool}: draining {} to the store", super::size::human(dirty)),
    );
    let v = call(&socket, Request::Export).await.context("export failed");
    if let Some(sp) = spinner {
        sp.finish_and_clear();
    }
    let v = v?;
    // Under a holder the mount is the holder's: the export is done when it has unmounted and
    // exited, so that an `import` right after is not refused as a second holder.
    if held && !crate::holder::wait_released(&cfg.paths, pool, HOLDER_EXIT_WAIT) {
        bail!(
            "pool '{pool}' exported at txg {}, but its holder has not exited within {} s; `fardisk status {pool}` says what it does",
            v["txg"],
            HOLDER_EXIT_WAIT.as_secs()
        );
    }
    println!("pool '{pool}' exported at txg {}", v["txg"]);
    Ok(())
}

/// `export` of a pool whose holder runs without an engine (one restarting, or refusing
/// requests after `--reimport-wait`): nothing can drain to the store, so the holder is asked
/// to stop (SIGTERM: it unmounts and exits) and the next import replays the log.
fn stop_holder_without_engine(pool: &str, cfg: &Config) -> Result<()> {
    let state = crate::holder::state::read(&crate::holder::state::path(&cfg.paths, pool));
    let Some(pid) = state.as_ref().map(|s| s.holder_pid).filter(|p| *p > 1) else {
        bail!("pool '{pool}' has a holder but no readable state file naming it; stop it with `kill -TERM` on its pid (`fardisk status {pool}`)");
    };
    // SAFETY: kill(2) with a plain signal; the pid comes from the holder's own state file
    // and the holder still holds its lock (checked above), so it is that process.
    if unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) } != 0 {
        bail!(
            "cannot signal the holder (pid {pid}) of pool '{pool}': {}",
            std::io::Error::last_os_error()
        );
    }
    if !crate::holder::wait_released(&cfg.paths, pool, HOLDER_EXIT_WAIT) {
        bail!(
            "the holder (pid {pid}) of pool '{pool}' did not stop within {} s of SIGTERM",
            HOLDER_EXIT_WAIT.as_secs()
        );
    }
    println!("pool '{pool}': no engine served, so nothing was drained; its holder (pid {pid}) stopped and unmounted. The next `fardisk import {pool}` replays the log");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::holder::restarts::{EngineExit, ExitKind};

    /// `status --json` of a new engine whose holder recorded `exits` (as the holder writes them).
    fn status_with(exits: &[(u32, ExitKind, &str)]) -> serde_json::Value {
        let recent: Vec<EngineExit> = exits
            .iter()
            .map(|(pid, kind, reason)| EngineExit {
                at_ms: 1,
                pid: *pid,
                kind: *kind,
                reason: (*reason).to_owned(),
            })
            .collect();
        serde_json::json!({ "engine_holder": { "recent_exits": recent } })
    }

    #[test]
    fn an_upgrade_is_reported_only_when_the_old_engine_handed_over() {
        let handed = status_with(&[
            (7, ExitKind::Crash, "killed by signal 9"),
            (9, ExitKind::Upgrade, "upgrade"),
        ]);
        assert_eq!(old_engine_exit(Some(&handed), 9), OldEngineExit::HandedOver);
        // Killed (or its export failed) after it was asked to hand over: the holder restarted.
        let crashed = status_with(&[(9, ExitKind::Crash, "exit status 1")]);
        assert_eq!(old_engine_exit(Some(&crashed), 9), OldEngineExit::Went("exit status 1".into()));
        // The record names another engine only, or there is no holder record at all.
        assert_eq!(old_engine_exit(Some(&handed), 8), OldEngineExit::Unknown);
        assert_eq!(old_engine_exit(Some(&serde_json::json!({})), 9), OldEngineExit::Unknown);
        assert_eq!(old_engine_exit(None, 9), OldEngineExit::Unknown);
    }
}
