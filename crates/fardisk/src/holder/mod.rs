//! The holder: a small long-lived process per pool that owns the FUSE mount's /dev/fuse
//! descriptor and starts the engine (`fardisk import --foreground` of the same binary) as its
//! child. When the engine exits for any reason but an export, the holder starts a new one and
//! hands it the descriptor; the new engine imports the pool (log replay), resumes the
//! connection without INIT and asks the kernel to resend what its predecessor had read
//! (FUSE_NOTIFY_RESEND), so the mount's users see a pause, never an error.
//!
//! The holder does no I/O on the mount and serves no request: it mounts, waits on its child
//! and its link ([`link`]), counts exits against a budget ([`restarts`]) and unmounts when the
//! engine asks (export) or when the budget is spent. The control socket stays with the engine;
//! while no engine runs, `fardisk status` reads the holder's state file ([`state`]).

pub mod frame;
pub mod link;
pub mod restarts;
pub mod state;
mod supervise;

pub use supervise::UPGRADE_EXIT_CODE;

use crate::paths::HostPaths;
use anyhow::{bail, Context, Result};
use restarts::{EngineExit, ExitKind, RestartLog, RestartPolicy, Verdict};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// What `fardisk import --holder` starts.
#[derive(Debug, Clone)]
pub struct HolderConfig {
    /// The pool's name on this host.
    pub pool: String,
    pub mount: PathBuf,
    /// The binary each engine runs: the path, so an upgrade that replaced the file starts the
    /// new one.
    pub engine_exe: PathBuf,
    /// The engine's arguments (this process's own: the engine sees [`link::HOLDER_FD_ENV`]
    /// and serves instead of holding).
    pub engine_args: Vec<String>,
    pub policy: RestartPolicy,
    /// How long requests may wait in the kernel for an engine after the last serving one
    /// went (`import --reimport-wait`): then they fail with EIO (see [`refuse_requests`]).
    pub reimport_wait: std::time::Duration,
    pub paths: HostPaths,
    pub allow_other: bool,
}

/// Set by SIGTERM/SIGINT/SIGHUP: the holder asks the engine to export.
static STOP_ASKED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP_ASKED.store(true, Ordering::SeqCst);
}

/// Runs the holder until the engine exports the pool (Ok) or the restart budget is spent.
pub fn run(cfg: HolderConfig) -> Result<()> {
    let _lock = take_lock(&cfg.paths, &cfg.pool)?;
    protect_from_oom();
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::signal(
                signal,
                on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    }
    let state_path = state::path(&cfg.paths, &cfg.pool);
    let (device, mountpoint) = mount(&cfg)?;
    tracing::info!(mountpoint = %mountpoint.display(), pid = std::process::id(), "holder: mounted; starting the engine");
    // systemd's watchdog (WatchdogSec=) is the holder's to keep: see supervise::Watchdog.
    let watchdog = crate::sd_notify::Notifier::from_env().and_then(|notifier| {
        crate::sd_notify::watchdog_interval_from_env(false)
            .map(|half| supervise::Watchdog { notifier, timeout: half * 2 })
    });
    let mut log = RestartLog::new(cfg.policy);
    let mut negotiated: Option<Vec<u8>> = None;
    let mut generation = 0u64;
    // Engines in a row that went before they served (e.g. the store is unreachable at import).
    let mut failed_starts = 0u32;
    // Since when no engine serves after one did (monotonic, and wall ms for `status`): the
    // requests of the mount's users wait in the kernel from then on.
    let mut no_engine_since: Option<(std::time::Instant, u64)> = None;
    let reimport_wait_s = cfg.reimport_wait.as_secs();
    loop {
        generation += 1;
        let handover = link::Handover {
            holder_pid: std::process::id(),
            generation,
            negotiated: negotiated.clone(),
            policy: cfg.policy,
            restarts_total: log.restarts_total,
            upgrades_total: log.upgrades_total,
            crashes_in_window: log.crashes_in_window() as u64,
            recent: log.recent.iter().cloned().collect(),
        };
        let since_ms = no_engine_since.map(|(_, ms)| ms);
        state::write(
            &state_path,
            &state::HolderState::serving(&handover, None).waiting(since_ms, reimport_wait_s),
        );
        let serve_by = no_engine_since.map(|(t, _)| t + cfg.reimport_wait);
        let outcome = supervise::engine(
            &cfg,
            watchdog.as_ref(),
            &handover,
            device.as_fd(),
            &mountpoint,
            serve_by,
        )?;
        let served = outcome.negotiated.is_some();
        if served {
            failed_starts = 0;
            no_engine_since = None;
        }
        if let Some(n) = outcome.negotiated {
            negotiated = Some(n);
        }
        let reason = match &outcome.hung {
            Some(why) => format!("{why}, then {}", restarts::describe(outcome.status)),
            None => restarts::describe(outcome.status),
        };
        if outcome.exported && outcome.status.success() {
            tracing::info!("holder: the engine exported the pool; stopping");
            if !outcome.unmounted {
                unmount(&mountpoint);
            }
            state::remove(&state_path);
            return Ok(());
        }
        if generation == 1 && !served && !outcome.upgrading {
            // The first engine could not import (bad input, a missing device, no store): no
            // one has used the mount yet, so there is nothing to keep alive. Its own error is
            // the last line of the log, which the importing CLI shows: add nothing after it.
            unmount(&mountpoint);
            state::remove(&state_path);
            std::process::exit(outcome.status.code().filter(|c| *c != 0).unwrap_or(1));
        }
        if no_engine_since.is_none() {
            no_engine_since = Some((std::time::Instant::now(), state::wall_ms()));
        }
        let since_ms = no_engine_since.map(|(_, ms)| ms);
        let kind =
            if outcome.upgrading && outcome.status.code() == Some(supervise::UPGRADE_EXIT_CODE) {
                ExitKind::Upgrade
            } else {
                ExitKind::Crash
            };
        let exit = EngineExit {
            at_ms: state::wall_ms(),
            pid: outcome.pid,
            kind,
            reason: if kind == ExitKind::Upgrade { "upgrade".to_owned() } else { reason.clone() },
        };
        let verdict = if kind == ExitKind::Crash && !served {
            log.record_failed_start(exit);
            Verdict::Restart
        } else {
            log.record(exit)
        };
        // What `status` shows until the next engine answers: this exit, counted.
        let counted = link::Handover {
            generation: generation + 1,
            restarts_total: log.restarts_total,
            upgrades_total: log.upgrades_total,
            crashes_in_window: log.crashes_in_window() as u64,
            recent: log.recent.iter().cloned().collect(),
            ..handover.clone()
        };
        state::write(
            &state_path,
            &state::HolderState::serving(&counted, None).waiting(since_ms, reimport_wait_s),
        );
        match verdict {
            Verdict::Restart if STOP_ASKED.load(Ordering::SeqCst) => {
                tracing::warn!(%reason, "holder: the engine went while the holder was asked to stop; not restarting");
                unmount(&mountpoint);
                state::remove(&state_path);
                bail!("the engine went ({reason}) while stopping; the pool was not exported cleanly: the next import replays its log");
            }
            Verdict::Restart if kind == ExitKind::Crash && !served => {
                let waited = no_engine_since.map(|(t, _)| t.elapsed()).unwrap_or_default();
                if waited >= cfg.reimport_wait {
                    let line = format!(
                        "no engine could serve pool '{}' for {} s (--reimport-wait {reimport_wait_s} s; last: {reason}); every request on {} now fails with EIO. Fix the cause (the pool's log says it), then `fardisk export {}` stops this holder and `fardisk import` brings the pool back (README, Restarts)",
                        cfg.pool,
                        waited.as_secs(),
                        mountpoint.display(),
                        cfg.pool
                    );
                    let stopped = link::Handover { generation, ..counted };
                    let stopped = state::HolderState::serving(&stopped, Some(line.clone()));
                    return refuse_requests(
                        &device,
                        negotiated.as_deref(),
                        &mountpoint,
                        &state_path,
                        &stopped,
                        line,
                    );
                }
                // An engine that cannot get as far as serving usually fails the same way at
                // once: wait longer each time (never past the bound), so the holder neither
                // spins nor oversleeps the operator's limit.
                failed_starts += 1;
                let delay = restart_delay(failed_starts).min(cfg.reimport_wait - waited);
                tracing::warn!(
                    pid = outcome.pid,
                    %reason,
                    delay_ms = delay.as_millis() as u64,
                    "holder: the engine went before it served; starting another after a pause (requests wait in the kernel meanwhile)"
                );
                wait_unless_stopping(delay);
                if stop_asked() {
                    tracing::warn!("holder: asked to stop while no engine serves; stopping");
                    unmount(&mountpoint);
                    bail!("the holder was stopped while no engine served (last: {reason}); the pool was not exported cleanly: the next import replays its log");
                }
            }
            Verdict::Restart => match kind {
                ExitKind::Upgrade => {
                    tracing::info!(
                        pid = outcome.pid,
                        "holder: the engine handed over; starting the new binary"
                    )
                }
                ExitKind::Crash => tracing::warn!(
                    pid = outcome.pid,
                    %reason,
                    restarts = log.restarts_total,
                    "holder: the engine went; starting a new one (requests wait in the kernel meanwhile)"
                ),
            },
            Verdict::GiveUp(line) => {
                tracing::error!("holder: {line}");
                let stopped = link::Handover { generation, ..counted };
                state::write(
                    &state_path,
                    &state::HolderState::serving(&stopped, Some(line.clone())),
                );
                unmount(&mountpoint);
                bail!("{line}");
            }
        }
    }
}

/// After `--reimport-wait` without a serving engine: every request, the queued ones and the
/// ones to come, fails with EIO at once, and `status` and the log say why, until the operator
/// stops the holder (`fardisk export`, SIGTERM) or the mount goes. The holder keeps the
/// connection open meanwhile: closing it would end the requests with ENOTCONN instead, and
/// unmount the pool from under its users without a word.
fn refuse_requests(
    device: &OwnedFd,
    negotiated: Option<&[u8]>,
    mountpoint: &Path,
    state_path: &Path,
    stopped: &state::HolderState,
    line: String,
) -> Result<()> {
    tracing::error!("holder: {line}");
    state::write(state_path, stopped);
    let buffer_bytes = negotiated
        .and_then(fardisk_fuse::Negotiated::from_bytes)
        .map(|n| n.request_buffer_bytes())
        .unwrap_or(REFUSE_BUFFER_BYTES_DEFAULT);
    let answered = std::sync::atomic::AtomicU64::new(0);
    let end = fardisk_fuse::refuse::refuse_all(
        device,
        buffer_bytes,
        fardisk_fuse::Errno::EIO,
        &answered,
        &|| !stop_asked(),
    );
    let answered = answered.load(Ordering::Relaxed);
    match end {
        Ok(end) => tracing::warn!(answered, ?end, "holder: stopped failing requests; stopping"),
        Err(e) => tracing::error!(answered, error = %e, "holder: /dev/fuse failed; stopping"),
    }
    unmount(mountpoint);
    bail!("{line}")
}

/// The request buffer when no engine ever reported the negotiated sizes: the largest WRITE
/// the kernel sends (256 pages) and its headers.
const REFUSE_BUFFER_BYTES_DEFAULT: usize = (1 << 20) + (64 << 10);

/// Longest pause between engines that went before they served.
const RESTART_DELAY_MAX: std::time::Duration = std::time::Duration::from_secs(10);

/// 0.5 s, 1 s, 2 s, ... up to [`RESTART_DELAY_MAX`], for the `failed_starts`-th such engine.
fn restart_delay(failed_starts: u32) -> std::time::Duration {
    let ms = 500u64.saturating_mul(1 << failed_starts.saturating_sub(1).min(16));
    std::time::Duration::from_millis(ms).min(RESTART_DELAY_MAX)
}

/// Sleeps `delay` in short steps, ending early when the holder is asked to stop.
fn wait_unless_stopping(delay: std::time::Duration) {
    let step = std::time::Duration::from_millis(50);
    let steps = (delay.as_millis() / step.as_millis()).max(1);
    for _ in 0..steps {
        if stop_asked() {
            return;
        }
        std::thread::sleep(step);
    }
}

/// One holder per pool: an exclusive lock on `RUN_DIR/POOL.holder.lock`, held for the
/// holder's life (the kernel releases it when the holder dies, however it dies).
fn take_lock(paths: &HostPaths, pool: &str) -> Result<std::fs::File> {
    let path = state::lock_path(paths, pool);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let holder = state::read(&state::path(paths, pool)).map(|s| s.holder_pid).unwrap_or(0);
        bail!(
            "pool '{pool}' already has a holder (pid {holder}, lock {}); a second one is refused. `fardisk export {pool}` stops it",
            path.display()
        );
    }
    Ok(file)
}

/// Whether another process holds the pool's holder lock right now (a plain import refuses).
pub fn is_held(paths: &HostPaths, pool: &str) -> bool {
    let Ok(file) = std::fs::File::open(state::lock_path(paths, pool)) else { return false };
    // SAFETY: flock on a descriptor we own; a shared probe released when `file` closes.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) != 0 }
}

/// Waits until no process holds the pool's holder lock (the holder has exited), at most
/// `timeout`; whether it was released.
pub fn wait_released(paths: &HostPaths, pool: &str, timeout: std::time::Duration) -> bool {
    let step = std::time::Duration::from_millis(50);
    let steps = (timeout.as_millis() / step.as_millis()).max(1);
    for _ in 0..steps {
        if !is_held(paths, pool) {
            return true;
        }
        std::thread::sleep(step);
    }
    !is_held(paths, pool)
}

/// The kernel's OOM killer picks this process last: losing it loses the mount.
fn protect_from_oom() {
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", b"-1000") {
        tracing::debug!(error = %e, "holder: cannot lower its OOM score");
    }
}

/// Opens /dev/fuse and mounts the pool's directory on it, as the engine's own mount would.
fn mount(cfg: &HolderConfig) -> Result<(OwnedFd, PathBuf)> {
    crate::fuse::clear_stale_mount(&cfg.mount);
    std::fs::create_dir_all(&cfg.mount)
        .with_context(|| format!("cannot create mount point {}", cfg.mount.display()))?;
    let mountpoint = cfg.mount.canonicalize()?;
    let device = fardisk_fuse::mount::open_device().context("cannot open /dev/fuse (root?)")?;
    fardisk_fuse::mount::mount_with_fd(
        device.as_fd(),
        &mountpoint,
        &crate::fuse::image_mount_options(cfg.allow_other),
    )
    .with_context(|| format!("cannot mount FUSE at {}", mountpoint.display()))?;
    Ok((device, mountpoint))
}

/// Unmounts; a directory still in use (a loop device) is detached lazily.
pub(crate) fn unmount(mountpoint: &Path) -> Option<String> {
    match fardisk_fuse::mount::unmount(mountpoint, false) {
        Ok(()) => None,
        Err(e) => {
            let why = format!("unmount {}: {e}; detached lazily", mountpoint.display());
            tracing::warn!("holder: {why}");
            let _ = fardisk_fuse::mount::unmount(mountpoint, true);
            Some(why)
        }
    }
}

pub(crate) fn stop_asked() -> bool {
    STOP_ASKED.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_after_failed_starts_doubles_up_to_a_bound() {
        let ms: Vec<u64> = (1..=7).map(|n| restart_delay(n).as_millis() as u64).collect();
        assert_eq!(ms, [500, 1000, 2000, 4000, 8000, 10_000, 10_000]);
        assert_eq!(restart_delay(u32::MAX), RESTART_DELAY_MAX);
    }
}
