//! The daemon's side of `import --block-devices` (`crate::blockdev` does the work): bind the
//! volumes' devices once the mount serves, and keep them in step with the control requests that
//! add, remove or change volumes. Each call runs on a blocking thread, never on a FUSE handler
//! (the images open through our own mount).

use super::handlers::DaemonState;
use crate::blockdev::BlockDevices;
use crate::control::ControlError;
use anyhow::{Context, Result};
use fardisk_engine::{ErrorKind, Pool};
use std::path::Path;
use std::sync::Arc;

/// Binds (or, after an engine restart or upgrade, recognises) every volume's device.
pub fn start(pool_name: &str, mount_dir: &Path, pool: &Pool) -> Result<Arc<BlockDevices>> {
    let devices = BlockDevices::new(pool_name, mount_dir, pool.read_only_txg().is_some())
        .with_context(|| format!("--block-devices for pool '{pool_name}'"))?;
    let volumes: Vec<String> = pool.status().volumes.into_iter().map(|v| v.name).collect();
    let problems = devices.reconcile(&volumes);
    if !problems.is_empty() {
        tracing::warn!(count = problems.len(), "block devices: not everything could be done (the lines above say what); status shows which volumes have a device");
    }
    Ok(Arc::new(devices))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ControlError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ControlError::new(ErrorKind::Bug, format!("block device task failed: {e}")))
}

fn unavailable(line: String) -> ControlError {
    ControlError::new(ErrorKind::Unavailable, line)
}

/// A volume created or cloned: its device at once.
pub async fn attach(st: &DaemonState, volume: &str) -> Result<(), ControlError> {
    let Some(devices) = st.block_devices.clone() else { return Ok(()) };
    let v = volume.to_owned();
    blocking(move || devices.attach(&v)).await?.map_err(|line| {
        unavailable(format!("volume '{volume}' was created, but has no block device: {line}"))
    })
}

/// Before a volume goes (or is rolled back): its device unbound, or the refusal.
pub async fn detach(
    st: &DaemonState,
    volume: &str,
    what: &'static str,
) -> Result<(), ControlError> {
    let Some(devices) = st.block_devices.clone() else { return Ok(()) };
    let v = volume.to_owned();
    blocking(move || devices.detach(&v, what)).await?.map_err(unavailable)
}

/// A volume resized: its device takes the new size.
pub async fn refresh_capacity(st: &DaemonState, volume: &str) -> Result<(), ControlError> {
    let Some(devices) = st.block_devices.clone() else { return Ok(()) };
    let v = volume.to_owned();
    blocking(move || devices.refresh_capacity(&v)).await?.map_err(unavailable)
}

/// Before an export: every device unbound, or the refusal (nothing changed, still imported).
pub async fn detach_all_for_export(st: &DaemonState) -> Result<(), ControlError> {
    let Some(devices) = st.block_devices.clone() else { return Ok(()) };
    blocking(move || devices.detach_all_for_export()).await?.map_err(unavailable)
}
