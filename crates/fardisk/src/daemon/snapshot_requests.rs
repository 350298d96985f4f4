//! Control requests for snapshots, clones, promote and rollback.

use super::handlers::{arg_str, DaemonState};
use serde_json::{json, Value};

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// `{"target": "VOLUME@SNAPSHOT"}` split.
fn snapshot_arg(a: &Value) -> Result<(String, String), String> {
    let t = arg_str(a, "target")?;
    let (v, s) = fardisk_engine::pool::split_snapshot_name(t).map_err(err)?;
    Ok((v.to_string(), s.to_string()))
}

pub async fn create(st: &DaemonState, a: &Value) -> Result<Value, String> {
    let (v, s) = snapshot_arg(a)?;
    let t0 = std::time::Instant::now();
    let info = st.pool.snapshot_create(&v, &s).await.map_err(err)?;
    let mut out = serde_json::to_value(info).map_err(err)?;
    out["elapsed_ms"] = json!(t0.elapsed().as_secs_f64() * 1000.0);
    Ok(out)
}

pub async fn destroy(st: &DaemonState, a: &Value) -> Result<Value, String> {
    let (v, s) = snapshot_arg(a)?;
    st.pool.snapshot_destroy(&v, &s).await.map_err(err)?;
    Ok(Value::Null)
}

/// Every snapshot with what destroying it would free (`used_bytes`, as `zfs list -t snapshot`).
pub async fn list(st: &DaemonState) -> Result<Value, String> {
    let mut rows = Vec::new();
    for s in st.pool.snapshots() {
        let used = st.pool.snapshot_unique_bytes(s.id).await.map_err(err)?;
        let mut row = serde_json::to_value(&s).map_err(err)?;
        row["used_bytes"] = json!(used);
        rows.push(row);
    }
    Ok(json!({"snapshots": rows}))
}

pub async fn clone(st: &DaemonState, a: &Value) -> Result<Value, String> {
    let (v, s) = snapshot_arg(a)?;
    let t0 = std::time::Instant::now();
    st.pool.clone_volume(&v, &s, arg_str(a, "name")?).await.map_err(err)?;
    Ok(json!({"elapsed_ms": t0.elapsed().as_secs_f64() * 1000.0}))
}

pub async fn promote(st: &DaemonState, a: &Value) -> Result<Value, String> {
    st.pool.promote(arg_str(a, "name")?).await.map_err(err)?;
    Ok(Value::Null)
}

pub async fn rollback(st: &DaemonState, a: &Value) -> Result<Value, String> {
    let (v, s) = snapshot_arg(a)?;
    let recursive = a.get("recursive").and_then(|r| r.as_bool()).unwrap_or(false);
    let id = st
        .pool
        .volume_id(&v)
        .ok_or_else(|| format!("pool '{}' has no volume '{v}'", st.pool.name()))?;
    let users = crate::device::open_count(&st.pool, id);
    if users > 0 {
        return Err(format!(
            "volume '{v}' is in use ({users} open image file(s) or NBD connection(s)); unmount and disconnect it, then roll back"
        ));
    }
    st.pool.rollback(&v, &s, recursive).await.map_err(err)?;
    Ok(Value::Null)
}

pub async fn destroy_volume_recursive(st: &DaemonState, a: &Value) -> Result<Value, String> {
    st.pool.volume_destroy_recursive(arg_str(a, "name")?).await.map_err(err)?;
    Ok(Value::Null)
}
