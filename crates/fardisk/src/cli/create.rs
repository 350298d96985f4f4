//! `fardisk create`: a new pool in an object store, with its log and cache devices.

use super::vdev_spec::parse_vdevs;
use crate::daemon::serve::open_store;
use crate::paths::{save_record, PoolRecord};
use anyhow::{bail, Result};
use fardisk_engine::objstore::SimulateSpec;
use fardisk_engine::pool::CreateOptions;
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
}

pub fn parse_props(items: &[String]) -> Result<BTreeMap<String, String>> {
    let mut props = BTreeMap::new();
    for p in items {
        let Some((k, v)) = p.split_once('=') else { bail!("-o {p}: expected PROP=VALUE, e.g. -o compression=zstd") };
        fardisk_engine::pool::validate_prop(k, v).map_err(|e| anyhow::anyhow!("-o {p}: {e}"))?;
        props.insert(k.to_string(), v.to_string());
    }
    Ok(props)
}

pub async fn run(a: CreateArgs) -> Result<()> {
    let props = parse_props(&a.props)?;
    let vdevs = parse_vdevs(&a.vdevs)?;
    let simulate = a.simulate.as_deref().map(SimulateSpec::parse).transpose().map_err(|e| anyhow::anyhow!("{e}"))?;
    if !vdevs.is_empty() {
        bail!("log and cache devices are not supported by this build yet; create the pool without them");
    }
    let env = Env::system();
    let store = open_store(&a.store_url, &simulate, &env, true)?;
    let root = Pool::create(store, &a.pool, CreateOptions { props, vdevs: Vec::new() }, &env).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    save_record(&PoolRecord { name: a.pool.clone(), store_url: a.store_url.clone(), simulate: a.simulate.clone() })?;
    println!("created pool '{}' in {} (guid {:032x})", a.pool, a.store_url, root.pool_guid);
    Ok(())
}
