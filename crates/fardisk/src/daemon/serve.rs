//! Starting and stopping the daemon's parts in order: import, front ends, control socket; on stop,
//! front ends first (no new I/O), then the drain to the store.

use super::handlers;
use crate::config::Config;
use crate::control::socket::{read_request, write_reply, LINE_BYTES_MAX};
use crate::control::{command_line, ControlError, DaemonOptions, NbdListen, Reply, Request};
use crate::device::PoolExports;
use crate::paths::HostPaths;
use crate::store::open_store;
use anyhow::{bail, Context, Result};
use fardisk_arc::{L2Arc, L2ArcConfig, MonotonicClock};
use fardisk_engine::arc_cache::ArcBlockCache;
use fardisk_engine::pool::ImportOptions;
use fardisk_engine::props::{ARC_MAX, L2ARC_WRITE_MAX};
use fardisk_engine::root::VdevRole;
use fardisk_engine::{Env, Pool};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;

use crate::holder::link::{EngineMessage, HolderLink};

/// How long an engine handing over waits for its running FUSE data requests.
const HANDOVER_DRAIN_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Runs a daemon in this process until it exports (`fardisk import --foreground`; the CLI's
/// `control::DaemonRunner`).
pub fn run_foreground(opts: DaemonOptions, config: &Config) -> Result<()> {
    // `fardisk import` and the holder start the daemon with the tunables in its environment;
    // a daemon started some other way (`import --foreground` from a supervisor) starts itself
    // again with them, once.
    // It also starts again while glibc ignores the huge-page tunable (glibc 2.35-2.36, see
    // malloc::HUGE_PAGE_STARTS_MAX).
    use fardisk_common::malloc::{reexec_with_tunables, restarts_for_tunables, HugePages};
    match reexec_with_tunables() {
        Err(e) => tracing::warn!(error = %e, "could not restart with the allocator's tunables; running without transparent huge pages"),
        Ok(HugePages::NotAsked) => tracing::warn!(
            starts = restarts_for_tunables() + 1,
            "malloc ignores glibc.malloc.hugetlb=1 after every start; running without transparent huge pages"
        ),
        Ok(state) => tracing::debug!(?state, restarts = restarts_for_tunables(), "transparent huge pages"),
    }
    fardisk_common::malloc::tune_allocator();
    // Under a holder (`import --holder`): its handover, read before anything else starts.
    let holder = crate::holder::link::HolderLink::from_env()?.map(Arc::new);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(run(opts, config, holder))
}

/// Imports the pool and serves it until export or a signal (the CLI's background import waits
/// for the control socket to answer).
pub async fn run(
    opts: DaemonOptions,
    config: &Config,
    holder: Option<Arc<HolderLink>>,
) -> Result<()> {
    let env = Env::system();
    let paths = &config.paths;
    let store =
        open_store(config, &opts.store_url, &opts.simulate, &env, false, opts.key.as_ref())?;
    let log_hint = paths.load_log_state(&opts.pool).map(|s| (s.unpublished_bytes, s.seen_ms));
    let import = ImportOptions {
        force: opts.force,
        config: opts.config.clone(),
        missing_log: opts.missing_log,
        log_unpublished_hint: log_hint,
        rewind: opts.rewind,
        ..Default::default()
    };
    let root = Pool::peek_rewind(store.clone(), &env, opts.rewind && opts.read_only.is_none())
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // A read-only import leaves the cache devices alone: the writer may be using them.
    let cache = Arc::new(build_cache(&root, &env, opts.read_only.is_none()));
    let hot_set_budget = arc_max_bytes(&root);
    let pool = match opts.read_only {
        Some(at) => {
            Pool::import_read_only(
                store,
                &opts.store_pool,
                &opts.pool,
                at,
                opts.config.clone(),
                env,
                cache.clone(),
            )
            .await
        }
        None => Pool::import(store, &opts.pool, import, env, cache.clone()).await,
    }
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    match pool.read_only_txg() {
        Some(t) => tracing::info!(pool = %opts.pool, txg = t, "imported read-only"),
        None => tracing::info!(pool = %opts.pool, txg = pool.published_txg(), "imported"),
    }
    match &holder {
        Some(link) => pool.log_history(&link.start_reason()).await,
        None => pool.log_history(&command_line().replace(" --foreground", "")).await,
    }
    let exports = Arc::new(PoolExports { pool: pool.clone() });
    let log_watch = tokio::spawn(watch_log_state(pool.clone(), paths.clone(), opts.pool.clone()));
    // The hot set saved at the last export (or periodic save) is read back in the background.
    pool.warm_up();
    let hot_saver = tokio::spawn(save_hot_set_periodically(pool.clone(), hot_set_budget));
    // Image files show the import time (the engine's clock is injected; this is display only).
    let import_time =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(Env::system().clock.wall_ms());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut nbd_tasks = Vec::new();
    for l in &opts.nbd {
        // Under a holder the engine may be replaced while NBD clients reconnect and carry on:
        // what it acknowledged must outlive it, as for the held FUSE connection.
        let cfg = fardisk_nbd::ServerConfig {
            writes_durable_before_reply: holder.is_some(),
            ..Default::default()
        };
        let (provider, rx) = (exports.clone(), stop_rx.clone());
        nbd_tasks.push(match l.clone() {
            NbdListen::Unix(p) => {
                tokio::spawn(async move { fardisk_nbd::serve_unix(&p, provider, cfg, rx).await })
            }
            NbdListen::Tcp(a) => {
                let listener = tokio::net::TcpListener::bind(a)
                    .await
                    .with_context(|| format!("cannot listen for NBD on {a}"))?;
                tokio::spawn(async move {
                    fardisk_nbd::serve_tcp_listener(listener, provider, cfg, rx).await
                })
            }
        });
    }
    let mount = match (&opts.mount, &holder) {
        // Mounting blocks its thread (mount(2) and the kernel handshake).
        (Some(dir), None) => Some(tokio::task::block_in_place(|| {
            mount_fuse(dir, exports.clone(), import_time, opts.fuse_uring)
        })?),
        (Some(dir), Some(link)) => Some(tokio::task::block_in_place(|| {
            attach_held(dir, exports.clone(), import_time, link)
        })?),
        (None, _) => None,
    };
    // Once the mount serves (the images open through it): the volumes' loop devices.
    let block_devices = match (&opts.mount, &mount, opts.block_devices) {
        (Some(dir), Some(_), true) => Some(tokio::task::block_in_place(|| {
            super::block_devices::start(&opts.pool, dir, &pool)
        })?),
        _ => None,
    };
    let socket = paths.control_socket(&opts.pool);
    let listener = bind_control(&socket)?;
    tracing::info!(socket = %socket.display(), "serving");
    let state = Arc::new(handlers::DaemonState {
        pool: pool.clone(),
        cache: cache.clone(),
        mount_dir: opts.mount.clone(),
        fuse: mount.as_ref().map(|m| m.monitor()),
        stop: stop_tx,
        exported: watch::channel(None).0,
        export_replies: Default::default(),
        holder: holder.clone(),
        upgrade: Default::default(),
        block_devices: block_devices.clone(),
    });
    let metrics_task = match opts.metrics {
        Some(addr) => {
            let listener = super::metrics_http::bind(addr).await?;
            tracing::info!(%addr, "serving metrics at /metrics");
            Some(tokio::spawn(super::metrics_http::serve(
                listener,
                state.clone(),
                opts.pool.clone(),
                stop_rx.clone(),
            )))
        }
        None => None,
    };
    // systemd (Type=notify): ready now that every front end serves.
    let notifier = crate::sd_notify::Notifier::from_env().map(Arc::new);
    if let Some(n) = &notifier {
        let generation =
            holder.as_ref().map(|l| format!(" (engine generation {})", l.handover.generation));
        n.ready(&format!(
            "pool {} serving at txg {}{}",
            opts.pool,
            pool.published_txg(),
            generation.unwrap_or_default()
        ));
    }
    // Watchdog keepalives until the process ends (an export that drains for minutes is not a
    // hang): to systemd, or under a holder to the holder, whose watchdog it is.
    let keepalive_every = crate::sd_notify::watchdog_interval_from_env(holder.is_some())
        .filter(|_| notifier.is_some());
    if let Some(every) = keepalive_every {
        tokio::spawn(send_keepalives(every, holder.clone(), notifier.clone()));
    }
    let mut stop_rx2 = stop_rx.clone();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let stop_reason;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    let st = state.clone();
                    tokio::spawn(async move { serve_client(stream, st).await });
                }
            }
            _ = stop_rx2.changed() => { stop_reason = "fardisk export"; break }
            _ = term.recv() => { tracing::info!("SIGTERM: exporting"); stop_reason = "SIGTERM"; break }
            _ = tokio::signal::ctrl_c() => { tracing::info!("SIGINT: exporting"); stop_reason = "SIGINT"; break }
        }
    }
    let _ = state.stop.send(true);
    if let Some(n) = &notifier {
        n.stopping(&format!("pool {}: exporting ({stop_reason})", opts.pool));
    }
    if let Some(t) = metrics_task {
        let _ = t.await;
    }
    for t in nbd_tasks {
        let _ = t.await;
    }
    let upgrading = state.upgrade.load(std::sync::atomic::Ordering::SeqCst);
    let stop_reason = if upgrading { "upgrade: handing over to a new engine" } else { stop_reason };
    if upgrading {
        // The mount stays (the holder owns it); requests from now on wait for the next engine,
        // and so do those still running, whose replies are no longer answered EIO if dropped.
        if let Some(m) = mount {
            if !tokio::task::block_in_place(|| m.pause_and_drain(HANDOVER_DRAIN_WAIT)) {
                tracing::warn!("handover: FUSE requests still running after {HANDOVER_DRAIN_WAIT:?}; the next engine replays the log for them");
            }
            // Not dropped: that would unmount.
            std::mem::forget(m);
        }
    } else {
        // An export request unbound them already; a stop by signal cannot be refused.
        if let Some(devices) = &block_devices {
            tokio::task::block_in_place(|| devices.detach_all_at_stop());
        }
        // Unmounting blocks too (and waits for the kernel to let go of the images).
        tokio::task::block_in_place(|| drop(mount));
    }
    log_watch.abort();
    hot_saver.abort();
    if let Err(e) = pool.save_hot_set(hot_set_budget).await {
        tracing::warn!(error = %e, "could not save the hot set; the next import starts cold");
    }
    pool.log_history(&format!("export ({stop_reason})")).await;
    let result = pool.export().await;
    cache.shutdown();
    if pool.read_only_txg().is_none() {
        record_log_state(&pool, paths, &opts.pool);
    }
    state.exported.send_replace(Some(
        result
            .as_ref()
            .map(|_| pool.published_txg())
            .map_err(|e| ControlError::new(e.kind(), e.to_string())),
    ));
    // Let every `fardisk export` client read its answer before the process exits.
    let _ =
        tokio::time::timeout(std::time::Duration::from_secs(5), state.export_replies.all_written())
            .await;
    let _ = std::fs::remove_file(&socket);
    if let (Some(link), true) = (&holder, result.is_ok()) {
        let message = if upgrading { EngineMessage::Upgrading } else { EngineMessage::Exported };
        if let Err(e) = link.tell(&message) {
            tracing::warn!(error = %e, "could not tell the holder");
        }
        if upgrading {
            tracing::info!(
                txg = pool.published_txg(),
                "exported; the holder starts the new engine"
            );
            std::process::exit(crate::holder::UPGRADE_EXIT_CODE);
        }
    }
    match result {
        Ok(()) => {
            tracing::info!(txg = pool.published_txg(), "exported");
            Ok(())
        }
        Err(e) if upgrading => exit_after_failed_handover(&e),
        Err(e) => bail!("export failed: {e}"),
    }
}

/// An upgrade whose export failed leaves as a crash does: at once, answering nothing. The FUSE
/// requests it paused or left running stay in the kernel; the holder sees an exit that is not
/// an upgrade's (status 1, no `Upgrading` message), starts an engine as after a crash, and
/// that engine replays the log and has them resent. Returning the error would unwind instead:
/// the runtime's shutdown drops the request tasks (the handing-over session leaves their
/// requests unanswered now, but that is the last line of defence, not the plan), waits for
/// blocking-pool threads, and runs the pool's destructors — a path no restart is tested on,
/// where a SIGKILL is (e2e 45, 62).
fn exit_after_failed_handover(error: &dyn std::fmt::Display) -> ! {
    tracing::error!(
        "upgrade: export failed: {error}; leaving as after a crash (requests in flight stay \
         unanswered in the kernel): the holder starts an engine, which replays the log and \
         gets them resent"
    );
    std::process::exit(1);
}

/// Sends a watchdog keepalive every `every`: `Alive` to the holder under one, else `WATCHDOG=1`.
async fn send_keepalives(
    every: std::time::Duration,
    holder: Option<Arc<HolderLink>>,
    notifier: Option<Arc<crate::sd_notify::Notifier>>,
) {
    let mut ticks = tokio::time::interval(every);
    loop {
        ticks.tick().await;
        match (&holder, &notifier) {
            (Some(link), _) => {
                if let Err(e) = link.tell(&EngineMessage::Alive) {
                    tracing::debug!(error = %e, "could not send a keepalive to the holder");
                }
            }
            (None, Some(n)) => n.watchdog(),
            (None, None) => return,
        }
    }
}

/// How often the daemon notes how much of its log is not yet in the store.
const LOG_STATE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

fn record_log_state(pool: &Pool, paths: &HostPaths, name: &str) -> Option<crate::paths::LogState> {
    let log = pool.log()?;
    let state = crate::paths::LogState {
        unpublished_bytes: log.space_used_bytes(),
        published_txg: pool.published_txg(),
        seen_ms: Env::system().clock.wall_ms(),
    };
    if let Err(e) = paths.save_log_state(name, &state) {
        tracing::debug!(error = %e, "cannot record the log state");
    }
    Some(state)
}

/// Keeps the host's note of the log's unpublished bytes current (written only when it changes),
/// for the message of an import that finds the log device gone.
async fn watch_log_state(pool: Pool, paths: HostPaths, name: String) {
    let mut last: Option<(u64, u64)> = None;
    loop {
        tokio::time::sleep(LOG_STATE_INTERVAL).await;
        let Some(log) = pool.log() else { continue };
        let now = (log.space_used_bytes(), pool.published_txg());
        if last != Some(now) {
            last = Some(now);
            record_log_state(&pool, &paths, &name);
        }
    }
}

/// How often the hot set is saved while serving, so an import after a crash warms up too.
const HOT_SET_SAVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(300);

async fn save_hot_set_periodically(pool: Pool, budget_bytes: u64) {
    loop {
        tokio::time::sleep(HOT_SET_SAVE_INTERVAL).await;
        match pool.save_hot_set(budget_bytes).await {
            Ok(n) => tracing::debug!(regions = n, "hot set saved"),
            Err(e) => tracing::warn!(error = %e, "could not save the hot set"),
        }
    }
}

fn arc_max_bytes(root: &fardisk_engine::root::Root) -> u64 {
    ARC_MAX.number_or_default(&root.props)
}

/// The ARC sized by the pool's `arc_max`, with the L2ARC over its cache devices. A cache device
/// that cannot be opened is left out (reads go to the store) and logged, never fatal.
/// The ARC, with the pool's cache devices as its L2ARC when `with_devices`.
fn build_cache(root: &fardisk_engine::root::Root, env: &Env, with_devices: bool) -> ArcBlockCache {
    let arc_max = arc_max_bytes(root);
    let paths: Vec<PathBuf> = if with_devices {
        root.vdevs
            .iter()
            .filter(|v| v.role == VdevRole::Cache)
            .flat_map(|v| v.paths.iter().map(PathBuf::from))
            .collect()
    } else {
        Vec::new()
    };
    let cfg = L2ArcConfig {
        write_max_bytes_per_s: L2ARC_WRITE_MAX.number_or_default(&root.props),
        ..L2ArcConfig::default()
    };
    let l2 = if paths.is_empty() {
        None
    } else {
        match L2Arc::open(
            cfg.clone(),
            root.pool_guid,
            Arc::new(MonotonicClock::new()),
            env.seed,
            &paths,
        ) {
            Ok((l2, failures)) => {
                for (p, e) in failures {
                    tracing::warn!(device = %p.display(), error = %e, "cache device unavailable; reads go to the store");
                }
                Some(l2)
            }
            Err(e) => {
                tracing::warn!(error = %e, "L2ARC unavailable");
                None
            }
        }
    };
    ArcBlockCache::with_l2_config(arc_max, l2, cfg, env.seed)
}

fn mount_fuse(
    dir: &std::path::Path,
    exports: Arc<PoolExports>,
    import_time: std::time::SystemTime,
    uring: crate::fuse::UringMode,
) -> Result<crate::fuse::FuseMount> {
    crate::fuse::clear_stale_mount(dir);
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create mount point {}", dir.display()))?;
    let uring = crate::fuse::prepare_uring(uring).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mount = crate::fuse::mount(
        dir,
        exports,
        tokio::runtime::Handle::current(),
        crate::fuse::FuseOptions { timestamp: import_time, uring, ..Default::default() },
    )
    .with_context(|| {
        format!("cannot mount FUSE at {} (is /dev/fuse there, and are we root?)", dir.display())
    })?;
    Ok(mount)
}

/// Serves the connection the holder hands over: answers INIT (first engine) or resumes it and
/// asks for the requests a dead predecessor left (FUSE_NOTIFY_RESEND); then tells the holder
/// the INIT parameters for the next engine.
fn attach_held(
    dir: &std::path::Path,
    exports: Arc<PoolExports>,
    import_time: std::time::SystemTime,
    link: &Arc<HolderLink>,
) -> Result<crate::fuse::FuseMount> {
    let device =
        link.take_device().context("the holder's /dev/fuse descriptor was used already")?;
    let negotiated = match &link.handover.negotiated {
        Some(bytes) => Some(
            fardisk_fuse::Negotiated::from_bytes(bytes)
                .context("the holder's INIT parameters do not verify")?,
        ),
        None => None,
    };
    let resumed = negotiated.is_some();
    let unmount_link = link.clone();
    let unmount_dir = dir.to_owned();
    let held = crate::fuse::HeldConnection {
        device,
        negotiated,
        // A holder that died (kill -9) left this engine serving on; it unmounts by itself then.
        unmount: Box::new(move || {
            unmount_link.unmount().or_else(|error| {
                tracing::warn!(%error, "the holder does not answer; unmounting without it");
                fardisk_fuse::mount::unmount(&unmount_dir, false)
                    .or_else(|_| fardisk_fuse::mount::unmount(&unmount_dir, true))
            })
        }),
    };
    let options = crate::fuse::FuseOptions {
        timestamp: import_time,
        handle_epoch: link.handover.generation,
        // What this engine acknowledged must outlive it: the kernel will not send it again.
        writes_durable_before_reply: true,
        ..Default::default()
    };
    let mount =
        crate::fuse::mount_held(dir, exports, tokio::runtime::Handle::current(), options, held)
            .with_context(|| {
                format!("cannot serve the held FUSE connection at {}", dir.display())
            })?;
    if let Some(n) = mount.negotiated() {
        link.tell(&EngineMessage::Serving { negotiated: n.to_bytes().to_vec() })?;
    }
    tracing::info!(
        generation = link.handover.generation,
        resumed,
        "fuse: serving the holder's connection (/dev/fuse transport; requests a predecessor left were asked for again)"
    );
    Ok(mount)
}

fn bind_control(socket: &std::path::Path) -> Result<UnixListener> {
    let dir = socket.parent().context("socket has a directory")?;
    if !dir.exists() {
        // A directory we create is ours alone; an existing one keeps its mode (the socket itself
        // is owner-only either way).
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    if socket.exists() {
        if std::os::unix::net::UnixStream::connect(socket).is_ok() {
            bail!("another daemon already serves {}", socket.display());
        }
        std::fs::remove_file(socket)?;
    }
    let l =
        UnixListener::bind(socket).with_context(|| format!("cannot bind {}", socket.display()))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

async fn serve_client(stream: UnixStream, state: Arc<handlers::DaemonState>) {
    let (r, mut w) = stream.into_split();
    let mut reader = BufReader::new(r.take(LINE_BYTES_MAX as u64));
    let Some(request) = read_request(&mut reader).await else { return };
    // Held until the reply is written: the process does not exit before that.
    let _pending = matches!(&request, Ok(envelope) if envelope.request == Request::Export)
        .then(|| state.export_replies.begin());
    let reply = match request {
        Ok(envelope) => handlers::handle(&state, envelope).await,
        Err(e) => Reply::from_result(Err(e)),
    };
    let _ = write_reply(&mut w, &reply).await;
}
