//! Reads a held records file (layout: `held.rs`, docs/format.md "Held records file") one record
//! at a time, so reading it costs a read buffer and one record whatever the file holds. A held
//! file can be as large as the intent log (gigabytes after a store outage); `fardisk held show`
//! read it whole and decoded every record beside it, twice its size in memory.
//!
//! This is the only parser of the format: `HeldRecords::decode` and `HeldRecords::read` (below)
//! collect what it yields. Every check is the one decode always made, in the same order, with
//! the same message: the header (magic, version, checksum, record count) right after it is
//! read, before any of its fields is returned; each record's checksum before the record is
//! returned; after the last counted record, that nothing follows. What the file holds is
//! known to be whole only once the reader has returned `None`: a command that acts on a file
//! (`held discard`) reads it to the end first ([`HeldReader::summarize`]).

use super::held::{kind_from, HeldRecord, HeldRecords, HeldSummary, HELD_FILE_SUFFIX};
use super::held::{MAGIC, RECORDS_MAX, VERSION};
use crate::codec::CodecError;
use crate::error::{Error, Result};
use bytes::Bytes;
use fardisk_slog::LogRecord;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use xxhash_rust::xxh3::Xxh3;

const WHAT: &str = "held records file";
/// The read buffer of a file: few system calls for a file of gigabytes, and still small beside
/// a single large write record.
pub const READ_BUFFER_BYTES: usize = 1 << 20;

/// A verified record whose data was checked against its checksum and not kept (`record.data` is
/// empty; `data_len` says how long it was): what listing and counting need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldEntry {
    pub seq: u64,
    pub record: LogRecord,
    pub data_len: u32,
}

/// A held records file being read: its verified header, then its records one by one.
pub struct HeldReader<R> {
    src: R,
    /// The file's path ("held records file" for other sources), for errors of the reading
    /// itself rather than of the bytes read ("cannot read PATH: ...").
    name: String,
    /// Bytes consumed so far: the positions in truncation errors, as decode of the whole file
    /// gives them.
    pos: usize,
    /// xxh3 of the structure being read (the header, then each record), reset at its start.
    sum: Xxh3,
    header: HeldRecords,
    count: u64,
    read: u64,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Records,
    /// Every counted record was read and nothing followed.
    End,
    /// An error was returned: what follows it is not to be trusted, so nothing is read again.
    Failed,
}

impl HeldReader<BufReader<std::fs::File>> {
    /// Opens a held records file and reads and verifies its header. Only a name that ends in
    /// `.held` is opened: `fardisk held discard` must not take a typo for a file to delete.
    pub fn open(path: &Path) -> Result<Self> {
        if path.extension().and_then(|e| e.to_str()) != Some(&HELD_FILE_SUFFIX[1..]) {
            return Err(Error::BadInput(format!(
                "{} is not a held records file (its name must end in {HELD_FILE_SUFFIX})",
                path.display()
            )));
        }
        let name = path.display().to_string();
        let file = std::fs::File::open(path)
            .map_err(|e| Error::BadInput(format!("cannot read {name}: {e}")))?;
        HeldReader::with_name(BufReader::with_capacity(READ_BUFFER_BYTES, file), name)
    }
}

impl<R: BufRead> HeldReader<R> {
    /// Reads and verifies the header from `src` (a `&[u8]` of a whole file, a buffered file).
    pub fn new(src: R) -> Result<Self> {
        HeldReader::with_name(src, WHAT.to_string())
    }

    fn with_name(src: R, name: String) -> Result<Self> {
        let mut r = HeldReader {
            src,
            name,
            pos: 0,
            sum: Xxh3::new(),
            header: HeldRecords::default(),
            count: 0,
            read: 0,
            // Until the header verifies: nothing of a reader that never returns is read.
            state: State::Failed,
        };
        r.read_header()?;
        r.state = State::Records;
        Ok(r)
    }

    /// The file's header: everything but the records (`records` is empty).
    pub fn header(&self) -> &HeldRecords {
        &self.header
    }

    /// The number of records the header says follow it (verified as they are read).
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The next record with its data, or `None` after the last one once nothing follows it.
    pub fn next_record(&mut self) -> Result<Option<HeldRecord>> {
        let next = self.next(true)?;
        Ok(next.map(|(seq, record, _)| HeldRecord { seq, record }))
    }

    /// The next record, its data verified and not kept, or `None` as for `next_record`.
    pub fn next_entry(&mut self) -> Result<Option<HeldEntry>> {
        let next = self.next(false)?;
        Ok(next.map(|(seq, record, data_len)| HeldEntry { seq, record, data_len }))
    }

    /// Every record, in memory: for small files and tests. `fardisk held` never does this.
    pub fn into_records(mut self) -> Result<HeldRecords> {
        let mut records = Vec::with_capacity(self.count.min(4096) as usize);
        while let Some(r) = self.next_record()? {
            records.push(r);
        }
        Ok(HeldRecords { records, ..self.header })
    }

    /// Reads to the end, verifying every record, and says what the file holds: the header and
    /// the counts `status` gives. Memory: the read buffer, whatever the file holds.
    pub fn summarize(mut self) -> Result<(HeldRecords, HeldSummary)> {
        let mut summary = HeldSummary::counting();
        while let Some(e) = self.next_entry()? {
            summary.add(e.record.txg, u64::from(e.data_len));
        }
        Ok((self.header, summary))
    }

    /// The next record: its sequence number, the record (data empty unless kept) and its data
    /// length.
    fn next(&mut self, keep_data: bool) -> Result<Option<(u64, LogRecord, u32)>> {
        match self.state {
            State::Records => {}
            State::End => return Ok(None),
            State::Failed => {
                return Err(Error::Bug("a held records file read on after an error".into()))
            }
        }
        let next = self.read_record(keep_data);
        match &next {
            Err(_) => self.state = State::Failed,
            Ok(None) => self.state = State::End,
            Ok(Some(_)) => self.read += 1,
        }
        next
    }

    fn read_header(&mut self) -> Result<()> {
        self.sum.reset();
        let mut magic = [0u8; 8];
        self.fill(&mut magic)?;
        if &magic != MAGIC {
            return Err(Error::corrupt(WHAT, "not a held records file (bad magic)"));
        }
        let version = self.u32()?;
        if version != VERSION {
            return Err(Error::corrupt(WHAT, format!("version {version} is not supported")));
        }
        let _flags = self.u32()?;
        let pool_guid = self.u128()?;
        let import_id = self.u128()?;
        let (epoch, published_txg) = (self.u64()?, self.u64()?);
        let (open_txg, time_ms) = (self.u64()?, self.u64()?);
        let count = self.u64()?;
        let (pool_name, hostname, reason) = (self.str()?, self.str()?, self.str()?);
        // A damaged count only reads on until the file ends: each entry is at least 6 bytes
        // of it, and the checksum below refuses the header before anything of it is used.
        let volume_count = self.u32()?;
        let mut volumes = BTreeMap::new();
        for _ in 0..volume_count {
            let id = self.u32()?;
            volumes.insert(id, self.str()?);
        }
        let expected = self.sum.digest();
        if self.u64()? != expected {
            return Err(Error::corrupt(WHAT, "header checksum mismatch"));
        }
        if count > RECORDS_MAX {
            return Err(Error::corrupt(WHAT, format!("{count} records is more than a log holds")));
        }
        self.count = count;
        self.header = HeldRecords {
            pool_guid,
            import_id,
            epoch,
            published_txg,
            open_txg,
            time_ms,
            pool_name,
            hostname,
            reason,
            volumes,
            records: Vec::new(),
        };
        Ok(())
    }

    /// One record (its data kept or not), or `None` when the counted records are all read and
    /// nothing follows them.
    fn read_record(&mut self, keep_data: bool) -> Result<Option<(u64, LogRecord, u32)>> {
        let i = self.read;
        if i == self.count {
            let trailing = self.skip_to_end()?;
            if trailing != 0 {
                return Err(Error::corrupt(
                    WHAT,
                    format!("{trailing} bytes after the last record"),
                ));
            }
            return Ok(None);
        }
        self.sum.reset();
        let (seq, txg, volume_id) = (self.u64()?, self.u64()?, self.u32()?);
        let kind = kind_from(self.u8()?)
            .ok_or_else(|| Error::corrupt(WHAT, format!("record {i} has an unknown kind")))?;
        self.fill(&mut [0u8; 3])?;
        let (offset_bytes, length_bytes, data_len) = (self.u64()?, self.u32()?, self.u32()?);
        let data = self.data(data_len as usize, keep_data)?;
        let expected = self.sum.digest();
        if self.u64()? != expected {
            return Err(Error::corrupt(WHAT, format!("record {i} checksum mismatch")));
        }
        let record = LogRecord { txg, volume_id, kind, offset_bytes, length_bytes, data };
        Ok(Some((seq, record, data_len)))
    }

    /// Reads exactly `out.len()` bytes into `out`. A file that ends first is truncated at the
    /// field's first byte, as decode of the whole file always said.
    fn fill(&mut self, out: &mut [u8]) -> Result<()> {
        let (at, need) = (self.pos, out.len());
        let mut done = 0;
        while done < need {
            let n = self.step(need - done, |b| out[done..done + b.len()].copy_from_slice(b))?;
            if n == 0 {
                return Err(CodecError::Truncated { what: WHAT, at, need }.into());
            }
            done += n;
        }
        Ok(())
    }

    /// `len` data bytes, kept only when asked: a reader that counts holds nothing of a
    /// record's data. Kept data grows with what is actually read, so a damaged length claims
    /// no more memory than the file has bytes.
    fn data(&mut self, len: usize, keep: bool) -> Result<Bytes> {
        let at = self.pos;
        let mut kept = Vec::with_capacity(if keep { len.min(READ_BUFFER_BYTES) } else { 0 });
        let mut left = len;
        while left > 0 {
            let n = self.step(left, |b| {
                if keep {
                    kept.extend_from_slice(b)
                }
            })?;
            if n == 0 {
                return Err(CodecError::Truncated { what: WHAT, at, need: len }.into());
            }
            left -= n;
        }
        Ok(Bytes::from(kept))
    }

    /// Counts the bytes after the last record, keeping none of them.
    fn skip_to_end(&mut self) -> Result<usize> {
        let mut total = 0;
        loop {
            match self.step(usize::MAX, |_| {})? {
                0 => return Ok(total),
                n => total += n,
            }
        }
    }

    /// Passes at most `max` buffered bytes (reading more when none are) to `sink` and the
    /// checksum, and consumes them: 0 at the end of the file.
    fn step(&mut self, max: usize, mut sink: impl FnMut(&[u8])) -> Result<usize> {
        // Retried apart from the read that returns the bytes: a loop that returned the
        // borrowed buffer from its body would not pass the borrow checker.
        loop {
            match self.src.fill_buf() {
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.read_error(e)),
            }
        }
        let name = &self.name;
        let buf =
            self.src.fill_buf().map_err(|e| Error::BadInput(format!("cannot read {name}: {e}")))?;
        let n = buf.len().min(max);
        self.sum.update(&buf[..n]);
        sink(&buf[..n]);
        self.src.consume(n);
        self.pos += n;
        Ok(n)
    }

    fn read_error(&self, e: std::io::Error) -> Error {
        Error::BadInput(format!("cannot read {}: {e}", self.name))
    }

    fn u8(&mut self) -> Result<u8> {
        let mut b = [0u8; 1];
        self.fill(&mut b)?;
        Ok(b[0])
    }

    fn u32(&mut self) -> Result<u32> {
        let mut b = [0u8; 4];
        self.fill(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> Result<u64> {
        let mut b = [0u8; 8];
        self.fill(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn u128(&mut self) -> Result<u128> {
        let mut b = [0u8; 16];
        self.fill(&mut b)?;
        Ok(u128::from_le_bytes(b))
    }

    /// A u16 length + UTF-8 string (names: at most 64 KiB by the format).
    fn str(&mut self) -> Result<String> {
        let mut len = [0u8; 2];
        self.fill(&mut len)?;
        let mut raw = vec![0u8; u16::from_le_bytes(len) as usize];
        self.fill(&mut raw)?;
        String::from_utf8(raw).map_err(|_| CodecError::NotUtf8 { what: WHAT }.into())
    }
}

impl HeldRecords {
    /// Decodes and verifies a whole held records file in memory (the reader over its bytes):
    /// magic, version, the header checksum and every record's checksum, before any field is
    /// trusted.
    pub fn decode(buf: &[u8]) -> Result<HeldRecords> {
        HeldReader::new(buf)?.into_records()
    }

    /// Reads and verifies a held records file, every record in memory: for tests and small
    /// files. `fardisk held` streams it with [`HeldReader`] instead.
    pub fn read(path: &Path) -> Result<HeldRecords> {
        HeldReader::open(path)?.into_records()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fardisk_slog::RecordKind;

    fn sample() -> HeldRecords {
        let record = |seq, txg, kind, offset_bytes, data: Vec<u8>| HeldRecord {
            seq,
            record: LogRecord {
                txg,
                volume_id: 1 + (seq % 2) as u32,
                kind,
                offset_bytes,
                length_bytes: if data.is_empty() { 8192 } else { data.len() as u32 },
                data: Bytes::from(data),
            },
        };
        HeldRecords {
            pool_guid: 0x5eed,
            import_id: 7,
            epoch: 3,
            published_txg: 9,
            open_txg: 12,
            time_ms: 1_700_000_000_000,
            pool_name: "tank".into(),
            hostname: "host-a".into(),
            reason: "fenced".into(),
            volumes: [(1, "pg".to_string()), (2, "wal".to_string())].into_iter().collect(),
            records: vec![
                record(40, 10, RecordKind::Write, 0, vec![1; 4096]),
                record(41, 10, RecordKind::Trim, 8192, Vec::new()),
                record(42, 11, RecordKind::Write, 4096, (0..=255).cycle().take(3000).collect()),
                record(43, 12, RecordKind::WriteZeroes, 1 << 20, Vec::new()),
                record(44, 12, RecordKind::Write, 512, vec![9; 512]),
            ],
        }
    }

    /// The header's length: `encode` of the records' header alone.
    fn header_len(h: &HeldRecords) -> usize {
        HeldRecords { records: Vec::new(), ..h.clone() }.encode().len()
    }

    /// The bytes of `h` with a header that counts `count` records (checksum right).
    fn with_count(h: &HeldRecords, count: usize) -> Vec<u8> {
        let first = h.records[0].clone();
        let header = HeldRecords { records: vec![first; count], ..h.clone() }.encode();
        let n = header_len(h);
        let mut out = header[..n].to_vec();
        out.extend_from_slice(&h.encode()[n..]);
        out
    }

    /// Everything a reader over `src` yields, or its first error's message.
    fn read_all<R: BufRead>(src: R) -> std::result::Result<HeldRecords, String> {
        HeldReader::new(src).and_then(|r| r.into_records()).map_err(|e| e.to_string())
    }

    /// The same bytes read with a 7-byte buffer: fields and data cut at every buffer boundary.
    fn read_in_pieces(buf: &[u8]) -> std::result::Result<HeldRecords, String> {
        read_all(BufReader::with_capacity(7, buf))
    }

    fn message(buf: &[u8]) -> String {
        HeldRecords::decode(buf).expect_err("refused").to_string()
    }

    #[test]
    fn a_written_file_reads_back_record_for_record() {
        let h = sample();
        let dir = std::env::temp_dir().join(format!("fardisk-held-reader-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("tank.held");
        // `HeldFileWriter` writes exactly `encode`'s bytes (held.rs tests).
        std::fs::write(&path, h.encode()).expect("write");
        let decoded = HeldRecords::decode(&h.encode()).expect("decode");
        assert_eq!(decoded, h);

        let mut r = HeldReader::open(&path).expect("open");
        assert_eq!(r.header(), &HeldRecords { records: Vec::new(), ..h.clone() });
        assert_eq!(r.count(), 5);
        for want in &decoded.records {
            assert_eq!(r.next_record().expect("a record").as_ref(), Some(want));
        }
        assert_eq!(r.next_record().expect("the end"), None);
        assert_eq!(r.next_record().expect("still the end"), None);

        let mut r = HeldReader::open(&path).expect("open");
        for want in &decoded.records {
            let e = r.next_entry().expect("an entry").expect("not the end");
            let record = LogRecord { data: Bytes::new(), ..want.record.clone() };
            assert_eq!(
                e,
                HeldEntry { seq: want.seq, record, data_len: want.record.data.len() as u32 }
            );
        }
        assert_eq!(r.next_entry().expect("the end"), None);

        let (header, summary) = HeldReader::open(&path).expect("open").summarize().expect("sum");
        assert_eq!(
            (header, summary),
            (HeldRecords { records: Vec::new(), ..h.clone() }, h.summary(None))
        );
        assert_eq!(HeldRecords::read(&path).expect("read"), h);
        assert_eq!(read_in_pieces(&h.encode()), Ok(h));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_empty_file_has_no_records_and_an_empty_summary() {
        let h = HeldRecords { records: Vec::new(), ..sample() };
        let (_, s) = HeldReader::new(&h.encode()[..]).expect("header").summarize().expect("end");
        assert_eq!((s.records, s.data_bytes, s.txg_first, s.txg_last), (0, 0, 0, 0));
    }

    #[test]
    fn damage_gets_the_message_decode_always_gave() {
        let h = sample();
        let buf = h.encode();
        let hl = header_len(&h);
        let what = "corrupt held records file";
        // The last record: a write of 512 bytes, 40 bytes of fields, its data, its checksum.
        let last = buf.len() - (40 + 512 + 8);
        let cases: Vec<(Vec<u8>, String)> = vec![
            (
                buf[..buf.len() - 1].to_vec(),
                format!("{what}: truncated at byte {} (need 8 more)", buf.len() - 8),
            ),
            (
                buf[..last + 100].to_vec(),
                format!("{what}: truncated at byte {} (need 512 more)", last + 40),
            ),
            (buf[..hl + 3].to_vec(), format!("{what}: truncated at byte {hl} (need 8 more)")),
            (buf[..5].to_vec(), format!("{what}: truncated at byte 0 (need 8 more)")),
            ([&buf[..], &[0, 0]].concat(), format!("{what}: 2 bytes after the last record")),
            (with_count(&h, 6), format!("{what}: truncated at byte {} (need 8 more)", buf.len())),
            (
                with_count(&h, 4),
                format!("{what}: {} bytes after the last record", buf.len() - last),
            ),
            (flip(&buf, last + 60), format!("{what}: record 4 checksum mismatch")),
            (flip(&buf, hl + 2), format!("{what}: record 0 checksum mismatch")),
            (flip(&buf, 30), format!("{what}: header checksum mismatch")),
            (flip(&buf, 0), format!("{what}: not a held records file (bad magic)")),
        ];
        for (bad, want) in cases {
            assert_eq!(message(&bad), want);
            assert_eq!(read_in_pieces(&bad), Err(want));
        }
    }

    fn flip(buf: &[u8], at: usize) -> Vec<u8> {
        let mut bad = buf.to_vec();
        bad[at] ^= 0x04;
        bad
    }

    #[test]
    fn every_flip_and_cut_is_refused_alike_in_memory_and_in_pieces() {
        let buf = sample().encode();
        for i in 0..buf.len() {
            let bad = flip(&buf, i);
            assert_eq!(read_in_pieces(&bad), Err(message(&bad)), "byte {i} flipped");
        }
        for cut in 0..buf.len() {
            let bad = &buf[..cut];
            assert_eq!(read_in_pieces(bad), Err(message(bad)), "cut at {cut}");
        }
    }

    #[test]
    fn a_reader_that_failed_reads_no_further() {
        let buf = flip(&sample().encode(), header_len(&sample()) + 2);
        let mut r = HeldReader::new(&buf[..]).expect("the header verifies");
        assert!(r.next_record().is_err(), "record 0 is damaged");
        assert!(matches!(r.next_record(), Err(Error::Bug(_))), "nothing after an error");
    }

    #[test]
    fn only_held_files_open() {
        let e = HeldReader::open(Path::new("/nonexistent/x.log")).err().expect("refused");
        assert!(e.to_string().contains("its name must end in .held"), "{e}");
        let e = HeldReader::open(Path::new("/nonexistent/x.held")).err().expect("refused");
        assert!(e.to_string().starts_with("cannot read /nonexistent/x.held: "), "{e}");
    }
}
