//! Explicit-width little-endian encoding for every structure that crosses a device or the network,
//! and the checksum they all use (`fardisk-common`'s codec, shared with the intent log and the
//! caches). Never `usize::to_le_bytes`: widths are part of the format. A short buffer is a
//! `Corrupt` error, never a panic.

use crate::error::{Error, Result};

pub use fardisk_common::le::{checksum64, CodecError, Reader, Writer};

impl From<CodecError> for Error {
    /// Bytes too short for their fields, or a name that is not UTF-8: the structure is corrupt.
    fn from(e: CodecError) -> Error {
        Error::corrupt(e.what(), e.why())
    }
}

/// Verifies a structure whose last 8 bytes are the checksum of everything before them, and
/// returns the body. Called right after reading, before any field is trusted.
pub fn verify_sealed<'a>(buf: &'a [u8], what: &str) -> Result<&'a [u8]> {
    if buf.len() < 8 {
        return Err(Error::corrupt(what, format!("{} bytes is too short", buf.len())));
    }
    let (body, tail) = buf.split_at(buf.len() - 8);
    let expected = u64::from_le_bytes(tail.try_into().expect("8 bytes"));
    let found = checksum64(body);
    if expected != found {
        return Err(Error::Checksum { what: what.to_string(), expected, found });
    }
    Ok(body)
}
