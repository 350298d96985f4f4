//! Explicit-width little-endian field access for the on-disk codecs.
//!
//! Every on-disk structure of the log is a fixed byte layout; these helpers keep the codecs free
//! of `usize` encodings and of panicking conversions.

pub(crate) fn put_u8(buf: &mut [u8], offset: usize, value: u8) {
    buf[offset] = value;
}

pub(crate) fn put_u16(buf: &mut [u8], offset: usize, value: u16) {
    buf[offset..offset + 2].copy_from_slice(&value.to_le_bytes());
}

pub(crate) fn put_u32(buf: &mut [u8], offset: usize, value: u32) {
    buf[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
}

pub(crate) fn put_u64(buf: &mut [u8], offset: usize, value: u64) {
    buf[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
}

pub(crate) fn put_u128(buf: &mut [u8], offset: usize, value: u128) {
    buf[offset..offset + 16].copy_from_slice(&value.to_le_bytes());
}

pub(crate) fn get_u8(buf: &[u8], offset: usize) -> u8 {
    buf[offset]
}

pub(crate) fn get_u16(buf: &[u8], offset: usize) -> u16 {
    let mut bytes = [0u8; 2];
    bytes.copy_from_slice(&buf[offset..offset + 2]);
    u16::from_le_bytes(bytes)
}

pub(crate) fn get_u32(buf: &[u8], offset: usize) -> u32 {
    let mut bytes = [0u8; 4];
    bytes.copy_from_slice(&buf[offset..offset + 4]);
    u32::from_le_bytes(bytes)
}

pub(crate) fn get_u64(buf: &[u8], offset: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&buf[offset..offset + 8]);
    u64::from_le_bytes(bytes)
}

pub(crate) fn get_u128(buf: &[u8], offset: usize) -> u128 {
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&buf[offset..offset + 16]);
    u128::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_little_endian() {
        let mut buf = [0u8; 40];
        put_u16(&mut buf, 0, 0x0102);
        put_u32(&mut buf, 2, 0x0304_0506);
        put_u64(&mut buf, 6, 0x0708_090a_0b0c_0d0e);
        put_u128(&mut buf, 14, 0x1122_3344_5566_7788_99aa_bbcc_ddee_ff00);
        put_u8(&mut buf, 30, 7);
        assert_eq!(buf[0], 0x02, "least significant byte first");
        assert_eq!(get_u16(&buf, 0), 0x0102);
        assert_eq!(get_u32(&buf, 2), 0x0304_0506);
        assert_eq!(get_u64(&buf, 6), 0x0708_090a_0b0c_0d0e);
        assert_eq!(get_u128(&buf, 14), 0x1122_3344_5566_7788_99aa_bbcc_ddee_ff00);
        assert_eq!(get_u8(&buf, 30), 7);
    }
}
