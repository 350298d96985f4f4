//! The 28-byte transmission request header.
//!
//! ```text
//!   0 u32 0x25609513 (NBD_REQUEST_MAGIC)
//!   4 u16 command flags (bit0 FUA, bit1 NO_HOLE, bit2 DF, bit3 REQ_ONE, bit4 FAST_ZERO)
//!   6 u16 command type
//!   8 u64 cookie (opaque, echoed in the reply)
//!  16 u64 offset
//!  24 u32 length (for NBD_CMD_WRITE: payload bytes that follow the header)
//! ```

use super::consts::*;
use super::cursor::Cursor;
use super::error::WireError;

/// The command of a request; unknown types are kept so the server can answer EINVAL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Read,
    Write,
    Disconnect,
    Flush,
    Trim,
    Cache,
    WriteZeroes,
    BlockStatus,
    Unknown(u16),
}

impl Command {
    pub fn from_code(code: u16) -> Command {
        match code {
            NBD_CMD_READ => Command::Read,
            NBD_CMD_WRITE => Command::Write,
            NBD_CMD_DISC => Command::Disconnect,
            NBD_CMD_FLUSH => Command::Flush,
            NBD_CMD_TRIM => Command::Trim,
            NBD_CMD_CACHE => Command::Cache,
            NBD_CMD_WRITE_ZEROES => Command::WriteZeroes,
            NBD_CMD_BLOCK_STATUS => Command::BlockStatus,
            other => Command::Unknown(other),
        }
    }

    pub fn code(self) -> u16 {
        match self {
            Command::Read => NBD_CMD_READ,
            Command::Write => NBD_CMD_WRITE,
            Command::Disconnect => NBD_CMD_DISC,
            Command::Flush => NBD_CMD_FLUSH,
            Command::Trim => NBD_CMD_TRIM,
            Command::Cache => NBD_CMD_CACHE,
            Command::WriteZeroes => NBD_CMD_WRITE_ZEROES,
            Command::BlockStatus => NBD_CMD_BLOCK_STATUS,
            Command::Unknown(code) => code,
        }
    }

    /// Command flags the protocol documents as valid for this command.
    pub fn allowed_flags(self) -> u16 {
        // FUA is "valid for all commands" once negotiated; clients are known to set it
        // on reads and flushes too.
        let specific = match self {
            Command::Read => NBD_CMD_FLAG_DF,
            Command::WriteZeroes => NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO,
            Command::BlockStatus => NBD_CMD_FLAG_REQ_ONE,
            _ => 0,
        };
        NBD_CMD_FLAG_FUA | specific
    }
}

/// A decoded request header. Any 28 bytes with the right magic decode; semantic checks
/// (flags, ranges, limits) belong to the server, which must answer them with errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    pub flags: u16,
    pub command: Command,
    pub cookie: u64,
    pub offset: u64,
    pub length_bytes: u32,
}

impl RequestHeader {
    /// Wrong magic means the stream is out of sync: the server closes the connection.
    pub fn parse(bytes: &[u8]) -> Result<RequestHeader, WireError> {
        let mut cursor = Cursor::new(bytes);
        let magic = cursor.u32()?;
        if magic != REQUEST_MAGIC {
            return Err(WireError::BadMagic {
                expected: REQUEST_MAGIC as u64,
                found: magic as u64,
            });
        }
        let header = RequestHeader {
            flags: cursor.u16()?,
            command: Command::from_code(cursor.u16()?),
            cookie: cursor.u64()?,
            offset: cursor.u64()?,
            length_bytes: cursor.u32()?,
        };
        cursor.finish("request header")?;
        Ok(header)
    }

    pub fn encode(&self) -> [u8; REQUEST_HEADER_BYTES] {
        let mut out = [0u8; REQUEST_HEADER_BYTES];
        out[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        out[4..6].copy_from_slice(&self.flags.to_be_bytes());
        out[6..8].copy_from_slice(&self.command.code().to_be_bytes());
        out[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        out[16..24].copy_from_slice(&self.offset.to_be_bytes());
        out[24..28].copy_from_slice(&self.length_bytes.to_be_bytes());
        out
    }

    pub fn has_flag(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }

    /// Bytes of payload that follow this header on the wire.
    pub fn payload_bytes(&self) -> u32 {
        match self.command {
            Command::Write => self.length_bytes,
            _ => 0,
        }
    }
}
