//! Little-endian field helpers for the on-device and on-object structures. Every field has an
//! explicit width; callers check lengths before calling, so these only slice.

/// Writes fields sequentially into a caller-provided buffer.
pub(crate) struct LeWriter<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> LeWriter<'a> {
    pub(crate) fn new(buf: &'a mut [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    fn put(&mut self, bytes: &[u8]) {
        let end = self.pos + bytes.len();
        self.buf[self.pos..end].copy_from_slice(bytes);
        self.pos = end;
    }

    pub(crate) fn u32(&mut self, v: u32) {
        self.put(&v.to_le_bytes());
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.put(&v.to_le_bytes());
    }

    pub(crate) fn u128(&mut self, v: u128) {
        self.put(&v.to_le_bytes());
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }
}

/// Reads fields sequentially from a slice whose length the caller has already checked.
pub(crate) struct LeReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> LeReader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        out.copy_from_slice(&self.buf[self.pos..self.pos + N]);
        self.pos += N;
        out
    }

    pub(crate) fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }

    pub(crate) fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }

    pub(crate) fn u128(&mut self) -> u128 {
        u128::from_le_bytes(self.take())
    }
}

/// xxh3-64 of the concatenation of `parts`, used for every checksum in this crate.
pub(crate) fn xxh3_parts(parts: &[&[u8]]) -> u64 {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.digest()
}

/// Deterministic 64-bit generator (splitmix64) for device guids; seeded by the caller.
pub(crate) fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_and_reader_round_trip_little_endian() {
        let mut buf = [0u8; 28];
        let mut w = LeWriter::new(&mut buf);
        w.u32(0x0403_0201);
        w.u64(0x0807_0605_0403_0201);
        w.u128(7);
        assert_eq!(w.position(), 28);
        assert_eq!(&buf[0..4], &[1, 2, 3, 4]);
        let mut r = LeReader::new(&buf);
        assert_eq!(r.u32(), 0x0403_0201);
        assert_eq!(r.u64(), 0x0807_0605_0403_0201);
        assert_eq!(r.u128(), 7);
    }

    #[test]
    fn xxh3_parts_equals_one_shot_hash() {
        let whole = xxhash_rust::xxh3::xxh3_64(b"hello world");
        assert_eq!(xxh3_parts(&[b"hello ", b"world"]), whole);
    }
}
