//! The decoders of bytes read from log devices, for the cargo-fuzz targets in `fuzz/` at the
//! repository root. Not an API: hidden from the docs and free to change with the format. The
//! targets call the very functions open and replay call, so what they find is what a damaged
//! device would do to us.
//!
//! Besides the decoders, the `reseal_*` helpers recompute the checksums of a mutated encoding,
//! so a target can get past the checksum checks and exercise the field checks behind them.

pub use crate::block::{
    decode_header, decode_payload, encode_block, BlockContext, BlockError, BlockHeader,
    BLOCK_HEADER_BYTES,
};
pub use crate::head::LogHead;
pub use crate::label::{DeviceLabel, LabelDecodeError, Role};
pub use crate::record::{
    decode_record, encode_record, DecodedRecord, LogRecord, RecordKind, RECORD_HEADER_BYTES,
};
pub use crate::ring::ChainPoint;

use crate::le::{get_u32, get_u64, put_u64, CodecError};

/// The plain checksum of every structure of the log.
pub fn checksum64(bytes: &[u8]) -> u64 {
    crate::checksum::checksum64(bytes)
}

/// The chained checksum of a record header.
pub fn chained64(bytes: &[u8], prev_chain: u64) -> u64 {
    crate::checksum::chained64(bytes, prev_chain)
}

/// Recomputes the data checksum and chain link of the record at `buf[at..]` (as far as the
/// buffer holds it); returns the new chain value, or None when the header does not fit.
pub fn reseal_record(buf: &mut [u8], at: usize, prev_chain: u64) -> Option<u64> {
    let header_end = at.checked_add(RECORD_HEADER_BYTES).filter(|end| *end <= buf.len())?;
    let data_len = get_u32(buf, at + 40).ok()? as usize;
    let data_end = header_end.saturating_add(data_len).min(buf.len());
    let data_sum = checksum64(&buf[header_end..data_end]);
    put_u64(buf, at + 48, data_sum).ok()?;
    let chain = chained64(&buf[at..at + 56], prev_chain);
    put_u64(buf, at + 56, chain).ok()?;
    Some(chain)
}

/// Recomputes every record link, the payload checksum and the header checksum of a block, so
/// only the field checks stand between mutated bytes and the decoder.
pub fn reseal_block(buf: &mut [u8]) {
    let _ = reseal_block_fields(buf);
}

fn reseal_block_fields(buf: &mut [u8]) -> Result<(), CodecError> {
    let payload_len = get_u32(buf, 52)? as usize;
    get_u64(buf, 120)?; // The header is all there before anything is rewritten.
    let payload_end = BLOCK_HEADER_BYTES.saturating_add(payload_len).min(buf.len());
    let mut chain = get_u64(buf, 32)?;
    let mut at = BLOCK_HEADER_BYTES;
    // Records are resealed in place while they fit: their chain links the next one.
    for _ in 0..get_u32(buf, 48)?.min(1024) {
        if at + RECORD_HEADER_BYTES > payload_end {
            break;
        }
        let Some(next) = reseal_record(&mut buf[..payload_end], at, chain) else { break };
        chain = next;
        at = at.saturating_add(RECORD_HEADER_BYTES + get_u32(buf, at + 40)? as usize);
    }
    let payload_sum = checksum64(&buf[BLOCK_HEADER_BYTES..payload_end]);
    put_u64(buf, 88, payload_sum)?;
    let header_sum = checksum64(&buf[..120]);
    put_u64(buf, 120, header_sum)
}

/// Recomputes the checksum of a head slot.
pub fn reseal_head(buf: &mut [u8]) {
    if buf.len() >= 128 {
        let sum = checksum64(&buf[..120]);
        let _ = put_u64(buf, 120, sum);
    }
}

/// Recomputes the checksum of a label copy.
pub fn reseal_label(buf: &mut [u8]) {
    const CHECKSUM_OFFSET: usize = 4096 - 8;
    if buf.len() >= 4096 {
        let sum = checksum64(&buf[..CHECKSUM_OFFSET]);
        let _ = put_u64(buf, CHECKSUM_OFFSET, sum);
    }
}
