//! `fardisk volume create|destroy|list|resize`.

use super::query::call;
use super::size::{human, parse_size};
use crate::config::Config;
use crate::control::Request;
use anyhow::{bail, Result};
use serde_json::json;

#[derive(Debug, clap::Subcommand)]
pub enum VolumeCmd {
    /// Create a thin volume: `volume create POOL/VOLUME SIZE` (e.g. 8G, up to 16T)
    #[command(after_help = "Example:\n  fardisk volume create tank/pg 8G")]
    Create { target: String, size: String },
    /// Destroy a volume and free its space (-r: with its snapshots)
    #[command(
        after_help = "Examples:\n  fardisk volume destroy tank/scratch\n  fardisk volume destroy -r tank/old   # and its snapshots"
    )]
    Destroy {
        target: String,
        /// Also destroy the volume's snapshots (refused while a clone needs one)
        #[arg(short = 'r')]
        recursive: bool,
    },
    /// List the volumes of a pool
    #[command(
        after_help = "Examples:\n  fardisk volume list tank\n  fardisk volume list tank --json"
    )]
    List {
        pool: String,
        #[arg(long)]
        json: bool,
    },
    /// Change a volume's size (growing is instant; shrinking frees the blocks past the new end)
    #[command(after_help = "Example:\n  fardisk volume resize tank/pg 16G")]
    Resize { target: String, size: String },
}

fn split(target: &str) -> Result<(&str, &str)> {
    match target.split_once('/') {
        Some((p, v)) if !p.is_empty() && !v.is_empty() => Ok((p, v)),
        _ => bail!("'{target}': expected POOL/VOLUME, e.g. tank/pg"),
    }
}

pub async fn run(c: VolumeCmd, cfg: &Config) -> Result<()> {
    match c {
        VolumeCmd::Create { target, size } => {
            let (pool, vol) = split(&target)?;
            let bytes = parse_size(&size)?;
            call(cfg, pool, Request::VolumeCreate { name: vol.to_string(), size_bytes: bytes })
                .await?;
            println!("created volume {target} ({})", human(bytes));
        }
        VolumeCmd::Destroy { target, recursive } => {
            let (pool, vol) = split(&target)?;
            call(cfg, pool, Request::VolumeDestroy { name: vol.to_string(), recursive }).await?;
            println!("destroyed volume {target}");
        }
        VolumeCmd::Resize { target, size } => {
            let (pool, vol) = split(&target)?;
            let bytes = parse_size(&size)?;
            call(cfg, pool, Request::VolumeResize { name: vol.to_string(), size_bytes: bytes })
                .await?;
            println!("resized volume {target} to {}", human(bytes));
        }
        VolumeCmd::List { pool, json } => {
            let v = call(cfg, &pool, Request::Status).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&json!({"volumes": v["volumes"]}))?);
            } else {
                println!("{:<24} {:>8} {:>8}", "NAME", "SIZE", "ALLOC");
                for vol in v["volumes"].as_array().into_iter().flatten() {
                    println!(
                        "{:<24} {:>8} {:>8}",
                        format!("{pool}/{}", vol["name"].as_str().unwrap_or("?")),
                        human(vol["size_bytes"].as_u64().unwrap_or(0)),
                        human(vol["allocated_bytes"].as_u64().unwrap_or(0))
                    );
                }
            }
        }
    }
    Ok(())
}
