//! What a fenced writer held: the writes it acknowledged from its intent log and never
//! published in a txg (shared/design/CLARIFICATIONS.md, #17 claim 6, point 4).
//!
//! Once another host has claimed the pool, those writes can no longer reach the store: the new
//! writer starts from the newest published root and cannot read this host's log. They are not
//! thrown away either. The moment the writer learns it was fenced (a lease renewal or a root PUT
//! that finds another writer's key) it copies every live log record newer than its last
//! published txg into a *held records file* in `PoolConfig::held_records_dir`, names the file,
//! the txg range and the record count in its log and in `status`, and keeps the records
//! unreleased in its log until the process ends. The file stays until an operator discards it
//! (`fardisk held discard FILE`); `fardisk held show FILE` lists what it holds. This file writes
//! it; `held_reader.rs` reads it, one record at a time.
//!
//! File layout (little-endian; docs/format.md "Held records file"):
//! ```text
//! 0    8  magic "FDHELD01"
//! 8    4  version (1)
//! 12   4  flags (0)
//! 16  16  pool guid
//! 32  16  import id of the fenced writer
//! 48   8  its epoch
//! 56   8  newest txg it published
//! 64   8  its open txg when it was fenced
//! 72   8  wall-clock ms when the file was written (for operators only)
//! 80   8  record count R
//! 88   -  pool name, hostname, reason (each u16 length + UTF-8)
//! -    4  volume count V, then V x { u32 volume id, u16 length + UTF-8 name }
//! -    8  xxh3-64 of every header byte before it
//! then R x record:
//!      8  log sequence number
//!      8  txg
//!      4  volume id
//!      1  kind (1 = write, 2 = trim, 3 = write zeroes; as in the log)
//!      3  reserved (0)
//!      8  offset (bytes into the volume)
//!      4  length (bytes of the volume affected)
//!      4  data length D (= length for writes, 0 otherwise)
//!      D  data
//!      8  xxh3-64 of the record's bytes before it
//! ```

use super::Inner;
use crate::codec::{checksum64, Writer};
use crate::error::Error;
use fardisk_slog::{IntentLog, LogRecord, RecordKind};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(super) const MAGIC: &[u8; 8] = b"FDHELD01";
pub(super) const VERSION: u32 = 1;
/// File name suffix of held records files (`fardisk held` refuses other files).
pub const HELD_FILE_SUFFIX: &str = ".held";
/// Records a file may claim at most: a log ring holds far fewer (a 4 KiB record per 4 KiB
/// block of a log device of at most a few GiB), so a larger count is damage, not data.
pub(super) const RECORDS_MAX: u64 = 1 << 24;

/// One acknowledged, never published operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRecord {
    pub seq: u64,
    pub record: LogRecord,
}

/// The contents of a held records file (with no records: its header, as the writer and the
/// reader handle it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeldRecords {
    pub pool_guid: u128,
    pub import_id: u128,
    pub epoch: u64,
    pub published_txg: u64,
    pub open_txg: u64,
    pub time_ms: u64,
    pub pool_name: String,
    pub hostname: String,
    pub reason: String,
    /// Volume names by id, as the fenced writer knew them.
    pub volumes: BTreeMap<u32, String>,
    pub records: Vec<HeldRecord>,
}

/// What `status` says about held records (fields are stable; add, never rename).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HeldSummary {
    /// The held records file, or null when it could not be written (the log still holds them).
    pub path: Option<String>,
    pub records: u64,
    pub data_bytes: u64,
    /// First and last txg of the held records (0 and 0 when there are none).
    pub txg_first: u64,
    pub txg_last: u64,
    /// Why it could not be written, when it could not.
    pub error: Option<String>,
    /// True from the moment the writer is fenced until the records are counted and written
    /// (the other fields are 0 and null meanwhile): a fenced pool's status never lacks `held`.
    pub writing: bool,
}

impl HeldSummary {
    /// Nothing counted yet, nothing being written.
    pub(super) fn counting() -> HeldSummary {
        HeldSummary { writing: false, ..writing() }
    }

    /// Counts one more record: the one rule of the writer, the reader and `summary`.
    pub(super) fn add(&mut self, txg: u64, data_bytes: u64) {
        self.txg_first = if self.records == 0 { txg } else { self.txg_first.min(txg) };
        self.txg_last = self.txg_last.max(txg);
        self.records += 1;
        self.data_bytes += data_bytes;
    }
}

impl HeldRecords {
    pub fn summary(&self, path: Option<&Path>) -> HeldSummary {
        let mut summary = HeldSummary::counting();
        summary.path = path.map(|p| p.display().to_string());
        for r in &self.records {
            summary.add(r.record.txg, r.record.data.len() as u64);
        }
        summary
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.header_bytes(self.records.len() as u64);
        for r in &self.records {
            out.extend_from_slice(&record_bytes(r));
        }
        out
    }

    /// The header (everything before the records) for a file of `count` records; the records
    /// of `self` are not looked at, so a writer can stream them (`HeldFileWriter`).
    fn header_bytes(&self, count: u64) -> Vec<u8> {
        let mut w = Writer::with_capacity(256);
        w.bytes(MAGIC).u32(VERSION).u32(0).u128(self.pool_guid).u128(self.import_id);
        w.u64(self.epoch).u64(self.published_txg).u64(self.open_txg).u64(self.time_ms);
        w.u64(count);
        w.str(&self.pool_name).str(&self.hostname).str(&self.reason);
        w.u32(self.volumes.len() as u32);
        for (id, name) in &self.volumes {
            w.u32(*id).str(name);
        }
        w.seal();
        w.buf
    }
}

fn kind_code(kind: RecordKind) -> u8 {
    match kind {
        RecordKind::Write => 1,
        RecordKind::Trim => 2,
        RecordKind::WriteZeroes => 3,
    }
}

/// One record as the file stores it, its checksum last.
fn record_bytes(r: &HeldRecord) -> Vec<u8> {
    let rec = &r.record;
    let mut w = Writer::with_capacity(56 + rec.data.len());
    w.u64(r.seq).u64(rec.txg).u32(rec.volume_id).u8(kind_code(rec.kind)).bytes(&[0; 3]);
    w.u64(rec.offset_bytes).u32(rec.length_bytes).u32(rec.data.len() as u32);
    w.bytes(&rec.data);
    let sum = checksum64(&w.buf);
    w.u64(sum);
    w.buf
}

pub(super) fn kind_from(code: u8) -> Option<RecordKind> {
    match code {
        1 => Some(RecordKind::Write),
        2 => Some(RecordKind::Trim),
        3 => Some(RecordKind::WriteZeroes),
        _ => None,
    }
}

/// Writes a held records file one record at a time, so memory holds one record whatever the
/// log holds: the header goes first with a count of 0, the records after it, then the header
/// again with the count (the same length: only the count and the checksum change), an fsync,
/// the rename from the temporary name and an fsync of the directory.
struct HeldFileWriter {
    file: std::io::BufWriter<std::fs::File>,
    tmp: PathBuf,
    count: u64,
}

impl HeldFileWriter {
    fn create(tmp: PathBuf, header: &HeldRecords) -> std::io::Result<HeldFileWriter> {
        if let Some(dir) = tmp.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode_owner_only()
            .open(&tmp)?;
        let mut file = std::io::BufWriter::with_capacity(1 << 20, file);
        file.write_all(&header.header_bytes(0))?;
        Ok(HeldFileWriter { file, tmp, count: 0 })
    }

    fn push(&mut self, record: &HeldRecord) -> std::io::Result<()> {
        self.file.write_all(&record_bytes(record))?;
        self.count += 1;
        Ok(())
    }

    /// On failure the temporary file goes too.
    fn finish(self, header: &HeldRecords, path: &Path) -> std::io::Result<()> {
        use std::io::{Seek, SeekFrom};
        let tmp = self.tmp;
        let written = self.file.into_inner().map_err(|e| e.into_error()).and_then(|mut file| {
            file.seek(SeekFrom::Start(0))?;
            file.write_all(&header.header_bytes(self.count))?;
            file.sync_all()?;
            std::fs::rename(&tmp, path)
        });
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written?;
        std::fs::File::open(path.parent().unwrap_or(Path::new(".")))?.sync_all()
    }

    /// Gives up: the temporary file goes (best effort; it is owner-only and named `.held.tmp`).
    fn abandon(self) {
        let tmp = self.tmp.clone();
        drop(self);
        let _ = std::fs::remove_file(tmp);
    }
}

/// Owner-only permissions: the records are the database's data.
trait OwnerOnly {
    fn mode_owner_only(&mut self) -> &mut Self;
}

impl OwnerOnly for std::fs::OpenOptions {
    fn mode_owner_only(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.mode(0o600)
    }
}

/// Called once the writer knows it was fenced (`why` says by whom): marks the pool FENCED,
/// collects the log records newer than its last published txg, writes them to a held records
/// file, and says so in `status` (`Inner::held`). Runs once per pool: the renewal loop and the
/// syncer may both get here, and only the first writes the file. Never fails: what cannot be
/// written is reported instead.
pub(crate) async fn fence(inner: &Arc<Inner>, why: &str) {
    // `held` says "being written" before the health says FENCED, and status reads the health
    // first, so no status shows a fenced pool without `held` while the records are written
    // (which takes seconds for a log of hundreds of MiB).
    let log = inner.intent.log();
    let first = {
        let mut held = inner.held.lock();
        let first = held.is_none();
        if first && log.is_some() {
            *held = Some(writing());
        }
        first
    };
    inner.health.lock().fault(&Error::Fenced(why.to_string()));
    if let (true, Some(log)) = (first, log) {
        let summary = hold(inner, why, log).await;
        *inner.held.lock() = Some(summary);
    }
}

/// Writes the log records newer than the last published txg to a held records file, reading
/// the log as it writes (`replay_stream`): one record in memory, whatever the log holds.
async fn hold(inner: &Arc<Inner>, why: &str, log: Arc<IntentLog>) -> HeldSummary {
    let published = inner.txg.published_txg();
    let header = HeldRecords {
        pool_guid: inner.guid,
        import_id: inner.import_id,
        epoch: inner.epoch,
        published_txg: published,
        open_txg: inner.txg.open_txg(),
        time_ms: inner.env.clock.wall_ms(),
        pool_name: inner.name.clone(),
        hostname: super::this_host(),
        reason: why.to_string(),
        volumes: inner.meta.read().volumes.iter().map(|(id, v)| (*id, v.name.clone())).collect(),
        records: Vec::new(),
    };
    let dir = inner.config.read().held_records_dir.clone();
    let copied = inner
        .env
        .blocking("writing held records", move || copy_held(&log, &header, dir.as_deref()))
        .await;
    let mut summary = match copied {
        Ok(Ok(summary)) => summary,
        Ok(Err(e)) => return failed(format!("reading the log: {e}")),
        Err(e) => return failed(e.to_string()),
    };
    if summary.records == 0 {
        tracing::error!(
            "{why}; this writer stops. Every write it acknowledged was in a published txg (newest {published}): nothing is held"
        );
        return summary;
    }
    if let Some(path) = &summary.path {
        tracing::error!(
            "{why}; this writer stops. {} records ({} bytes, txgs {}..={}) it acknowledged from its intent log after txg {published} are not in the store: the log keeps them unreleased until this process ends, and they are held in {path} ('fardisk held show FILE' lists them, 'fardisk held discard FILE' removes the file)",
            summary.records, summary.data_bytes, summary.txg_first, summary.txg_last
        );
        return summary;
    }
    let e = summary.error.get_or_insert_with(|| "no held records directory configured".into());
    tracing::error!(
        "{why}; this writer stops. {} records ({} bytes, txgs {}..={}) acknowledged after txg {published} are not in the store: the log keeps them unreleased until this process ends (they could not be written to a held records file: {e})",
        summary.records, summary.data_bytes, summary.txg_first, summary.txg_last
    );
    summary
}

/// Streams the live records after `header.published_txg` into a file in `dir` (when there is
/// one) and counts them. Err only when the log cannot be read; a file that cannot be written
/// is the summary's `error`, with the records still counted.
fn copy_held(
    log: &IntentLog,
    header: &HeldRecords,
    dir: Option<&Path>,
) -> std::result::Result<HeldSummary, fardisk_slog::LogError> {
    let mut summary = HeldSummary::counting();
    let tmp = dir.map(|d| {
        d.join(format!(
            "{}-{:032x}-epoch{}{HELD_FILE_SUFFIX}.tmp",
            header.pool_name, header.pool_guid, header.epoch
        ))
    });
    let mut file: Option<HeldFileWriter> = None;
    let mut stream = log.replay_stream(header.published_txg)?;
    // Bounded by the records the log holds: the stream ends at the end of its prefix.
    while let Some(replayed) = stream.next_record() {
        let held = HeldRecord { seq: replayed.seq, record: replayed.record };
        summary.add(held.record.txg, held.record.data.len() as u64);
        if summary.error.is_some() {
            continue;
        }
        let Some(tmp) = &tmp else { continue };
        let pushed = match file.as_mut() {
            Some(writer) => writer.push(&held),
            None => HeldFileWriter::create(tmp.clone(), header)
                .and_then(|writer| file.insert(writer).push(&held)),
        };
        if let Err(e) = pushed {
            summary.error = Some(format!("writing {}: {e}", tmp.display()));
            if let Some(writer) = file.take() {
                writer.abandon();
            }
        }
    }
    // The log may release what it published meanwhile once the stream is gone.
    drop(stream);
    if let (Some(writer), Some(dir)) = (file, dir) {
        let path = dir.join(format!(
            "{}-{:032x}-epoch{}-txg{}-{}{HELD_FILE_SUFFIX}",
            header.pool_name, header.pool_guid, header.epoch, summary.txg_first, summary.txg_last
        ));
        match writer.finish(header, &path) {
            Ok(()) => summary.path = Some(path.display().to_string()),
            Err(e) => summary.error = Some(format!("writing {}: {e}", path.display())),
        }
    }
    Ok(summary)
}

fn failed(error: String) -> HeldSummary {
    HeldSummary { error: Some(error), ..HeldSummary::counting() }
}

fn writing() -> HeldSummary {
    HeldSummary {
        path: None,
        records: 0,
        data_bytes: 0,
        txg_first: 0,
        txg_last: 0,
        error: None,
        writing: true,
    }
}

/// Where a held records file from `import_dir` lists for an operator (`fardisk held list`).
pub fn list_held_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_str().is_some_and(|s| s.ends_with(HELD_FILE_SUFFIX)))
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn sample() -> HeldRecords {
        let write = |seq, txg, off, fill: u8| HeldRecord {
            seq,
            record: LogRecord {
                txg,
                volume_id: 1,
                kind: RecordKind::Write,
                offset_bytes: off,
                length_bytes: 4096,
                data: Bytes::from(vec![fill; 4096]),
            },
        };
        HeldRecords {
            pool_guid: 0x5eed,
            import_id: 7,
            epoch: 3,
            published_txg: 9,
            open_txg: 11,
            time_ms: 1_700_000_000_000,
            pool_name: "tank".into(),
            hostname: "host-a".into(),
            reason: "fenced".into(),
            volumes: [(1, "pg".to_string())].into_iter().collect(),
            records: vec![
                write(40, 10, 0, 1),
                HeldRecord {
                    seq: 41,
                    record: LogRecord {
                        txg: 10,
                        volume_id: 1,
                        kind: RecordKind::Trim,
                        offset_bytes: 8192,
                        length_bytes: 8192,
                        data: Bytes::new(),
                    },
                },
                write(42, 11, 4096, 2),
            ],
        }
    }

    #[test]
    fn a_held_records_file_round_trips_and_says_what_it_holds() {
        let h = sample();
        let back = HeldRecords::decode(&h.encode()).expect("decode");
        assert_eq!(back, h);
        let s = h.summary(None);
        assert_eq!((s.records, s.data_bytes, s.txg_first, s.txg_last), (3, 8192, 10, 11));
    }

    #[test]
    fn a_file_written_record_by_record_is_the_encoded_file() {
        let h = sample();
        let dir = std::env::temp_dir().join(format!("fardisk-held-{}", std::process::id()));
        let tmp = dir.join("x.held.tmp");
        let path = dir.join("x.held");
        let mut writer = HeldFileWriter::create(tmp.clone(), &h).expect("create");
        for r in &h.records {
            writer.push(r).expect("push");
        }
        writer.finish(&h, &path).expect("finish");
        let written = std::fs::read(&path).expect("read");
        assert!(!tmp.exists(), "the temporary name is gone");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(written, h.encode());
        assert_eq!(HeldRecords::decode(&written).expect("decode"), h);
    }

    #[test]
    fn every_flipped_bit_and_truncation_is_refused() {
        let buf = sample().encode();
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x04;
            assert!(HeldRecords::decode(&bad).is_err(), "byte {i} flipped went unnoticed");
        }
        for cut in [0, 7, 90, buf.len() / 2, buf.len() - 1] {
            assert!(HeldRecords::decode(&buf[..cut]).is_err(), "truncated at {cut} accepted");
        }
        let mut longer = buf.clone();
        longer.push(0);
        assert!(HeldRecords::decode(&longer).is_err(), "trailing bytes accepted");
    }
}
