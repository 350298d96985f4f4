//! `fardisk create`: a new pool in an object store, with its log and cache devices.

use super::vdev_spec::parse_vdevs;
use crate::config::Config;
use crate::control::command_line;
use crate::paths::PoolRecord;
use crate::store::open_store;
use crate::vdev_format::{format_cache_device, format_log_vdev, VdevArg};
use anyhow::{bail, Result};
use fardisk_engine::objstore::SimulateSpec;
use fardisk_engine::pool::CreateOptions;
use fardisk_engine::root::{VdevEntry, VdevRole};
use fardisk_engine::{Env, Pool};
use std::collections::BTreeMap;

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    pub pool: String,
    /// file:///DIR (the embedded default), s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, az://CONTAINER/PREFIX
    pub store_url: String,
    /// `log [mirror] DEVICE...` and `cache DEVICE...`, repeated
    #[arg(value_name = "VDEVS")]
    pub vdevs: Vec<String>,
    /// Property for the new pool, e.g. -o compression=zstd
    #[arg(short = 'o', value_name = "PROP=VALUE")]
    pub props: Vec<String>,
    /// Put the store "far away": latency=MS[,jitter=MS][,bandwidth=BYTES_PER_S]
    #[arg(long, value_name = "SPEC")]
    pub simulate: Option<String>,
    /// Reformat log or cache devices that carry another pool's label
    #[arg(short = 'f', long)]
    pub force: bool,
    /// Encrypt everything the pool stores with the key in this file (64 hex digits); a missing
    /// file gets a new random key (mode 0600). Also FARDISK_KEY / FARDISK_KEY_FILE
    #[arg(long, value_name = "PATH")]
    pub key_file: Option<std::path::PathBuf>,
}

/// Labels log and cache devices for the pool `guid`; returns their configuration entries.
pub fn format_vdevs(
    pool: &str,
    guid: u128,
    vdevs: &[VdevArg],
    force: bool,
) -> Result<Vec<VdevEntry>> {
    let env = Env::system();
    let mut out = Vec::new();
    for v in vdevs {
        let seed = env.seed ^ out.len() as u64;
        out.push(match v.role {
            VdevRole::Log => format_log_vdev(pool, guid, v, force, seed)?,
            VdevRole::Cache => format_cache_device(guid, &v.paths[0], env.seed ^ 0xcace)?,
        });
    }
    Ok(out)
}

/// `-o PROP=VALUE`s checked against the property table; a size given with a suffix (`16M`) in
/// bytes, as the root stores it.
pub fn parse_props(items: &[String]) -> Result<BTreeMap<String, String>> {
    let mut props = BTreeMap::new();
    for p in items {
        let Some((k, v)) = p.split_once('=') else {
            bail!("-o {p}: expected PROP=VALUE, e.g. -o compression=zstd")
        };
        let v = fardisk_engine::props::canonical_prop(k, v, false)
            .map_err(|e| anyhow::anyhow!("-o {p}: {e}"))?;
        props.insert(k.to_string(), v);
    }
    Ok(props)
}

pub async fn run(a: CreateArgs, cfg: &Config) -> Result<()> {
    let props = parse_props(&a.props)?;
    let vdevs = parse_vdevs(&a.vdevs)?;
    let simulate = a
        .simulate
        .as_deref()
        .map(SimulateSpec::parse)
        .transpose()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let env = Env::system();
    fardisk_engine::pool::check_pool_name(&a.pool).map_err(|e| anyhow::anyhow!("{e}"))?;
    let key = match &a.key_file {
        Some(p) => Some(crate::keys::ResolvedKey {
            key: crate::keys::load_or_generate(p)?,
            file: Some(p.clone()),
        }),
        None => crate::keys::resolve(cfg, None, None)?,
    };
    let store = open_store(cfg, &a.store_url, &simulate, &env, true, key.as_ref().map(|k| &k.key))?;
    let guid = fardisk_engine::rng::Rng::from_entropy().next_u128();
    let entries = format_vdevs(&a.pool, guid, &vdevs, a.force)?;
    let opts = CreateOptions { props, vdevs: entries, pool_guid: Some(guid) };
    let root = Pool::create(store.clone(), &a.pool, opts, &env)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let event = fardisk_engine::pool::HistoryEvent {
        time_ms: env.clock.wall_ms(),
        txg: root.txg,
        host: fardisk_engine::pool::this_host(),
        event: command_line(),
    };
    if let Err(e) = fardisk_engine::pool::write_history_event(&store, &event, guid as u32).await {
        tracing::warn!(error = %e, "could not record the create in the pool history");
    }
    let key_file = key.as_ref().and_then(|k| k.file.as_ref()).map(|p| p.display().to_string());
    cfg.paths.save_record(&PoolRecord {
        name: a.pool.clone(),
        store_url: a.store_url.clone(),
        simulate: a.simulate.clone(),
        key_file,
    })?;
    let encrypted = key
        .map(|k| format!(", encrypted with key {:016x}", k.key.fingerprint()))
        .unwrap_or_default();
    println!(
        "created pool '{}' in {} (guid {:032x}{encrypted})",
        a.pool, a.store_url, root.pool_guid
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_properties_take_size_suffixes() {
        let props = parse_props(&["arc_max=16M".into(), "compression=zstd".into()]).expect("valid");
        assert_eq!(props.get("arc_max").map(String::as_str), Some("16777216"));
        assert_eq!(props.get("compression").map(String::as_str), Some("zstd"));
        let e = parse_props(&["scrub_rate_max=fast".into()]).unwrap_err().to_string();
        assert!(
            e.starts_with("-o scrub_rate_max=fast: scrub_rate_max must be a whole number"),
            "{e}"
        );
        let e = parse_props(&["arc_max".into()]).unwrap_err().to_string();
        assert!(e.contains("expected PROP=VALUE"), "{e}");
    }
}
