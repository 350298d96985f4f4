//! Option code + data: parsing never panics, and a parsed option re-encodes into
//! bytes that parse to the same option.
#![no_main]

use fardisk_nbd::wire::{ClientOption, OptionHeader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = OptionHeader::parse(data);
    if data.len() < 4 {
        return;
    }
    // Small codes are the interesting ones; keep a few unknown ones too.
    let code = u32::from_be_bytes([0, 0, 0, data[0] % 16]);
    let Ok(option) = ClientOption::parse(code, &data[4..]) else {
        return;
    };
    let (encoded_code, encoded) = option.encode();
    assert_eq!(encoded_code, code);
    assert_eq!(ClientOption::parse(encoded_code, &encoded), Ok(option));
});
