//! Any 28 bytes: parsing never panics, a parsed header re-encodes to the same bytes,
//! and validation of it never panics and never yields an out-of-bounds action.
#![no_main]

use fardisk_nbd::server::{validate, Action, ExportLimits};
use fardisk_nbd::wire::consts::REQUEST_HEADER_BYTES;
use fardisk_nbd::wire::{Command, RequestHeader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(header) = RequestHeader::parse(data) else {
        return;
    };
    assert_eq!(data.len(), REQUEST_HEADER_BYTES);
    assert_eq!(&header.encode()[..], data);
    let limits = ExportLimits {
        size_bytes: 1 << 30,
        min_block_bytes: 512,
        max_request_bytes: 1 << 25,
        read_only: data[4] & 0x80 != 0,
        structured_replies: data[5] & 0x80 != 0,
        base_allocation: data[5] & 0x40 != 0,
        fast_zero: true,
        fua_always: false,
    };
    if let Ok(action) = validate(&header, &limits) {
        let in_range = header
            .offset
            .checked_add(header.length_bytes as u64)
            .is_some_and(|end| end <= limits.size_bytes);
        match action {
            Action::Flush => assert!(header.offset == 0 && header.length_bytes == 0),
            Action::Nothing => assert_eq!(header.length_bytes, 0),
            Action::Disconnect => assert_eq!(header.command, Command::Disconnect),
            _ => {
                assert!(in_range);
                assert_eq!(header.offset % 512, 0);
            }
        }
    }
});
