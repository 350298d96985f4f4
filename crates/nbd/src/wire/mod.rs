//! The NBD wire codec: pure functions from bytes to typed values and back. Nothing in
//! this module performs I/O, allocates more than the bytes it was given justify, or
//! panics on any input; the fuzz targets in `crates/nbd/fuzz` and the proptest suite in
//! `tests/codec_proptest.rs` hold it to that.
//!
//! The byte layouts are documented beside each type and in `docs/format/nbd.md`.

pub mod consts;
mod cursor;
pub mod error;
pub mod handshake;
pub mod option;
pub mod reply;
pub mod request;

pub use error::WireError;
pub use handshake::{
    encode_export_name_reply, encode_greeting, parse_greeting, ClientFlags, OptionHeader,
    OptionReply,
};
pub use option::{ClientOption, InfoReply, InfoRequest, MetaContextRequest};
pub use reply::{BlockDescriptor, ChunkPayload, SimpleReply, StructuredChunk};
pub use request::{Command, RequestHeader};
