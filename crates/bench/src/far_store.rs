//! The store most scenarios measure against: a directory on the local disk, put `latency_ms`
//! (round trip) away by the engine's own `SimulatedStore`.

use anyhow::{anyhow, Result};
use fardisk_engine::clock::Clock;
use fardisk_engine::objstore::{open_store_url, SimulateSpec, SimulatedStore, Store};
use std::path::Path;
use std::sync::Arc;

/// (the bare local store in `dir`, the same store `latency_ms` away).
pub fn far_file_store(
    dir: &Path,
    latency_ms: u64,
    clock: Arc<dyn Clock>,
    seed: u64,
) -> Result<(Arc<dyn Store>, Arc<dyn Store>)> {
    let base =
        open_store_url(&format!("file://{}", dir.display()), true).map_err(|e| anyhow!("{e}"))?;
    let spec = SimulateSpec::parse(&format!("latency={latency_ms}")).map_err(|e| anyhow!("{e}"))?;
    let far: Arc<dyn Store> = Arc::new(SimulatedStore::new(base.clone(), spec, clock, seed));
    Ok((base, far))
}
