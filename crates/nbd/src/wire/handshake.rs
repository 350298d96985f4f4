//! Fixed-length handshake messages: the server greeting, the client flags, the option
//! header, the option reply header and the NBD_OPT_EXPORT_NAME reply.
//!
//! ```text
//! greeting (server, 18 bytes)      client flags (4 bytes)
//!   0  u64 NBDMAGIC                  0 u32 flags (bit0 FIXED_NEWSTYLE, bit1 NO_ZEROES)
//!   8  u64 IHAVEOPT
//!  16  u16 handshake flags
//!
//! option header (client, 16 bytes) option reply header (server, 20 bytes)
//!   0  u64 IHAVEOPT                  0 u64 0x3e889045565a9
//!   8  u32 option code               8 u32 option code being answered
//!  12  u32 data length              12 u32 reply type
//!                                   16 u32 data length
//! ```

use super::consts::*;
use super::cursor::Cursor;
use super::error::WireError;

/// Encodes the 18-byte greeting: we always offer FIXED_NEWSTYLE and NO_ZEROES.
pub fn encode_greeting() -> [u8; GREETING_BYTES] {
    let mut out = [0u8; GREETING_BYTES];
    out[0..8].copy_from_slice(&NBD_MAGIC.to_be_bytes());
    out[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    let flags = NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES;
    out[16..18].copy_from_slice(&flags.to_be_bytes());
    out
}

/// Parses a greeting (client side; used by tests and the fuzz targets).
pub fn parse_greeting(bytes: &[u8]) -> Result<u16, WireError> {
    let mut cursor = Cursor::new(bytes);
    expect_magic64(&mut cursor, NBD_MAGIC)?;
    expect_magic64(&mut cursor, IHAVEOPT)?;
    let flags = cursor.u16()?;
    cursor.finish("greeting")?;
    Ok(flags)
}

/// The client's answer to the greeting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientFlags {
    pub fixed_newstyle: bool,
    pub no_zeroes: bool,
}

impl ClientFlags {
    /// Unknown bits are a protocol violation: the server must drop the connection.
    pub fn parse(bytes: &[u8]) -> Result<ClientFlags, WireError> {
        let mut cursor = Cursor::new(bytes);
        let flags = cursor.u32()?;
        cursor.finish("client flags")?;
        if flags & !CLIENT_FLAGS_KNOWN != 0 {
            return Err(WireError::UnknownClientFlags { flags });
        }
        Ok(ClientFlags {
            fixed_newstyle: flags & NBD_FLAG_C_FIXED_NEWSTYLE != 0,
            no_zeroes: flags & NBD_FLAG_C_NO_ZEROES != 0,
        })
    }

    pub fn encode(&self) -> [u8; 4] {
        let mut flags = 0u32;
        if self.fixed_newstyle {
            flags |= NBD_FLAG_C_FIXED_NEWSTYLE;
        }
        if self.no_zeroes {
            flags |= NBD_FLAG_C_NO_ZEROES;
        }
        flags.to_be_bytes()
    }
}

/// Header of one client option; `length_bytes` of option data follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    pub option: u32,
    pub length_bytes: u32,
}

impl OptionHeader {
    pub fn parse(bytes: &[u8]) -> Result<OptionHeader, WireError> {
        let mut cursor = Cursor::new(bytes);
        expect_magic64(&mut cursor, IHAVEOPT)?;
        let option = cursor.u32()?;
        let length_bytes = cursor.u32()?;
        cursor.finish("option header")?;
        Ok(OptionHeader { option, length_bytes })
    }

    pub fn encode(&self) -> [u8; OPTION_HEADER_BYTES] {
        let mut out = [0u8; OPTION_HEADER_BYTES];
        out[0..8].copy_from_slice(&IHAVEOPT.to_be_bytes());
        out[8..12].copy_from_slice(&self.option.to_be_bytes());
        out[12..16].copy_from_slice(&self.length_bytes.to_be_bytes());
        out
    }
}

/// One option reply: header fields plus its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionReply {
    pub option: u32,
    pub reply_type: u32,
    pub data: Vec<u8>,
}

impl OptionReply {
    pub fn ack(option: u32) -> OptionReply {
        OptionReply { option, reply_type: NBD_REP_ACK, data: Vec::new() }
    }

    /// An error reply carrying a human-readable message (truncated to the string limit).
    pub fn error(option: u32, reply_type: u32, message: &str) -> OptionReply {
        let message = truncate_utf8(message, STRING_BYTES_MAX);
        OptionReply { option, reply_type, data: message.as_bytes().to_vec() }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(OPTION_REPLY_HEADER_BYTES + self.data.len());
        out.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
        out.extend_from_slice(&self.option.to_be_bytes());
        out.extend_from_slice(&self.reply_type.to_be_bytes());
        out.extend_from_slice(&(self.data.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.data);
        out
    }

    /// Parses the 20-byte header; returns (option, reply type, data length).
    pub fn parse_header(bytes: &[u8]) -> Result<(u32, u32, u32), WireError> {
        let mut cursor = Cursor::new(bytes);
        expect_magic64(&mut cursor, OPTION_REPLY_MAGIC)?;
        let option = cursor.u32()?;
        let reply_type = cursor.u32()?;
        let length_bytes = cursor.u32()?;
        cursor.finish("option reply header")?;
        Ok((option, reply_type, length_bytes))
    }

    /// Parses one whole reply (header and exactly its data).
    pub fn parse(bytes: &[u8]) -> Result<OptionReply, WireError> {
        let header = bytes.get(..OPTION_REPLY_HEADER_BYTES).ok_or(WireError::Truncated {
            needed_bytes: OPTION_REPLY_HEADER_BYTES,
            available_bytes: bytes.len(),
        })?;
        let (option, reply_type, length_bytes) = Self::parse_header(header)?;
        let mut cursor = Cursor::new(&bytes[OPTION_REPLY_HEADER_BYTES..]);
        let data = cursor.take(length_bytes as usize)?.to_vec();
        cursor.finish("option reply")?;
        Ok(OptionReply { option, reply_type, data })
    }
}

/// The reply that ends NBD_OPT_EXPORT_NAME: size, transmission flags, optional padding.
pub fn encode_export_name_reply(
    size_bytes: u64,
    transmission_flags: u16,
    no_zeroes: bool,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(10 + EXPORT_NAME_PADDING_BYTES);
    out.extend_from_slice(&size_bytes.to_be_bytes());
    out.extend_from_slice(&transmission_flags.to_be_bytes());
    if !no_zeroes {
        out.extend_from_slice(&[0u8; EXPORT_NAME_PADDING_BYTES]);
    }
    out
}

pub(crate) fn expect_magic64(cursor: &mut Cursor<'_>, expected: u64) -> Result<(), WireError> {
    let found = cursor.u64()?;
    if found != expected {
        return Err(WireError::BadMagic { expected, found });
    }
    Ok(())
}

/// Cuts `text` to at most `max_bytes` without splitting a UTF-8 character.
pub(crate) fn truncate_utf8(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
