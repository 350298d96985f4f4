//! A whole option-haggling session from fuzz bytes: each option is
//! [code: u8][length: u8][data]. Negotiation never panics, always answers an option
//! (except NBD_OPT_EXPORT_NAME, which has no error reply), and every answer is a
//! well-formed sequence of option replies for that option.
#![no_main]

use std::sync::Arc;

use fardisk_nbd::server::negotiate::{Negotiation, Next};
use fardisk_nbd::wire::consts::{NBD_OPT_EXPORT_NAME, OPTION_REPLY_HEADER_BYTES};
use fardisk_nbd::wire::OptionReply;
use fardisk_nbd::{ExportMap, MemDevice};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let device = Arc::new(MemDevice::new(1 << 20));
    let provider = Arc::new(ExportMap::new().with_export("vol", "a volume", device));
    let mut negotiation = Negotiation::new(provider, 1 << 25, true);
    let mut rest = data;
    while rest.len() >= 2 {
        let code = (rest[0] % 14) as u32;
        let length = (rest[1] as usize).min(rest.len() - 2);
        let option_data = &rest[2..2 + length];
        rest = &rest[2 + length..];
        let outcome = negotiation.handle(code, option_data);
        if code != NBD_OPT_EXPORT_NAME {
            let mut replies = &outcome.reply_bytes[..];
            assert!(!replies.is_empty());
            while !replies.is_empty() {
                let (option, _, length_bytes) =
                    OptionReply::parse_header(&replies[..OPTION_REPLY_HEADER_BYTES])
                        .expect("reply header");
                assert_eq!(option, code);
                replies = &replies[OPTION_REPLY_HEADER_BYTES + length_bytes as usize..];
            }
        }
        if !matches!(outcome.next, Next::Continue) {
            break;
        }
    }
});
