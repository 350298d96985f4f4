//! `fardisk held`: what a fenced writer acknowledged from its intent log and never published
//! (crates/engine/src/pool/held.rs). The files live in `$FARDISK_HOME/held/` until an operator
//! discards them; nothing here touches a pool or its store.

use crate::config::Config;
use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use fardisk_engine::pool::{list_held_files, HeldRecords};
use fardisk_slog::RecordKind;
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum HeldCmd {
    /// List the held records files in $FARDISK_HOME/held
    List,
    /// Show what a held records file holds: pool, txgs, and one line per record
    Show(ShowArgs),
    /// Delete a held records file once you have decided its writes are not needed
    Discard { file: PathBuf },
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    pub file: PathBuf,
    /// Machine-readable output (records without their data)
    #[arg(long)]
    pub json: bool,
}

pub fn run(c: HeldCmd, cfg: &Config) -> Result<()> {
    match c {
        HeldCmd::List => {
            let dir = cfg.paths.held_dir();
            let files = list_held_files(&dir);
            if files.is_empty() {
                println!("no held records in {}", dir.display());
            }
            for f in files {
                match HeldRecords::read(&f) {
                    Ok(h) => println!("{}  {}", f.display(), headline(&h)),
                    Err(e) => println!("{}  unreadable: {e}", f.display()),
                }
            }
            Ok(())
        }
        HeldCmd::Show(a) => {
            let h = HeldRecords::read(&a.file)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&json(&h))?);
            } else {
                print!("{}", render(&h));
            }
            Ok(())
        }
        HeldCmd::Discard { file } => {
            // Only a file that verifies as held records is removed: a typo cannot delete data.
            let h = HeldRecords::read(&file)?;
            if !file.is_file() {
                bail!("{} is not a regular file", file.display());
            }
            std::fs::remove_file(&file)?;
            println!("discarded {} ({})", file.display(), headline(&h));
            Ok(())
        }
    }
}

fn headline(h: &HeldRecords) -> String {
    let s = h.summary(None);
    format!(
        "pool {} epoch {}: {} records, {} bytes, txgs {}..{}, after published txg {}",
        h.pool_name, h.epoch, s.records, s.data_bytes, s.txg_first, s.txg_last, h.published_txg
    )
}

fn kind_name(k: RecordKind) -> &'static str {
    match k {
        RecordKind::Write => "write",
        RecordKind::Trim => "trim",
        RecordKind::WriteZeroes => "zero",
    }
}

fn render(h: &HeldRecords) -> String {
    let mut out = format!(
        "pool:      {} (guid {:032x})\nwriter:    host {}, epoch {}, import {:032x}\nfenced:    {}\npublished: txg {} (the new writer starts at or after it)\nheld:      {}\n\n{:>10} {:>8} {:<16} {:>6} {:>14} {:>10}\n",
        h.pool_name,
        h.pool_guid,
        h.hostname,
        h.epoch,
        h.import_id,
        h.reason,
        h.published_txg,
        headline(h),
        "SEQ",
        "TXG",
        "VOLUME",
        "KIND",
        "OFFSET",
        "LENGTH"
    );
    for r in &h.records {
        let volume = h
            .volumes
            .get(&r.record.volume_id)
            .cloned()
            .unwrap_or_else(|| format!("#{}", r.record.volume_id));
        out.push_str(&format!(
            "{:>10} {:>8} {:<16} {:>6} {:>14} {:>10}\n",
            r.seq,
            r.record.txg,
            volume,
            kind_name(r.record.kind),
            r.record.offset_bytes,
            r.record.length_bytes
        ));
    }
    out
}

fn json(h: &HeldRecords) -> serde_json::Value {
    serde_json::json!({
        "pool": h.pool_name,
        "pool_guid": format!("{:032x}", h.pool_guid),
        "hostname": h.hostname,
        "epoch": h.epoch,
        "import_id": format!("{:032x}", h.import_id),
        "reason": h.reason,
        "published_txg": h.published_txg,
        "open_txg": h.open_txg,
        "time_ms": h.time_ms,
        "summary": h.summary(None),
        "records": h.records.iter().map(|r| serde_json::json!({
            "seq": r.seq,
            "txg": r.record.txg,
            "volume": h.volumes.get(&r.record.volume_id),
            "volume_id": r.record.volume_id,
            "kind": kind_name(r.record.kind),
            "offset_bytes": r.record.offset_bytes,
            "length_bytes": r.record.length_bytes,
        })).collect::<Vec<_>>(),
    })
}
