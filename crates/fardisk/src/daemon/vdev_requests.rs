//! Control requests that change the pool's devices: `vdev_add`, `vdev_remove`, `vdev_replace`.
//! Device I/O (labelling, resilvering) runs off the async workers.

use super::handlers::DaemonState;
use crate::control::ControlError;
use crate::vdev_format::{check_absolute, format_log_vdev, VdevArg, CACHE_FILE_BYTES_DEFAULT};
use fardisk_engine::root::VdevRole;
use fardisk_engine::ErrorKind;
use serde_json::{json, Value};

/// A background task that died (it panicked): a bug.
fn task_failed(what: &str, e: tokio::task::JoinError) -> ControlError {
    ControlError::new(ErrorKind::Bug, format!("{what} task failed: {e}"))
}

pub async fn add(st: &DaemonState, v: VdevArg, force: bool) -> Result<Value, ControlError> {
    if v.paths.is_empty() {
        return Err(ControlError::bad_input("missing argument 'paths'"));
    }
    check_absolute(&v.paths)?;
    for p in &v.paths {
        st.pool.check_device_unused(p)?;
    }
    match v.role {
        VdevRole::Log => {
            let (name, guid) = (st.pool.name().to_string(), st.pool.guid());
            let seed = fardisk_engine::rng::Rng::from_entropy().next_u64();
            let entry =
                tokio::task::spawn_blocking(move || format_log_vdev(&name, guid, &v, force, seed))
                    .await
                    .map_err(|e| task_failed("labelling", e))?
                    .map_err(|e| ControlError::from_anyhow(&e, ErrorKind::Unavailable))?;
            st.pool.add_log_vdev(entry).await?;
        }
        VdevRole::Cache => {
            for p in &v.paths {
                let (cache, guid, path) =
                    (st.cache.clone(), st.pool.guid(), std::path::PathBuf::from(p));
                tokio::task::spawn_blocking(move || {
                    cache.add_device(&path, guid, CACHE_FILE_BYTES_DEFAULT)
                })
                .await
                .map_err(|e| task_failed("cache", e))?
                .map_err(|e| ControlError::new(ErrorKind::Unavailable, e))?;
                st.pool.add_cache_vdev(p).await?;
            }
        }
    }
    Ok(Value::Null)
}

pub async fn remove(st: &DaemonState, path: &str) -> Result<Value, ControlError> {
    let removed = st.pool.remove_device(path).await?;
    if removed.role == VdevRole::Cache {
        st.cache
            .remove_device(std::path::Path::new(path))
            .map_err(|e| ControlError::new(ErrorKind::Unavailable, e))?;
    }
    Ok(json!({"role": removed.role, "paths": removed.paths, "log_left": st.pool.log().is_some()}))
}

pub async fn replace(
    st: &DaemonState,
    old: &str,
    new: &str,
    force: bool,
) -> Result<Value, ControlError> {
    st.pool.replace_log_leg(old, new, force).await?;
    Ok(Value::Null)
}
