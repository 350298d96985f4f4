//! The little-endian codec and checksum of the cache-device and hot-set formats:
//! `fardisk-common`'s, shared with the engine and the intent log. Encoders append fields to a
//! [`Writer`]; decoders read with a bounds-checked [`Reader`], so a short buffer is an error,
//! never a panic.

pub(crate) use fardisk_common::le::{
    checksum64_parts, get_u32, get_u64, CodecError, Reader, Writer,
};
