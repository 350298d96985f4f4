//! What each control request does against the imported pool. Failures keep the engine's error
//! kind (`ControlError`) all the way to the CLI.

use crate::control::{ControlError, Envelope, Reply, Request, ScrubAction};
use fardisk_engine::props::{prop_rows, ARC_MAX};
use fardisk_engine::{ErrorKind, Pool};
use serde_json::{json, Value};
use std::path::PathBuf;
use tokio::sync::watch;

pub struct DaemonState {
    pub pool: Pool,
    pub cache: std::sync::Arc<fardisk_engine::arc_cache::ArcBlockCache>,
    pub mount_dir: Option<PathBuf>,
    /// The FUSE mount's session, for `status` (which transport serves it).
    pub fuse: Option<crate::fuse::FuseMonitor>,
    pub stop: watch::Sender<bool>,
    /// Set by the main loop once the export finished: Ok(txg) or the error.
    pub exported: watch::Sender<Option<Result<u64, ControlError>>>,
    /// Export replies not written yet (the main loop waits for them before the process exits).
    pub export_replies: super::export_replies::ExportReplies,
    /// The holder that owns the FUSE connection (`import --holder`), if any.
    pub holder: Option<std::sync::Arc<crate::holder::link::HolderLink>>,
    /// Set by `fardisk upgrade`: the stop hands over to a new engine instead of exporting.
    pub upgrade: std::sync::atomic::AtomicBool,
    /// `import --block-devices`: the volumes' loop devices and stable paths.
    pub block_devices: Option<std::sync::Arc<crate::blockdev::BlockDevices>>,
}

/// What `status --json` shows of this pool (also what the metrics endpoint exports).
pub fn status_json(st: &DaemonState) -> Value {
    let mut v = serde_json::to_value(st.pool.status()).unwrap_or_default();
    v["pid"] = json!(std::process::id());
    v["mount"] = json!(st.mount_dir);
    v["block_devices"] = json!(st.block_devices.is_some());
    if let (Some(devices), Some(volumes)) = (&st.block_devices, v["volumes"].as_array_mut()) {
        for vol in volumes {
            let name = vol["name"].as_str().unwrap_or_default().to_owned();
            vol["block_device"] = devices.describe(&name).unwrap_or(Value::Null);
        }
    }
    if let Some(fuse) = &st.fuse {
        let s = fuse.stats();
        let (finished_inline, continued_as_task) = fuse.dispatch_counts();
        v["fuse"] = json!({
            "transport": s.transport.name(),
            "transport_reason": s.transport_reason,
            "uring_queues": s.uring_queues,
            "uring_buffer_bytes": s.uring_buffer_bytes,
            "requests_device": s.requests_device,
            "requests_uring": s.requests_uring,
            "malformed_requests": s.malformed_requests,
            "data_requests_finished_inline": finished_inline,
            "data_requests_continued_as_task": continued_as_task,
        });
    }
    if let Some(holder) = &st.holder {
        v["engine_holder"] = holder.status_json();
    }
    v["cache"] = st.cache.stats_json()["l2arc"].clone();
    v
}

/// What `arcstat --json` shows (also exported as metrics).
pub fn arcstat_json(st: &DaemonState) -> Value {
    let mut v = st.cache.stats_json();
    v["warmup"] = st.pool.status().warmup;
    v
}

/// How long `fardisk sync` waits on a SUSPENDED pool before it says so instead of hanging.
const SYNC_SUSPENDED_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Commits the open txg and waits for it; but when the pool stays SUSPENDED (store unreachable,
/// store disk full) the caller gets the reason instead of an endless wait. The commit itself runs
/// in its own task and goes on: the pool retries by itself.
async fn sync_unless_suspended(pool: &Pool) -> Result<Value, ControlError> {
    let p = pool.clone();
    let mut commit = tokio::spawn(async move { p.sync_txg().await });
    let mut suspended_since: Option<std::time::Instant> = None;
    loop {
        tokio::select! {
            r = &mut commit => {
                return match r {
                    Ok(r) => Ok(json!({"txg": r?})),
                    Err(e) => Err(ControlError::new(ErrorKind::Bug, format!("sync task failed: {e}"))),
                };
            }
            _ = tokio::time::sleep(std::time::Duration::from_millis(250)) => {
                match pool.health() {
                    fardisk_engine::pool::PoolHealth::Suspended(why) => {
                        let since = *suspended_since.get_or_insert_with(std::time::Instant::now);
                        if since.elapsed() >= SYNC_SUSPENDED_WAIT {
                            return Err(ControlError::new(ErrorKind::RetryLater, format!("pool is SUSPENDED ({why}); the txg commits by itself once the store is back ('fardisk status' shows when)")));
                        }
                    }
                    _ => suspended_since = None,
                }
            }
        }
    }
}

/// Answers one request; a success of a command registered for the history is recorded there
/// with the client's command line.
pub async fn handle(st: &DaemonState, envelope: Envelope) -> Reply {
    let Envelope { request, cmdline } = envelope;
    let registration = request.registration();
    let result = dispatch(st, request).await;
    if result.is_ok() && registration.history && !cmdline.is_empty() {
        st.pool.log_history(&cmdline).await;
    }
    Reply::from_result(result)
}

async fn dispatch(st: &DaemonState, request: Request) -> Result<Value, ControlError> {
    let pool = &st.pool;
    match request {
        Request::Ping => Ok(json!({"pid": std::process::id()})),
        Request::Status => Ok(status_json(st)),
        Request::Arcstat => Ok(arcstat_json(st)),
        Request::HotsetSave => {
            let regions = pool.save_hot_set(ARC_MAX.number_or_default(&pool.props())).await?;
            Ok(json!({"regions": regions}))
        }
        Request::Sync => sync_unless_suspended(pool).await,
        Request::Export => {
            super::block_devices::detach_all_for_export(st).await?;
            export(st).await
        }
        Request::Upgrade => upgrade(st),
        Request::VolumeCreate { name, size_bytes } => {
            pool.volume_create(&name, size_bytes)?;
            pool.sync_txg().await?;
            super::block_devices::attach(st, &name).await?;
            Ok(Value::Null)
        }
        Request::VolumeDestroy { name, recursive } => volume_destroy(st, &name, recursive).await,
        Request::VolumeResize { name, size_bytes } => {
            pool.volume_resize(&name, size_bytes)?;
            pool.sync_txg().await?;
            super::block_devices::refresh_capacity(st, &name).await?;
            Ok(Value::Null)
        }
        Request::Get => Ok(json!(prop_rows(&pool.props()))),
        Request::Set { property, value } => {
            pool.set_prop(&property, &value)?;
            pool.sync_txg().await?;
            Ok(Value::Null)
        }
        Request::Scrub { action } => {
            match action {
                ScrubAction::Start => pool.scrub_start(),
                ScrubAction::Pause => pool.scrub_pause(),
                ScrubAction::Stop => pool.scrub_stop(),
            }?;
            to_json(pool.scrub_progress())
        }
        Request::History { limit } => {
            let events = pool.history(usize::try_from(limit).unwrap_or(usize::MAX)).await?;
            to_json(events)
        }
        Request::SnapshotCreate { target } => super::snapshot_requests::create(st, target).await,
        Request::SnapshotDestroy { target } => super::snapshot_requests::destroy(st, target).await,
        Request::SnapshotList => super::snapshot_requests::list(st).await,
        Request::Clone { target, name } => super::snapshot_requests::clone(st, target, &name).await,
        Request::Promote { name } => super::snapshot_requests::promote(st, &name).await,
        Request::Rollback { target, recursive } => {
            super::snapshot_requests::rollback(st, target, recursive).await
        }
        Request::VdevAdd { vdev, force } => super::vdev_requests::add(st, vdev, force).await,
        Request::VdevRemove { path } => super::vdev_requests::remove(st, &path).await,
        Request::VdevReplace { old, new, force } => {
            super::vdev_requests::replace(st, &old, &new, force).await
        }
    }
}

/// Unbinds the volume's block device first (refused while it is in use); if the engine then
/// refuses the destroy, the device is bound again, so a refusal changes nothing.
async fn volume_destroy(
    st: &DaemonState,
    name: &str,
    recursive: bool,
) -> Result<Value, ControlError> {
    let had_device = st.block_devices.is_some() && st.pool.volume_id(name).is_some();
    if had_device {
        super::block_devices::detach(st, name, "destroy it").await?;
    }
    let result = if recursive {
        st.pool.volume_destroy_recursive(name).await
    } else {
        match st.pool.volume_destroy(name) {
            Ok(()) => st.pool.sync_txg().await.map(|_| ()),
            Err(e) => Err(e),
        }
    };
    if let (Err(_), true) = (&result, had_device) {
        if st.pool.volume_id(name).is_some() {
            let _ = super::block_devices::attach(st, name).await;
        }
    }
    result?;
    Ok(Value::Null)
}

/// Stops the daemon and answers once the export finished (the main loop drains and exports).
/// Starts the handover to a new engine; the main loop does it once this reply is out.
fn upgrade(st: &DaemonState) -> Result<Value, ControlError> {
    let Some(holder) = &st.holder else {
        return Err(ControlError::new(
            ErrorKind::BadInput,
            "this pool runs without a holder, so its engine cannot be replaced under the mount; export it and import it again with --holder (README, Restarts and upgrades)".to_owned(),
        ));
    };
    st.upgrade.store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = st.stop.send(true);
    Ok(json!({"pid": std::process::id(), "holder_pid": holder.handover.holder_pid}))
}

async fn export(st: &DaemonState) -> Result<Value, ControlError> {
    let mut rx = st.exported.subscribe();
    let _ = st.stop.send(true);
    let outcome = loop {
        if let Some(r) = rx.borrow_and_update().clone() {
            break r;
        }
        if rx.changed().await.is_err() {
            break Err(ControlError::new(
                ErrorKind::Bug,
                "the daemon stopped before the export finished",
            ));
        }
    };
    outcome.map(|txg| json!({"txg": txg}))
}

/// A reply's data (the engine's plain structs: failing to serialize one is a bug).
pub(super) fn to_json(v: impl serde::Serialize) -> Result<Value, ControlError> {
    serde_json::to_value(v).map_err(|e| ControlError::new(ErrorKind::Bug, e.to_string()))
}
