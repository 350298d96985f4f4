//! Log records: one logged block-device operation, and its 64-byte on-disk header.
//!
//! ```text
//! off size field
//!   0   4  magic "FDLR"
//!   4   2  version (1)
//!   6   1  kind (1 = write, 2 = trim, 3 = write zeroes)
//!   7   1  reserved (0)
//!   8   8  global sequence number
//!  16   8  txg
//!  24   4  volume id
//!  28   4  length (bytes of the volume affected)
//!  32   8  offset (bytes into the volume)
//!  40   4  data length (bytes following the header; = length for writes, 0 otherwise)
//!  44   4  reserved (0)
//!  48   8  xxh3-64 of the data
//!  56   8  chain checksum: xxh3-64 of bytes 0..56 seeded with the previous record's chain
//!          checksum (the first record of a block is seeded with the block's prev_chain)
//! ```

use bytes::Bytes;

use crate::checksum::{chained64, checksum64};
use crate::le::{get_u16, get_u32, get_u64, get_u8, CodecError, Writer};

pub const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"FDLR");
pub const RECORD_VERSION: u16 = 1;
pub const RECORD_HEADER_BYTES: usize = 64;
const CHAIN_OFFSET: usize = 56;

/// The operation a record logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordKind {
    Write,
    Trim,
    WriteZeroes,
}

impl RecordKind {
    fn code(self) -> u8 {
        match self {
            RecordKind::Write => 1,
            RecordKind::Trim => 2,
            RecordKind::WriteZeroes => 3,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(RecordKind::Write),
            2 => Some(RecordKind::Trim),
            3 => Some(RecordKind::WriteZeroes),
            _ => None,
        }
    }
}

/// One logged operation. `data` is empty unless `kind` is `Write`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRecord {
    pub txg: u64,
    pub volume_id: u32,
    pub kind: RecordKind,
    pub offset_bytes: u64,
    pub length_bytes: u32,
    pub data: Bytes,
}

impl LogRecord {
    /// Bytes this record takes inside a log block.
    pub fn encoded_len_bytes(&self) -> u64 {
        (RECORD_HEADER_BYTES + self.data.len()) as u64
    }

    /// Checks the record is self-consistent before it is logged.
    pub fn validate(&self) -> Result<(), String> {
        match self.kind {
            RecordKind::Write if self.data.len() != self.length_bytes as usize => Err(format!(
                "write record carries {} data bytes for a length of {}",
                self.data.len(),
                self.length_bytes
            )),
            RecordKind::Trim | RecordKind::WriteZeroes if !self.data.is_empty() => {
                Err(format!("{:?} record must not carry data", self.kind))
            }
            _ => Ok(()),
        }
    }
}

/// Appends the record at `buf[at..]`; returns the record's chain checksum.
pub fn encode_record(
    buf: &mut [u8],
    at: usize,
    seq: u64,
    record: &LogRecord,
    prev_chain: u64,
) -> u64 {
    let mut w = Writer::with_capacity(RECORD_HEADER_BYTES);
    w.u32(RECORD_MAGIC).u16(RECORD_VERSION).u8(record.kind.code()).u8(0).u64(seq);
    w.u64(record.txg).u32(record.volume_id).u32(record.length_bytes).u64(record.offset_bytes);
    w.u32(record.data.len() as u32).u32(0).u64(checksum64(&record.data));
    debug_assert_eq!(w.len(), CHAIN_OFFSET);
    let chain = chained64(&w.buf, prev_chain);
    w.u64(chain);
    buf[at..at + RECORD_HEADER_BYTES].copy_from_slice(&w.buf);
    let data_at = at + RECORD_HEADER_BYTES;
    buf[data_at..data_at + record.data.len()].copy_from_slice(&record.data);
    chain
}

/// A record header shorter than its fields (unreachable: the header slice is checked first).
fn short(_: CodecError) -> &'static str {
    "record header past the payload"
}

/// A record decoded and verified from a block.
pub struct DecodedRecord {
    pub seq: u64,
    pub record: LogRecord,
    pub chain: u64,
    pub encoded_len: usize,
}

/// Decodes the record at `payload[at..]`, verifying magic, version, the expected sequence
/// number, the chain link and the data checksum. `payload` is a `Bytes` so record data is a
/// zero-copy slice of the block.
pub fn decode_record(
    payload: &Bytes,
    at: usize,
    expect_seq: u64,
    prev_chain: u64,
) -> Result<DecodedRecord, &'static str> {
    let header =
        payload.get(at..at + RECORD_HEADER_BYTES).ok_or("record header past the payload")?;
    if get_u32(header, 0).map_err(short)? != RECORD_MAGIC
        || get_u16(header, 4).map_err(short)? != RECORD_VERSION
    {
        return Err("bad record magic or version");
    }
    let chain = get_u64(header, CHAIN_OFFSET).map_err(short)?;
    if chain != chained64(&header[..CHAIN_OFFSET], prev_chain) {
        return Err("record chain checksum mismatch");
    }
    if get_u64(header, 8).map_err(short)? != expect_seq {
        return Err("record sequence number out of order");
    }
    let kind =
        RecordKind::from_code(get_u8(header, 6).map_err(short)?).ok_or("unknown record kind")?;
    let data_len = get_u32(header, 40).map_err(short)? as usize;
    let data_at = at + RECORD_HEADER_BYTES;
    if data_at + data_len > payload.len() {
        return Err("record data past the payload");
    }
    let data = payload.slice(data_at..data_at + data_len);
    if checksum64(&data) != get_u64(header, 48).map_err(short)? {
        return Err("record data checksum mismatch");
    }
    let record = LogRecord {
        txg: get_u64(header, 16).map_err(short)?,
        volume_id: get_u32(header, 24).map_err(short)?,
        kind,
        offset_bytes: get_u64(header, 32).map_err(short)?,
        length_bytes: get_u32(header, 28).map_err(short)?,
        data,
    };
    record.validate().map_err(|_| "record fields inconsistent")?;
    Ok(DecodedRecord {
        seq: expect_seq,
        record,
        chain,
        encoded_len: RECORD_HEADER_BYTES + data_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(len: usize) -> LogRecord {
        LogRecord {
            txg: 5,
            volume_id: 2,
            kind: RecordKind::Write,
            offset_bytes: 8192,
            length_bytes: len as u32,
            data: Bytes::from(vec![3u8; len]),
        }
    }

    #[test]
    fn record_round_trip_and_chain() {
        let rec = write(100);
        let mut buf = vec![0u8; 256];
        let chain = encode_record(&mut buf, 0, 42, &rec, 9);
        let payload = Bytes::from(buf);
        let decoded = decode_record(&payload, 0, 42, 9).map_err(String::from).expect("valid");
        assert_eq!(decoded.record, rec);
        assert_eq!(decoded.chain, chain);
        assert_eq!(decoded.encoded_len, 164);
        assert!(decode_record(&payload, 0, 42, 10).is_err(), "wrong previous link");
        assert!(decode_record(&payload, 0, 43, 9).is_err(), "wrong sequence number");
    }

    #[test]
    fn data_corruption_detected() {
        let mut buf = vec![0u8; 256];
        encode_record(&mut buf, 0, 1, &write(100), 0);
        buf[RECORD_HEADER_BYTES + 50] ^= 1;
        assert!(decode_record(&Bytes::from(buf), 0, 1, 0).is_err());
    }

    #[test]
    fn validation() {
        assert!(write(10).validate().is_ok());
        let mut bad = write(10);
        bad.length_bytes = 11;
        assert!(bad.validate().is_err());
        let trim = LogRecord { kind: RecordKind::Trim, data: Bytes::new(), ..write(0) };
        assert!(trim.validate().is_ok());
        let trim_with_data = LogRecord { kind: RecordKind::Trim, ..write(4) };
        assert!(trim_with_data.validate().is_err());
    }
}
