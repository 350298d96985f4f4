//! Control requests for snapshots, clones, promote and rollback.

use super::handlers::{to_json, DaemonState};
use crate::control::{ControlError, SnapshotTarget};
use serde_json::{json, Value};

pub async fn create(st: &DaemonState, t: SnapshotTarget) -> Result<Value, ControlError> {
    let t0 = std::time::Instant::now();
    let info = st.pool.snapshot_create(&t.volume, &t.snapshot).await?;
    let mut out = to_json(info)?;
    out["elapsed_ms"] = json!(t0.elapsed().as_secs_f64() * 1000.0);
    Ok(out)
}

pub async fn destroy(st: &DaemonState, t: SnapshotTarget) -> Result<Value, ControlError> {
    st.pool.snapshot_destroy(&t.volume, &t.snapshot).await?;
    Ok(Value::Null)
}

/// Every snapshot with what destroying it would free (`used_bytes`, as `zfs list -t snapshot`).
pub async fn list(st: &DaemonState) -> Result<Value, ControlError> {
    let mut rows = Vec::new();
    for s in st.pool.snapshots() {
        let used = st.pool.snapshot_unique_bytes(s.id).await?;
        let mut row = to_json(&s)?;
        row["used_bytes"] = json!(used);
        rows.push(row);
    }
    Ok(json!({"snapshots": rows}))
}

pub async fn clone(st: &DaemonState, t: SnapshotTarget, name: &str) -> Result<Value, ControlError> {
    let t0 = std::time::Instant::now();
    st.pool.clone_volume(&t.volume, &t.snapshot, name).await?;
    super::block_devices::attach(st, name).await?;
    Ok(json!({"elapsed_ms": t0.elapsed().as_secs_f64() * 1000.0}))
}

pub async fn promote(st: &DaemonState, name: &str) -> Result<Value, ControlError> {
    st.pool.promote(name).await?;
    Ok(Value::Null)
}

pub async fn rollback(
    st: &DaemonState,
    t: SnapshotTarget,
    recursive: bool,
) -> Result<Value, ControlError> {
    let v = &t.volume;
    let id = st.pool.volume_id(v).ok_or_else(|| {
        ControlError::bad_input(format!("pool '{}' has no volume '{v}'", st.pool.name()))
    })?;
    // Its block device (an open image) goes first, unless something is mounted on it; it is
    // bound again afterwards, whatever the rollback's outcome.
    super::block_devices::detach(st, v, "roll it back").await?;
    let users = crate::device::open_count(&st.pool, id);
    if users > 0 {
        let _ = super::block_devices::attach(st, v).await;
        return Err(ControlError::new(
            fardisk_engine::ErrorKind::Unavailable,
            format!(
                "volume '{v}' is in use ({users} open image file(s) or NBD connection(s)); unmount and disconnect it, then roll back"
            ),
        ));
    }
    let result = st.pool.rollback(v, &t.snapshot, recursive).await;
    super::block_devices::attach(st, v).await?;
    result?;
    Ok(Value::Null)
}
