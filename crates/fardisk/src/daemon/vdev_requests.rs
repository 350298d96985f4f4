//! Control requests that change the pool's devices: `vdev_add`, `vdev_remove`, `vdev_replace`.
//! Device I/O (labelling, resilvering) runs off the async workers.

use super::handlers::{arg_str, DaemonState};
use crate::cli::VdevArg;
use crate::vdev_format::{check_absolute, format_log_vdev, CACHE_FILE_BYTES_DEFAULT};
use fardisk_engine::root::VdevRole;
use serde_json::{json, Value};

fn arg_bool(args: &Value, key: &str) -> bool {
    args.get(key).and_then(|v| v.as_bool()).unwrap_or(false)
}

pub async fn add(st: &DaemonState, a: &Value) -> Result<Value, String> {
    let role = arg_str(a, "role")?;
    let paths: Vec<String> = a
        .get("paths")
        .and_then(|v| v.as_array())
        .map(|p| p.iter().filter_map(|x| x.as_str().map(String::from)).collect())
        .unwrap_or_default();
    if paths.is_empty() {
        return Err("missing argument 'paths'".into());
    }
    check_absolute(&paths).map_err(|e| e.to_string())?;
    for p in &paths {
        st.pool.check_device_unused(p).map_err(|e| e.to_string())?;
    }
    let force = arg_bool(a, "force");
    match role {
        "log" => {
            let v = VdevArg { role: VdevRole::Log, mirror: arg_bool(a, "mirror"), paths };
            let (name, guid) = (st.pool.name().to_string(), st.pool.guid());
            let seed = fardisk_engine::rng::Rng::from_entropy().next_u64();
            let entry =
                tokio::task::spawn_blocking(move || format_log_vdev(&name, guid, &v, force, seed))
                    .await
                    .map_err(|e| format!("labelling task failed: {e}"))?
                    .map_err(|e| crate::cli::one_line(&e))?;
            st.pool.add_log_vdev(entry).await.map_err(|e| e.to_string())?;
        }
        "cache" => {
            for p in &paths {
                let (cache, guid, path) =
                    (st.cache.clone(), st.pool.guid(), std::path::PathBuf::from(p));
                tokio::task::spawn_blocking(move || {
                    cache.add_device(&path, guid, CACHE_FILE_BYTES_DEFAULT)
                })
                .await
                .map_err(|e| format!("cache task failed: {e}"))??;
                st.pool.add_cache_vdev(p).await.map_err(|e| e.to_string())?;
            }
        }
        other => return Err(format!("unknown device role '{other}': use log or cache")),
    }
    Ok(Value::Null)
}

pub async fn remove(st: &DaemonState, a: &Value) -> Result<Value, String> {
    let path = arg_str(a, "path")?;
    let removed = st.pool.remove_device(path).await.map_err(|e| e.to_string())?;
    if removed.role == VdevRole::Cache {
        st.cache.remove_device(std::path::Path::new(path))?;
    }
    Ok(json!({"role": removed.role, "paths": removed.paths, "log_left": st.pool.log().is_some()}))
}

pub async fn replace(st: &DaemonState, a: &Value) -> Result<Value, String> {
    let (old, new) = (arg_str(a, "old")?, arg_str(a, "new")?);
    st.pool.replace_log_leg(old, new, arg_bool(a, "force")).await.map_err(|e| e.to_string())?;
    Ok(Value::Null)
}
