//! `fardisk held`: what a fenced writer acknowledged from its intent log and never published
//! (crates/engine/src/pool/held.rs). The files live in `$FARDISK_HOME/held/` until an operator
//! discards them; nothing here touches a pool or its store.
//!
//! A held file can be as large as the log (gigabytes after a store outage), so no command holds
//! it in memory: each reads it one record at a time (`HeldReader`, a 1 MiB read buffer). `show`
//! reads it twice, as its summary comes before the records: the first pass verifies every
//! record and counts them, the second prints them. `discard` removes a file only after reading
//! it to its end.

use crate::config::Config;
use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use fardisk_engine::pool::{list_held_files, HeldReader, HeldRecords, HeldSummary};
use fardisk_slog::RecordKind;
use serde::ser::{Error as _, SerializeMap, SerializeSeq};
use std::cell::RefCell;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

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
                match HeldReader::open(&f).and_then(|r| r.summarize()) {
                    Ok((h, s)) => println!("{}  {}", f.display(), headline(&h, &s)),
                    Err(e) => println!("{}  unreadable: {e}", f.display()),
                }
            }
            Ok(())
        }
        HeldCmd::Show(a) => {
            let (h, s) = HeldReader::open(&a.file)?.summarize()?;
            let mut records = reopen(&a.file, &h, &s)?;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            if a.json {
                let value = Json { h: &h, s: &s, records: RefCell::new(&mut records) };
                serde_json::to_writer_pretty(&mut out, &value)?;
                writeln!(out)?;
            } else {
                write_text(&mut out, &h, &s, &mut records)?;
            }
            out.flush()?;
            Ok(())
        }
        HeldCmd::Discard { file } => {
            // Only a file that verifies to its end as held records is removed: a typo (or a
            // damaged file, which an operator may still want to look at) cannot delete data.
            let (h, s) = HeldReader::open(&file)?.summarize()?;
            if !file.is_file() {
                bail!("{} is not a regular file", file.display());
            }
            std::fs::remove_file(&file)?;
            println!("discarded {} ({})", file.display(), headline(&h, &s));
            Ok(())
        }
    }
}

/// Opens `file` again for the pass that prints its records, refusing a file that is no longer
/// the one the first pass verified (the records it prints are verified again as they are read).
fn reopen(
    file: &Path,
    h: &HeldRecords,
    s: &HeldSummary,
) -> Result<HeldReader<std::io::BufReader<std::fs::File>>> {
    let r = HeldReader::open(file)?;
    if r.header() != h || r.count() != s.records {
        bail!("{} changed while it was read: run the command again", file.display());
    }
    Ok(r)
}

fn headline(h: &HeldRecords, s: &HeldSummary) -> String {
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

fn volume_name(h: &HeldRecords, id: u32) -> String {
    h.volumes.get(&id).cloned().unwrap_or_else(|| format!("#{id}"))
}

fn write_text<R: BufRead>(
    out: &mut impl Write,
    h: &HeldRecords,
    s: &HeldSummary,
    records: &mut HeldReader<R>,
) -> Result<()> {
    write!(
        out,
        "pool:      {} (guid {:032x})\nwriter:    host {}, epoch {}, import {:032x}\nfenced:    {}\npublished: txg {} (the new writer starts at or after it)\nheld:      {}\n\n{:>10} {:>8} {:<16} {:>6} {:>14} {:>10}\n",
        h.pool_name,
        h.pool_guid,
        h.hostname,
        h.epoch,
        h.import_id,
        h.reason,
        h.published_txg,
        headline(h, s),
        "SEQ",
        "TXG",
        "VOLUME",
        "KIND",
        "OFFSET",
        "LENGTH"
    )?;
    while let Some(r) = records.next_entry()? {
        writeln!(
            out,
            "{:>10} {:>8} {:<16} {:>6} {:>14} {:>10}",
            r.seq,
            r.record.txg,
            volume_name(h, r.record.volume_id),
            kind_name(r.record.kind),
            r.record.offset_bytes,
            r.record.length_bytes
        )?;
    }
    Ok(())
}

/// `held show --json`, written as the records are read. The keys are in the order serde_json
/// prints a map's (sorted: its maps are BTreeMaps), which is what this command printed when it
/// built the whole document as one `serde_json::Value`.
struct Json<'a, R> {
    h: &'a HeldRecords,
    s: &'a HeldSummary,
    /// `Serialize` takes `&self`, and reading moves the reader on.
    records: RefCell<&'a mut HeldReader<R>>,
}

impl<R: BufRead> serde::Serialize for Json<'_, R> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let h = self.h;
        let summary = serde_json::to_value(self.s).map_err(S::Error::custom)?;
        let mut m = ser.serialize_map(Some(11))?;
        m.serialize_entry("epoch", &h.epoch)?;
        m.serialize_entry("hostname", &h.hostname)?;
        m.serialize_entry("import_id", &format!("{:032x}", h.import_id))?;
        m.serialize_entry("open_txg", &h.open_txg)?;
        m.serialize_entry("pool", &h.pool_name)?;
        m.serialize_entry("pool_guid", &format!("{:032x}", h.pool_guid))?;
        m.serialize_entry("published_txg", &h.published_txg)?;
        m.serialize_entry("reason", &h.reason)?;
        m.serialize_entry("records", &JsonRecords { h, records: &self.records })?;
        m.serialize_entry("summary", &summary)?;
        m.serialize_entry("time_ms", &h.time_ms)?;
        m.end()
    }
}

struct JsonRecords<'a, 'b, R> {
    h: &'a HeldRecords,
    records: &'b RefCell<&'a mut HeldReader<R>>,
}

impl<R: BufRead> serde::Serialize for JsonRecords<'_, '_, R> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut records = self.records.borrow_mut();
        let mut seq = ser.serialize_seq(Some(records.count() as usize))?;
        while let Some(r) = records.next_entry().map_err(S::Error::custom)? {
            seq.serialize_element(&serde_json::json!({
                "seq": r.seq,
                "txg": r.record.txg,
                "volume": self.h.volumes.get(&r.record.volume_id),
                "volume_id": r.record.volume_id,
                "kind": kind_name(r.record.kind),
                "offset_bytes": r.record.offset_bytes,
                "length_bytes": r.record.length_bytes,
            }))?;
        }
        seq.end()
    }
}
