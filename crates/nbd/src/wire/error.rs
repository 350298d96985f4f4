//! Errors of the pure wire codec. Every parser returns one of these instead of
//! panicking, whatever the input bytes.

/// Why a byte sequence is not a valid NBD message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("bad magic: expected {expected:#x}, found {found:#x}")]
    BadMagic { expected: u64, found: u64 },
    #[error("message truncated: needed {needed_bytes} bytes, had {available_bytes}")]
    Truncated { needed_bytes: usize, available_bytes: usize },
    #[error("{what} has {extra_bytes} unexpected trailing bytes")]
    TrailingBytes { what: &'static str, extra_bytes: usize },
    #[error("string of {length_bytes} bytes exceeds the {max_bytes}-byte limit")]
    StringTooLong { length_bytes: usize, max_bytes: usize },
    #[error("string is not valid UTF-8 or contains NUL")]
    BadString,
    #[error("unknown client flags {flags:#x}")]
    UnknownClientFlags { flags: u32 },
    #[error("{what} count {count} exceeds the limit of {max}")]
    TooMany { what: &'static str, count: usize, max: usize },
    #[error("invalid field: {0}")]
    Invalid(&'static str),
}
