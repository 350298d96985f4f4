//! Device health: notices devices that vanished, shrank or were replaced under us, and brings
//! faulted devices back when their label is readable again (a transient fault clears itself).

use std::sync::Arc;

use super::device::CacheDevice;
use super::rebuild;
use super::stats::DeviceState;
use super::Shared;

pub(crate) fn check_devices(shared: &Arc<Shared>) {
    let devices: Vec<Arc<CacheDevice>> = shared.devices.read().clone();
    for device in devices {
        if device.state() == DeviceState::Faulted {
            try_reopen(shared, &device);
        } else if let Err(reason) = device.check_identity() {
            shared.fault(&device, reason);
        }
    }
}

/// Replaces a faulted device by a fresh handle on the same path if it carries the same label
/// (same pool, same device guid) again; its index is then rebuilt like after a restart.
fn try_reopen(shared: &Arc<Shared>, faulted: &Arc<CacheDevice>) {
    if !faulted.path.exists() {
        return;
    }
    let Ok(device) = CacheDevice::open_existing(faulted.id, &faulted.path, shared.pool_guid) else {
        return;
    };
    if device.label != faulted.label {
        return;
    }
    let device = Arc::new(device);
    {
        let mut devices = shared.devices.write();
        let Some(slot) = devices.iter_mut().find(|d| Arc::ptr_eq(d, faulted)) else {
            return;
        };
        *slot = Arc::clone(&device);
    }
    faulted.mark_removed();
    tracing::info!(path = %device.path.display(), "faulted cache device is back; rebuilding");
    rebuild::spawn_rebuild(Arc::clone(shared), device);
}
