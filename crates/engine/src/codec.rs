//! Explicit-width little-endian encoding for every structure that crosses a device or the network,
//! and the checksum they all use. Never `usize::to_le_bytes`: widths are part of the format.

use crate::error::{Error, Result};

/// xxh3-64 of `bytes`: the checksum of every block, page, segment part and root.
pub fn checksum64(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

#[derive(Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn with_capacity(bytes: usize) -> Writer {
        Writer { buf: Vec::with_capacity(bytes) }
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u128(&mut self, v: u128) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(v);
        self
    }
    /// A string as u16 length + UTF-8 bytes (names and properties are short by construction).
    pub fn str(&mut self, v: &str) -> &mut Self {
        let len = v.len().min(u16::MAX as usize);
        self.u16(len as u16);
        self.buf.extend_from_slice(&v.as_bytes()[..len]);
        self
    }
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// Appends the checksum of everything written so far (the trailer of most structures).
    pub fn seal(&mut self) -> &mut Self {
        let sum = checksum64(&self.buf);
        self.u64(sum)
    }
}

/// Bounds-checked reader: running off the end is a `Corrupt` error, never a panic.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], what: &'static str) -> Reader<'a> {
        Reader { buf, pos: 0, what }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or_else(|| {
            Error::corrupt(self.what, format!("truncated at byte {} (need {n} more)", self.pos))
        })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    pub fn u128(&mut self) -> Result<u128> {
        Ok(u128::from_le_bytes(self.take(16)?.try_into().expect("16 bytes")))
    }
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        self.take(n)
    }
    pub fn str(&mut self) -> Result<String> {
        let len = self.u16()? as usize;
        let raw = self.take(len)?;
        String::from_utf8(raw.to_vec())
            .map_err(|_| Error::corrupt(self.what, "string is not UTF-8"))
    }
    pub fn position(&self) -> usize {
        self.pos
    }
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
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
