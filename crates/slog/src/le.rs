//! The little-endian codec of the log's on-disk structures: `fardisk-common`'s, shared with the
//! engine and the caches. Encoders append fields in layout order to a [`Writer`] and copy the
//! result into their (O_DIRECT-aligned) buffer; decoders read at the offsets of the layout tables
//! with bounds-checked getters, so a short buffer is an error, never a panic.

pub(crate) use fardisk_common::le::{
    get_u128, get_u16, get_u32, get_u64, get_u8, put_u64, CodecError, Writer,
};
