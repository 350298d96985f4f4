//! What each control request does against the imported pool.

use super::control::Reply;
use super::control::Request;
use fardisk_engine::pool::POOL_PROPS;
use fardisk_engine::Pool;
use serde_json::{json, Value};
use std::path::PathBuf;
use tokio::sync::watch;

pub struct DaemonState {
    pub pool: Pool,
    pub cache: std::sync::Arc<fardisk_engine::arc_cache::ArcBlockCache>,
    pub mount_dir: Option<PathBuf>,
    /// The FUSE mount's session, for `status` (which transport serves it).
    pub fuse: Option<crate::fuse::SessionMonitor>,
    pub stop: watch::Sender<bool>,
    /// Set by the main loop once the export finished: Ok(txg) or the error.
    pub exported: watch::Sender<Option<Result<u64, String>>>,
    /// Export replies written (the main loop waits for them before the process exits).
    pub replied: tokio::sync::Notify,
}

pub(super) fn arg_str<'a>(args: &'a Value, key: &str) -> Result<&'a str, String> {
    args.get(key).and_then(|v| v.as_str()).ok_or_else(|| format!("missing argument '{key}'"))
}

/// Requests that change the pool: recorded in its history when they succeed.
const HISTORY_CMDS: &[&str] = &[
    "set",
    "volume_create",
    "volume_destroy",
    "volume_resize",
    "vdev_add",
    "vdev_remove",
    "vdev_replace",
    "scrub",
    "snapshot_create",
    "snapshot_destroy",
    "clone",
    "promote",
    "rollback",
];

/// What `status --json` shows of this pool (also what the metrics endpoint exports).
pub fn status_json(st: &DaemonState) -> Value {
    let mut v = serde_json::to_value(st.pool.status()).unwrap_or_default();
    v["pid"] = json!(std::process::id());
    v["mount"] = json!(st.mount_dir);
    if let Some(fuse) = &st.fuse {
        let s = fuse.stats();
        v["fuse"] = json!({
            "transport": s.transport.name(),
            "transport_reason": s.transport_reason,
            "uring_queues": s.uring_queues,
            "requests_device": s.requests_device,
            "requests_uring": s.requests_uring,
            "malformed_requests": s.malformed_requests,
        });
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
async fn sync_unless_suspended(pool: &Pool) -> Result<Value, String> {
    let p = pool.clone();
    let mut commit = tokio::spawn(async move { p.sync_txg().await });
    let mut suspended_since: Option<std::time::Instant> = None;
    loop {
        tokio::select! {
            r = &mut commit => {
                return match r {
                    Ok(r) => r.map(|t| json!({"txg": t})).map_err(|e| e.to_string()),
                    Err(e) => Err(format!("sync task failed: {e}")),
                };
            }
            _ = tokio::time::sleep(std::time::Duration::from_millis(250)) => {
                match pool.health() {
                    fardisk_engine::pool::PoolHealth::Suspended(why) => {
                        let since = *suspended_since.get_or_insert_with(std::time::Instant::now);
                        if since.elapsed() >= SYNC_SUSPENDED_WAIT {
                            return Err(format!("pool is SUSPENDED ({why}); the txg commits by itself once the store is back ('fardisk status' shows when)"));
                        }
                    }
                    _ => suspended_since = None,
                }
            }
        }
    }
}

pub async fn handle(st: &DaemonState, req: Request) -> Reply {
    let result = dispatch(st, &req).await;
    if result.is_ok() && HISTORY_CMDS.contains(&req.cmd.as_str()) && !req.cmdline.is_empty() {
        st.pool.log_history(&req.cmdline).await;
    }
    match result {
        Ok(v) => Reply::ok(v),
        Err(e) => Reply::err(e),
    }
}

async fn dispatch(st: &DaemonState, req: &Request) -> Result<Value, String> {
    let pool = &st.pool;
    let a = &req.args;
    match req.cmd.as_str() {
        "ping" => Ok(json!({"pid": std::process::id()})),
        "status" => Ok(status_json(st)),
        "arcstat" => Ok(arcstat_json(st)),
        "hotset_save" => {
            let budget =
                pool.props().get("arc_max").and_then(|v| v.parse().ok()).unwrap_or(1u64 << 30);
            pool.save_hot_set(budget)
                .await
                .map(|n| json!({"regions": n}))
                .map_err(|e| e.to_string())
        }
        "sync" => sync_unless_suspended(pool).await,
        "export" => {
            let mut rx = st.exported.subscribe();
            let _ = st.stop.send(true);
            let outcome = loop {
                if let Some(r) = rx.borrow_and_update().clone() {
                    break r;
                }
                if rx.changed().await.is_err() {
                    break Err("the daemon stopped before the export finished".to_string());
                }
            };
            outcome.map(|txg| json!({"txg": txg}))
        }
        "volume_create" => {
            let size = a.get("size_bytes").and_then(|v| v.as_u64()).ok_or("missing size_bytes")?;
            pool.volume_create(arg_str(a, "name")?, size).map_err(|e| e.to_string())?;
            pool.sync_txg().await.map_err(|e| e.to_string())?;
            Ok(Value::Null)
        }
        "volume_destroy" if a.get("recursive").and_then(|r| r.as_bool()) == Some(true) => {
            super::snapshot_requests::destroy_volume_recursive(st, a).await
        }
        "volume_destroy" => {
            pool.volume_destroy(arg_str(a, "name")?).map_err(|e| e.to_string())?;
            pool.sync_txg().await.map_err(|e| e.to_string())?;
            Ok(Value::Null)
        }
        "volume_resize" => {
            let size = a.get("size_bytes").and_then(|v| v.as_u64()).ok_or("missing size_bytes")?;
            pool.volume_resize(arg_str(a, "name")?, size).map_err(|e| e.to_string())?;
            pool.sync_txg().await.map_err(|e| e.to_string())?;
            Ok(Value::Null)
        }
        "get" => {
            let set = pool.props();
            let rows: Vec<Value> = POOL_PROPS
                .iter()
                .map(|(k, default)| match set.get(*k) {
                    Some(v) => json!({"property": k, "value": v, "source": "local"}),
                    None => json!({"property": k, "value": default, "source": "default"}),
                })
                .collect();
            Ok(json!(rows))
        }
        "set" => {
            pool.set_prop(arg_str(a, "property")?, arg_str(a, "value")?)
                .map_err(|e| e.to_string())?;
            pool.sync_txg().await.map_err(|e| e.to_string())?;
            Ok(Value::Null)
        }
        "scrub" => {
            match a.get("action").and_then(|v| v.as_str()).unwrap_or("start") {
                "start" => pool.scrub_start(),
                "pause" => pool.scrub_pause(),
                "stop" => pool.scrub_stop(),
                other => {
                    return Err(format!("unknown scrub action '{other}' (start, pause or stop)"))
                }
            }
            .map_err(|e| e.to_string())?;
            serde_json::to_value(pool.scrub_progress()).map_err(|e| e.to_string())
        }
        "history" => {
            let limit =
                a.get("limit")
                    .and_then(|v| v.as_u64())
                    .unwrap_or(fardisk_engine::pool::HISTORY_KEPT as u64) as usize;
            let events = pool.history(limit).await.map_err(|e| e.to_string())?;
            serde_json::to_value(events).map_err(|e| e.to_string())
        }
        "snapshot_create" => super::snapshot_requests::create(st, a).await,
        "snapshot_destroy" => super::snapshot_requests::destroy(st, a).await,
        "snapshot_list" => super::snapshot_requests::list(st).await,
        "clone" => super::snapshot_requests::clone(st, a).await,
        "promote" => super::snapshot_requests::promote(st, a).await,
        "rollback" => super::snapshot_requests::rollback(st, a).await,
        "vdev_add" => super::vdev_requests::add(st, a).await,
        "vdev_remove" => super::vdev_requests::remove(st, a).await,
        "vdev_replace" => super::vdev_requests::replace(st, a).await,
        other => Err(format!("unknown request '{other}'")),
    }
}
