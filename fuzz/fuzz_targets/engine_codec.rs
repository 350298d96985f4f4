//! The engine's field codec (engine/src/codec.rs), under every structure above: a program of
//! reads with `Reader` over arbitrary bytes never panics, a failed read is an error, and what was
//! read re-encodes with `Writer` to exactly the bytes consumed. `verify_sealed` accepts exactly
//! what `Writer::seal` makes.
//!
//! Input: [op count n][n opcodes][bytes the reads consume]. Opcode % 8: 0 u8, 1 u16, 2 u32,
//! 3 u64, 4 u128, 5 str, 6 bytes(opcode >> 3), 7 verify_sealed of the rest (ends the program).
#![no_main]

use fardisk_engine::codec::{checksum64, verify_sealed, Reader, Writer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(init: fardisk_fuzz::write_seeds("engine_codec", fardisk_fuzz::seeds::codec_programs), |data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else { return };
    let (ops, payload) = rest.split_at((n as usize).min(rest.len()));
    let mut r = Reader::new(payload, "fuzz");
    let mut w = Writer::default();
    let mut all_read = true;
    for &op in ops {
        let before = r.position();
        let read = match op % 8 {
            0 => r.u8().map(|v| { w.u8(v); }),
            1 => r.u16().map(|v| { w.u16(v); }),
            2 => r.u32().map(|v| { w.u32(v); }),
            3 => r.u64().map(|v| { w.u64(v); }),
            4 => r.u128().map(|v| { w.u128(v); }),
            5 => r.str().map(|v| { w.str(&v); }),
            6 => r.bytes(op as usize >> 3).map(|v| { w.bytes(v); }),
            _ => {
                let tail = &payload[before..];
                if let Ok(body) = verify_sealed(tail, "fuzz") {
                    assert_eq!(body.len() + 8, tail.len());
                    assert_eq!(checksum64(body).to_le_bytes()[..], tail[body.len()..]);
                }
                let mut sealed = Writer::default();
                sealed.bytes(tail).seal();
                assert_eq!(verify_sealed(&sealed.buf, "fuzz").expect("a sealed buffer verifies"), tail);
                // It covers the rest of the input: nothing left for later opcodes to read.
                break;
            }
        };
        assert_eq!(r.position() + r.remaining(), payload.len());
        if read.is_err() {
            // A failed fixed-width read consumes nothing. A failed string may have consumed its
            // length, or all of itself when it is not UTF-8: callers drop the reader on error.
            assert!(r.position() == before || op % 8 == 5);
            all_read = false;
            break;
        }
    }
    if all_read {
        assert_eq!(w.buf[..], payload[..r.position()], "what was read re-encodes to the same bytes");
    }
});
