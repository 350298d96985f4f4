//! Block decompression (engine/src/compress.rs), the first thing done to a block's stored bytes
//! after its checksum matched: arbitrary stored bytes and any logical length never panic
//! `decompress`; what decompresses has exactly the logical length, and compressing it again
//! decompresses to the same bytes.
//!
//! Input: [algorithm u8][logical length u16 LE][stored bytes].
#![no_main]

use fardisk_engine::compress::{compress, decompress, Compression};
use libfuzzer_sys::fuzz_target;

fuzz_target!(init: fardisk_fuzz::write_seeds("engine_decompress", fardisk_fuzz::seeds::compressed_blocks), |data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let Ok(algo) = Compression::from_u8(data[0]) else { return };
    let logical_bytes = u16::from_le_bytes([data[1], data[2]]) as usize;
    let Ok(plain) = decompress(algo, &data[3..], logical_bytes) else { return };
    assert_eq!(plain.len(), logical_bytes);
    let (used, stored) = compress(algo, &plain);
    assert_eq!(decompress(used, &stored, logical_bytes).expect("our own compression decompresses"), plain);
});
