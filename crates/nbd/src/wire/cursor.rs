//! A bounds-checked big-endian reader over a byte slice. Every accessor returns
//! `WireError::Truncated` instead of panicking, so parsers built on it are safe on any
//! input (this is what the fuzz targets exercise).

use super::consts::STRING_BYTES_MAX;
use super::error::WireError;

pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, position: 0 }
    }

    pub(crate) fn remaining_bytes(&self) -> usize {
        self.bytes.len() - self.position
    }

    pub(crate) fn take(&mut self, length_bytes: usize) -> Result<&'a [u8], WireError> {
        let available_bytes = self.remaining_bytes();
        if length_bytes > available_bytes {
            return Err(WireError::Truncated { needed_bytes: length_bytes, available_bytes });
        }
        let slice = &self.bytes[self.position..self.position + length_bytes];
        self.position += length_bytes;
        Ok(slice)
    }

    fn take_array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut array = [0u8; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }

    pub(crate) fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_be_bytes(self.take_array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(self.take_array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_be_bytes(self.take_array()?))
    }

    /// Reads `length_bytes` as a protocol string (UTF-8, no NUL, at most 4096 bytes).
    pub(crate) fn string(&mut self, length_bytes: usize) -> Result<String, WireError> {
        if length_bytes > STRING_BYTES_MAX {
            return Err(WireError::StringTooLong { length_bytes, max_bytes: STRING_BYTES_MAX });
        }
        decode_string(self.take(length_bytes)?)
    }

    /// Reads a string prefixed by its 32-bit length.
    pub(crate) fn string_u32(&mut self) -> Result<String, WireError> {
        let length_bytes = self.u32()? as usize;
        self.string(length_bytes)
    }

    pub(crate) fn finish(&self, what: &'static str) -> Result<(), WireError> {
        match self.remaining_bytes() {
            0 => Ok(()),
            extra_bytes => Err(WireError::TrailingBytes { what, extra_bytes }),
        }
    }
}

/// Validates a protocol string: UTF-8 without NUL characters.
pub(crate) fn decode_string(bytes: &[u8]) -> Result<String, WireError> {
    let text = std::str::from_utf8(bytes).map_err(|_| WireError::BadString)?;
    if text.contains('\0') {
        return Err(WireError::BadString);
    }
    Ok(text.to_owned())
}

/// Appends a string with a 32-bit big-endian length prefix.
pub(crate) fn put_string_u32(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(&(text.len() as u32).to_be_bytes());
    out.extend_from_slice(text.as_bytes());
}
