//! The input of the whole-device targets (slog_open, l2arc_open): patches to device images
//! written by the real code, as a torn write, rot or a stale device would present them.
//!
//! `[image: 1 byte, modulo the image count] [offset: u32 LE, modulo the image] [len: 1 byte]
//! [len bytes]`, repeated; a patch past the end of an image is cut there, a last patch the
//! input holds only in part keeps the bytes it has.

/// Applies every patch of `data` to `images` (at least one).
pub fn apply(images: &mut [Vec<u8>], data: &[u8]) {
    let mut at = 0usize;
    while at + 6 <= data.len() {
        let which = data[at] as usize % images.len();
        let offset =
            u32::from_le_bytes([data[at + 1], data[at + 2], data[at + 3], data[at + 4]]) as usize;
        let len = data[at + 5] as usize;
        at += 6;
        let bytes = &data[at..(at + len).min(data.len())];
        at += bytes.len();
        let image = &mut images[which];
        let start = offset % image.len();
        let end = (start + bytes.len()).min(image.len());
        image[start..end].copy_from_slice(&bytes[..end - start]);
    }
}

/// One patch as `apply` reads it (for seeds); `bytes` holds at most 255 bytes.
pub fn encode(image: u8, offset: u32, bytes: &[u8]) -> Vec<u8> {
    let len = u8::try_from(bytes.len()).expect("a patch holds at most 255 bytes");
    let mut p = vec![image];
    p.extend_from_slice(&offset.to_le_bytes());
    p.push(len);
    p.extend_from_slice(bytes);
    p
}
