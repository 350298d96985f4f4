//! The client-side parsers of server messages (used by tests and tools): never panic,
//! and whatever parses re-encodes to something that parses identically.
#![no_main]

use fardisk_nbd::wire::option::{parse_rep_meta_context, parse_rep_server};
use fardisk_nbd::wire::{parse_greeting, InfoReply, OptionReply, SimpleReply, StructuredChunk};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = parse_greeting(data);
    let _ = parse_rep_server(data);
    let _ = parse_rep_meta_context(data);
    if let Ok(chunk) = StructuredChunk::parse(data) {
        assert_eq!(StructuredChunk::parse(&chunk.encode()), Ok(chunk));
    }
    if let Ok(reply) = SimpleReply::parse(data) {
        assert_eq!(&reply.encode()[..], data);
    }
    if let Ok(reply) = OptionReply::parse(data) {
        assert_eq!(reply.encode(), data);
    }
    if let Ok(info) = InfoReply::parse(data) {
        assert_eq!(InfoReply::parse(&info.encode()), Ok(info));
    }
});
