//! The explicit-width little-endian codec of every structure that crosses a device or the
//! network, and the checksum they all use (xxh3-64, seed 0). Never `usize::to_le_bytes`:
//! widths are part of the format (docs/format.md).
//!
//! * [`Writer`] appends fields to a growable buffer: it cannot run out of room.
//! * [`Reader`] reads fields in order; [`get_u8`] .. [`get_u128`] read at a fixed offset. Both
//!   are bounds-checked: bytes from a device or the store that are too short are a
//!   [`CodecError`], never a panic, whatever length checks a caller forgot.
//! * [`put_u8`] .. [`put_u128`] write at a fixed offset into a buffer the encoder sized from its
//!   own layout (an O_DIRECT sector, say); they return an error rather than panic as well.

/// xxh3-64 of `bytes`: the checksum of every block, page, record, label and root.
pub fn checksum64(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// xxh3-64 of the concatenation of `parts` (a header and a table that are not adjacent).
pub fn checksum64_parts(parts: &[&[u8]]) -> u64 {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.digest()
}

/// Why bytes could not be decoded (or a field could not be placed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The buffer ends before the field does.
    #[error("{what}: truncated at byte {at} (need {need} more)")]
    Truncated { what: &'static str, at: usize, need: usize },
    /// A string field is not UTF-8.
    #[error("{what}: string is not UTF-8")]
    NotUtf8 { what: &'static str },
}

impl CodecError {
    /// What the bytes were meant to be (the `what` given to the reader).
    pub fn what(&self) -> &'static str {
        match self {
            CodecError::Truncated { what, .. } | CodecError::NotUtf8 { what } => what,
        }
    }

    /// The reason without the structure's name ("truncated at byte 3 (need 8 more)").
    pub fn why(&self) -> String {
        match self {
            CodecError::Truncated { at, need, .. } => {
                format!("truncated at byte {at} (need {need} more)")
            }
            CodecError::NotUtf8 { .. } => "string is not UTF-8".to_string(),
        }
    }
}

/// Appends explicit-width little-endian fields to a growable buffer.
#[derive(Default, Debug, Clone)]
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
    /// `n` zero bytes (reserved fields, padding).
    pub fn zeros(&mut self, n: usize) -> &mut Self {
        self.buf.resize(self.buf.len() + n, 0);
        self
    }
    /// A string as u16 length + UTF-8 bytes (names and properties are short by construction;
    /// a longer one is cut at 65,535 bytes).
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
    pub fn into_inner(self) -> Vec<u8> {
        self.buf
    }
}

/// Reads explicit-width little-endian fields in order. Running off the end is a
/// [`CodecError::Truncated`] and consumes nothing.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// `what` names the structure in errors ("root", "log label").
    pub fn new(buf: &'a [u8], what: &'static str) -> Reader<'a> {
        Reader { buf, pos: 0, what }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        let s = slice_at(self.buf, self.pos, n, self.what)?;
        self.pos += n;
        Ok(s)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
    pub fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16, CodecError> {
        self.array().map(u16::from_le_bytes)
    }
    pub fn u32(&mut self) -> Result<u32, CodecError> {
        self.array().map(u32::from_le_bytes)
    }
    pub fn u64(&mut self) -> Result<u64, CodecError> {
        self.array().map(u64::from_le_bytes)
    }
    pub fn u128(&mut self) -> Result<u128, CodecError> {
        self.array().map(u128::from_le_bytes)
    }
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        self.take(n)
    }
    /// Steps over `n` bytes (reserved fields).
    pub fn skip(&mut self, n: usize) -> Result<(), CodecError> {
        self.take(n).map(|_| ())
    }
    /// A u16 length + UTF-8 string. On error the length may have been consumed.
    pub fn str(&mut self) -> Result<String, CodecError> {
        let len = self.u16()? as usize;
        let raw = self.take(len)?;
        String::from_utf8(raw.to_vec()).map_err(|_| CodecError::NotUtf8 { what: self.what })
    }
    pub fn position(&self) -> usize {
        self.pos
    }
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
}

fn slice_at<'a>(
    buf: &'a [u8],
    at: usize,
    n: usize,
    what: &'static str,
) -> Result<&'a [u8], CodecError> {
    at.checked_add(n).and_then(|end| buf.get(at..end)).ok_or(CodecError::Truncated {
        what,
        at,
        need: n,
    })
}

fn array_at<const N: usize>(buf: &[u8], at: usize) -> Result<[u8; N], CodecError> {
    let mut out = [0u8; N];
    out.copy_from_slice(slice_at(buf, at, N, "field")?);
    Ok(out)
}

/// The byte at `at`.
pub fn get_u8(buf: &[u8], at: usize) -> Result<u8, CodecError> {
    array_at::<1>(buf, at).map(|b| b[0])
}
/// The u16 at byte `at`.
pub fn get_u16(buf: &[u8], at: usize) -> Result<u16, CodecError> {
    array_at(buf, at).map(u16::from_le_bytes)
}
/// The u32 at byte `at`.
pub fn get_u32(buf: &[u8], at: usize) -> Result<u32, CodecError> {
    array_at(buf, at).map(u32::from_le_bytes)
}
/// The u64 at byte `at`.
pub fn get_u64(buf: &[u8], at: usize) -> Result<u64, CodecError> {
    array_at(buf, at).map(u64::from_le_bytes)
}
/// The u128 at byte `at`.
pub fn get_u128(buf: &[u8], at: usize) -> Result<u128, CodecError> {
    array_at(buf, at).map(u128::from_le_bytes)
}

fn put_at(buf: &mut [u8], at: usize, bytes: &[u8]) -> Result<(), CodecError> {
    let need = bytes.len();
    let dest = at
        .checked_add(need)
        .and_then(|end| buf.get_mut(at..end))
        .ok_or(CodecError::Truncated { what: "field", at, need })?;
    dest.copy_from_slice(bytes);
    Ok(())
}

/// Writes `v` at byte `at`.
pub fn put_u8(buf: &mut [u8], at: usize, v: u8) -> Result<(), CodecError> {
    put_at(buf, at, &[v])
}
/// Writes `v` at byte `at`, little-endian.
pub fn put_u16(buf: &mut [u8], at: usize, v: u16) -> Result<(), CodecError> {
    put_at(buf, at, &v.to_le_bytes())
}
/// Writes `v` at byte `at`, little-endian.
pub fn put_u32(buf: &mut [u8], at: usize, v: u32) -> Result<(), CodecError> {
    put_at(buf, at, &v.to_le_bytes())
}
/// Writes `v` at byte `at`, little-endian.
pub fn put_u64(buf: &mut [u8], at: usize, v: u64) -> Result<(), CodecError> {
    put_at(buf, at, &v.to_le_bytes())
}
/// Writes `v` at byte `at`, little-endian.
pub fn put_u128(buf: &mut [u8], at: usize, v: u128) -> Result<(), CodecError> {
    put_at(buf, at, &v.to_le_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_little_endian_with_explicit_widths() {
        let mut w = Writer::default();
        w.u8(7).u16(0x0102).u32(0x0304_0506).u64(0x0708_090a_0b0c_0d0e);
        w.u128(0x1122_3344_5566_7788_99aa_bbcc_ddee_ff00).str("tank").zeros(3);
        assert_eq!(w.buf[..3], [7, 0x02, 0x01], "least significant byte first");
        assert_eq!(w.len(), 1 + 2 + 4 + 8 + 16 + 2 + 4 + 3);
        let mut r = Reader::new(&w.buf, "test");
        assert_eq!(r.u8(), Ok(7));
        assert_eq!(r.u16(), Ok(0x0102));
        assert_eq!(r.u32(), Ok(0x0304_0506));
        assert_eq!(r.u64(), Ok(0x0708_090a_0b0c_0d0e));
        assert_eq!(r.u128(), Ok(0x1122_3344_5566_7788_99aa_bbcc_ddee_ff00));
        assert_eq!(r.str().as_deref(), Ok("tank"));
        assert_eq!(r.bytes(3), Ok(&[0u8, 0, 0][..]));
        assert_eq!(r.remaining(), 0);
        assert_eq!(get_u16(&w.buf, 1), Ok(0x0102));
        assert_eq!(get_u128(&w.buf, 15), Ok(0x1122_3344_5566_7788_99aa_bbcc_ddee_ff00));
    }

    /// slog's offset readers (`le::get_u64(buf, at)`) and arc's `LeReader` sliced the buffer
    /// and panicked when it was shorter than the field; the shared ones return an error. This
    /// test panicked with the old slog `get_u64` and arc `LeReader::u64`.
    #[test]
    fn a_short_buffer_is_an_error_not_a_panic() {
        let short = [1u8, 2, 3, 4];
        assert_eq!(
            get_u64(&short, 0),
            Err(CodecError::Truncated { what: "field", at: 0, need: 8 })
        );
        assert!(get_u32(&short, 1).is_err());
        assert_eq!(get_u32(&short, 0), Ok(0x0403_0201));
        assert!(get_u8(&short, usize::MAX).is_err(), "an offset that overflows is an error");
        assert!(get_u128(&[], 0).is_err());
        let mut r = Reader::new(&short, "label");
        assert_eq!(r.u64(), Err(CodecError::Truncated { what: "label", at: 0, need: 8 }));
        assert_eq!(r.position(), 0, "a failed read consumes nothing");
        assert_eq!(r.u16(), Ok(0x0201));
        let e = r.u32().expect_err("2 bytes left");
        assert_eq!(e.to_string(), "label: truncated at byte 2 (need 4 more)");
        assert_eq!(e.why(), "truncated at byte 2 (need 4 more)");
        assert!(r.bytes(usize::MAX).is_err(), "a length that overflows is an error");
        let mut out = [0u8; 4];
        assert!(put_u64(&mut out, 0, 1).is_err(), "a field that does not fit is refused");
        assert_eq!(out, [0; 4], "and nothing is written");
        put_u16(&mut out, 2, 0xaabb).expect("fits");
        assert_eq!(out, [0, 0, 0xbb, 0xaa]);
    }

    #[test]
    fn strings_must_be_utf8_and_fit() {
        let mut w = Writer::default();
        w.u16(2).bytes(&[0xff, 0xfe]);
        assert_eq!(Reader::new(&w.buf, "name").str(), Err(CodecError::NotUtf8 { what: "name" }));
        let mut w = Writer::default();
        w.u16(10).bytes(b"abc");
        assert!(Reader::new(&w.buf, "name").str().is_err());
    }

    #[test]
    fn seal_appends_the_checksum_of_what_came_before() {
        let mut w = Writer::default();
        w.bytes(b"hello ").bytes(b"world").seal();
        let (body, tail) = w.buf.split_at(w.len() - 8);
        assert_eq!(tail, checksum64(body).to_le_bytes());
        assert_eq!(checksum64_parts(&[b"hello ", b"world"]), checksum64(b"hello world"));
    }
}
