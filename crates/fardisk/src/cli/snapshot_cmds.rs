//! `fardisk snapshot`, `clone`, `promote` and `rollback`.

use super::query::call;
use super::size::human;
use crate::config::Config;
use crate::control::{Request, SnapshotTarget};
use anyhow::{bail, Result};

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SnapshotArgs {
    #[command(subcommand)]
    pub cmd: Option<SnapshotCmd>,
    /// POOL/VOLUME@NAME to take
    pub target: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
pub enum SnapshotCmd {
    /// List snapshots with the space each alone holds (what destroying it would free)
    #[command(
        after_help = "Examples:\n  fardisk snapshot list tank\n  fardisk snapshot list tank --json"
    )]
    List {
        pool: String,
        #[arg(long)]
        json: bool,
    },
    /// Destroy a snapshot and free what only it held (refused while a clone needs it)
    #[command(after_help = "Example:\n  fardisk snapshot destroy tank/pg@before-upgrade")]
    Destroy { target: String },
}

#[derive(Debug, clap::Args)]
pub struct CloneArgs {
    /// POOL/VOLUME@SNAPSHOT to clone
    pub snapshot: String,
    /// POOL/NEW_VOLUME
    pub target: String,
}

#[derive(Debug, clap::Args)]
pub struct RollbackArgs {
    /// POOL/VOLUME@SNAPSHOT
    pub target: String,
    /// Also destroy the volume's snapshots newer than this one
    #[arg(short = 'r')]
    pub recursive: bool,
}

/// `POOL/VOLUME@SNAPSHOT` into the pool and the snapshot.
fn split_snapshot(target: &str) -> Result<(&str, SnapshotTarget)> {
    match target.split_once('/') {
        Some((p, rest))
            if !p.is_empty()
                && rest.split_once('@').is_some_and(|(v, s)| !v.is_empty() && !s.is_empty()) =>
        {
            Ok((p, SnapshotTarget::parse(rest)?))
        }
        _ => bail!("'{target}': expected POOL/VOLUME@SNAPSHOT, e.g. tank/pg@nightly"),
    }
}

fn split_volume(target: &str) -> Result<(&str, &str)> {
    match target.split_once('/') {
        Some((p, v)) if !p.is_empty() && !v.is_empty() && !v.contains('@') => Ok((p, v)),
        _ => bail!("'{target}': expected POOL/VOLUME, e.g. tank/pg"),
    }
}

pub async fn snapshot(a: SnapshotArgs, cfg: &Config) -> Result<()> {
    match (a.cmd, a.target) {
        (Some(SnapshotCmd::List { pool, json }), _) => list(cfg, &pool, json).await,
        (Some(SnapshotCmd::Destroy { target }), _) => {
            let (pool, snap) = split_snapshot(&target)?;
            call(cfg, pool, Request::SnapshotDestroy { target: snap }).await?;
            println!("destroyed snapshot {target}");
            Ok(())
        }
        (None, Some(target)) => {
            let (pool, snap) = split_snapshot(&target)?;
            let v = call(cfg, pool, Request::SnapshotCreate { target: snap }).await?;
            println!("snapshot {target} taken at txg {} in {:.0} ms ({} referenced)", v["txg"],
                v["elapsed_ms"].as_f64().unwrap_or(0.0), human(v["referenced_bytes"].as_u64().unwrap_or(0)));
            Ok(())
        }
        (None, None) => bail!("name a snapshot to take (fardisk snapshot POOL/VOLUME@NAME), or use 'snapshot list POOL'"),
    }
}

async fn list(cfg: &Config, pool: &str, as_json: bool) -> Result<()> {
    let v = call(cfg, pool, Request::SnapshotList).await?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("{:<32} {:>8} {:>8} {:>8}  {:<20} CLONES", "NAME", "USED", "REFER", "TXG", "CREATION");
    for s in v["snapshots"].as_array().into_iter().flatten() {
        let created = s["time_ms"].as_u64().map(super::utc::date_time).unwrap_or_default();
        let clones: Vec<&str> =
            s["clones"].as_array().into_iter().flatten().filter_map(|c| c.as_str()).collect();
        println!(
            "{:<32} {:>8} {:>8} {:>8}  {:<20} {}",
            format!("{pool}/{}", s["full_name"].as_str().unwrap_or("?")),
            human(s["used_bytes"].as_u64().unwrap_or(0)),
            human(s["referenced_bytes"].as_u64().unwrap_or(0)),
            s["txg"].as_u64().unwrap_or(0),
            created,
            if clones.is_empty() { "-".to_string() } else { clones.join(",") }
        );
    }
    Ok(())
}

pub async fn clone(a: CloneArgs, cfg: &Config) -> Result<()> {
    let (pool, snap) = split_snapshot(&a.snapshot)?;
    let (pool2, name) = split_volume(&a.target)?;
    if pool != pool2 {
        bail!("a clone lives in its origin's pool: use {pool}/{name}");
    }
    let v = call(cfg, pool, Request::Clone { target: snap, name: name.to_string() }).await?;
    println!(
        "cloned {} as {} in {:.0} ms",
        a.snapshot,
        a.target,
        v["elapsed_ms"].as_f64().unwrap_or(0.0)
    );
    Ok(())
}

pub async fn promote(target: &str, cfg: &Config) -> Result<()> {
    let (pool, name) = split_volume(target)?;
    call(cfg, pool, Request::Promote { name: name.to_string() }).await?;
    println!("promoted {target}: it now owns its origin's snapshots");
    Ok(())
}

pub async fn rollback(a: RollbackArgs, cfg: &Config) -> Result<()> {
    let (pool, snap) = split_snapshot(&a.target)?;
    call(cfg, pool, Request::Rollback { target: snap, recursive: a.recursive }).await?;
    println!("rolled back to {}", a.target);
    Ok(())
}
