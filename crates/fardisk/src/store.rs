//! Opening a pool's store as every command and the daemon do: the backend for the URL (with the
//! configured credentials), encrypted when the pool has a key, then made far away by
//! `--simulate` (encryption runs on this host, before the bytes travel).

use crate::config::Config;
use anyhow::Result;
use fardisk_engine::objstore::{
    open_store_url_with, EncryptedStore, EncryptionKey, SimulateSpec, SimulatedStore, Store,
};
use fardisk_engine::Env;
use std::sync::Arc;

/// The pool's store at `url`; `create` makes a missing `file://` directory.
pub fn open_store(
    config: &Config,
    url: &str,
    simulate: &Option<SimulateSpec>,
    env: &Env,
    create: bool,
    key: Option<&EncryptionKey>,
) -> Result<Arc<dyn Store>> {
    let store =
        open_store_url_with(url, create, &config.store).map_err(|e| anyhow::anyhow!("{e}"))?;
    let store: Arc<dyn Store> = match key {
        Some(k) => Arc::new(EncryptedStore::new(store, k, env.seed)),
        None => store,
    };
    Ok(match simulate {
        Some(spec) => {
            Arc::new(SimulatedStore::new(store, spec.clone(), env.clock.clone(), env.seed))
        }
        None => store,
    })
}
