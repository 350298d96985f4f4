//! `fardisk add`, `remove` and `replace`: log and cache devices of an imported pool, changed
//! while it serves (the daemon does the work; see crates/engine/src/pool/vdevs.rs for the order
//! that keeps a crash at any moment harmless).

use super::query::call;
use super::vdev_spec::parse_vdevs;
use crate::config::Config;
use crate::control::Request;
use anyhow::{bail, Result};

#[derive(Debug, clap::Args)]
pub struct AddArgs {
    pub pool: String,
    /// `log [mirror] DEVICE...` and `cache DEVICE...`, repeated
    #[arg(value_name = "VDEVS", required = true)]
    pub vdevs: Vec<String>,
    /// Relabel devices that carry another pool's label
    #[arg(short = 'f', long)]
    pub force: bool,
}

#[derive(Debug, clap::Args)]
pub struct RemoveArgs {
    pub pool: String,
    /// A log device (its whole vdev goes; for a mirror, any of its legs names it) or a cache device
    pub device: String,
}

#[derive(Debug, clap::Args)]
pub struct ReplaceArgs {
    pub pool: String,
    /// The log leg to replace (failed, missing, or to be moved)
    pub old_device: String,
    /// The device that takes its place; omitted: OLD_DEVICE itself, brought back in sync
    pub new_device: Option<String>,
    /// Relabel a NEW_DEVICE that carries another pool's label
    #[arg(short = 'f', long)]
    pub force: bool,
}

pub async fn add(a: AddArgs, cfg: &Config) -> Result<()> {
    let vdevs = parse_vdevs(&a.vdevs)?;
    for v in &vdevs {
        crate::vdev_format::check_absolute(&v.paths)?;
    }
    // One request per vdev, each published before the next: a failure leaves the ones before
    // it added and says so.
    for (i, v) in vdevs.iter().enumerate() {
        let request = Request::VdevAdd { vdev: v.clone(), force: a.force };
        if let Err(e) = call(cfg, &a.pool, request).await {
            if i > 0 {
                bail!("{e} (the {i} device group(s) before it were added)");
            }
            return Err(e);
        }
        let kind = if v.mirror { "log mirror" } else { v.role.name() };
        println!("added {kind} {} to pool '{}'", v.paths.join(" "), a.pool);
    }
    Ok(())
}

pub async fn remove(a: RemoveArgs, cfg: &Config) -> Result<()> {
    let v = call(cfg, &a.pool, Request::VdevRemove { path: a.device.clone() }).await?;
    let paths: Vec<String> = v["paths"]
        .as_array()
        .map(|p| p.iter().filter_map(|x| x.as_str().map(String::from)).collect())
        .unwrap_or_default();
    let role = v["role"].as_str().unwrap_or("device");
    println!("removed {role} {} from pool '{}'", paths.join(" "), a.pool);
    if role == "log" && v["log_left"] == false {
        println!(
            "pool '{}' has no log device now: sync requests wait for txgs to reach the store",
            a.pool
        );
    }
    Ok(())
}

pub async fn replace(a: ReplaceArgs, cfg: &Config) -> Result<()> {
    let new = a.new_device.clone().unwrap_or_else(|| a.old_device.clone());
    crate::vdev_format::check_absolute(std::slice::from_ref(&new))?;
    let request =
        Request::VdevReplace { old: a.old_device.clone(), new: new.clone(), force: a.force };
    call(cfg, &a.pool, request).await?;
    if new == a.old_device {
        println!("{} resilvered and back ONLINE in pool '{}'", new, a.pool);
    } else {
        println!(
            "replaced {} with {} in pool '{}' (resilvered, ONLINE)",
            a.old_device, new, a.pool
        );
    }
    Ok(())
}
