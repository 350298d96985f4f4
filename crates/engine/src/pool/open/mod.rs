//! Opening a pool: creating one (create.rs), importing it as its writer (import.rs: the checks,
//! the claim that fences any previous writer, the intent log opened (log.rs) and replayed
//! (replay.rs), `--rewind` past damaged roots (rewind.rs)), or read-only at a retained root
//! (read_only.rs). This is the top of the pool: it builds the `Inner` every subsystem shares
//! and starts the background work (syncer.rs).

mod create;
mod holder;
mod import;
mod log;
mod read_only;
mod replay;
mod rewind;

pub use log::log_configs;
pub use read_only::PointInTime;

use super::{Env, PoolConfig};
use crate::error::Error;
use crate::objstore::{DynStore, InstrumentedStore, RetryingStore, Store, StoreStats};
use crate::pool::intent::LogDevices;
use crate::root::VdevEntry;
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug, Clone, Default)]
pub struct CreateOptions {
    pub props: BTreeMap<String, String>,
    pub vdevs: Vec<VdevEntry>,
    /// The guid the log and cache devices were labelled with (random when None).
    pub pool_guid: Option<u128>,
}

#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Take over a pool another live writer holds; that writer is fenced at its next commit.
    pub force: bool,
    pub config: PoolConfig,
    /// Import even though log devices are missing (`zpool import -m`): the pool opens at its
    /// last published txg plus whatever the remaining log legs hold.
    pub missing_log: bool,
    /// What the last daemon saw of the log before it stopped: (bytes of records not yet in the
    /// store, wall-clock ms when seen). Only used to tell the operator what a missing log costs.
    pub log_unpublished_hint: Option<(u64, u64)>,
    /// Where the log devices named in the root are opened (files unless a test says otherwise).
    pub log_devices: LogDevices,
    /// The newest root (or several) does not verify: import at the newest intact one instead and
    /// discard the damaged txgs (`zpool import -F`). Without it such an import is refused.
    pub rewind: bool,
}

/// The store as a pool uses it: instrumented (statistics, outage detection) below the retries.
pub(super) fn wrap_store(
    store: DynStore,
    config: &PoolConfig,
    env: &Env,
) -> (DynStore, Arc<StoreStats>) {
    let instrumented = Arc::new(InstrumentedStore::new(store, env.clock.clone()));
    let stats = instrumented.stats.clone();
    let retrying = RetryingStore::new(
        instrumented,
        config.retry.clone(),
        env.clock.clone(),
        env.seed ^ 0x5eed,
    );
    (Arc::new(retrying), stats)
}

/// Why an import or a peek found nothing to open.
pub(super) fn no_pool(store: &dyn Store) -> Error {
    Error::Unavailable(format!(
        "no fardisk pool in {}; check the URL, or create one with 'fardisk create'",
        store.describe()
    ))
}
