//! Transmission replies: the 16-byte simple reply and structured reply chunks.
//!
//! ```text
//! simple reply (16 bytes + read data)     structured chunk header (20 bytes + payload)
//!   0 u32 0x67446698                        0 u32 0x668e33ef
//!   4 u32 error (0 = success)               4 u16 flags (bit0 DONE)
//!   8 u64 cookie                            6 u16 chunk type
//!                                           8 u64 cookie
//!                                          16 u32 payload length
//! chunk payloads
//!   OFFSET_DATA  (1):      u64 offset, data
//!   OFFSET_HOLE  (2):      u64 offset, u32 hole length
//!   BLOCK_STATUS (5):      u32 context id, n x (u32 extent length, u32 status flags)
//!   ERROR        (0x8001): u32 error, u16 message length M, M bytes message
//!   ERROR_OFFSET (0x8002): u32 error, u16 M, M bytes message, u64 offset
//! ```

use super::consts::*;
use super::cursor::Cursor;
use super::error::WireError;
use super::handshake::truncate_utf8;

/// Header of a simple reply; for a successful read the data follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimpleReply {
    pub error: u32,
    pub cookie: u64,
}

impl SimpleReply {
    pub fn encode(&self) -> [u8; SIMPLE_REPLY_HEADER_BYTES] {
        let mut out = [0u8; SIMPLE_REPLY_HEADER_BYTES];
        out[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
        out[4..8].copy_from_slice(&self.error.to_be_bytes());
        out[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        out
    }

    pub fn parse(bytes: &[u8]) -> Result<SimpleReply, WireError> {
        let mut cursor = Cursor::new(bytes);
        let magic = cursor.u32()?;
        if magic != SIMPLE_REPLY_MAGIC {
            return Err(WireError::BadMagic {
                expected: SIMPLE_REPLY_MAGIC as u64,
                found: magic as u64,
            });
        }
        let reply = SimpleReply { error: cursor.u32()?, cookie: cursor.u64()? };
        cursor.finish("simple reply")?;
        Ok(reply)
    }
}

/// One base:allocation descriptor in a BLOCK_STATUS chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockDescriptor {
    pub length_bytes: u32,
    pub status_flags: u32,
}

/// The typed payload of a structured reply chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkPayload {
    None,
    OffsetData { offset: u64, data: Vec<u8> },
    OffsetHole { offset: u64, hole_bytes: u32 },
    BlockStatus { context_id: u32, descriptors: Vec<BlockDescriptor> },
    Error { error: u32, message: String },
    ErrorOffset { error: u32, message: String, offset: u64 },
    Unknown { chunk_type: u16, data: Vec<u8> },
}

impl ChunkPayload {
    pub fn chunk_type(&self) -> u16 {
        match self {
            ChunkPayload::None => NBD_REPLY_TYPE_NONE,
            ChunkPayload::OffsetData { .. } => NBD_REPLY_TYPE_OFFSET_DATA,
            ChunkPayload::OffsetHole { .. } => NBD_REPLY_TYPE_OFFSET_HOLE,
            ChunkPayload::BlockStatus { .. } => NBD_REPLY_TYPE_BLOCK_STATUS,
            ChunkPayload::Error { .. } => NBD_REPLY_TYPE_ERROR,
            ChunkPayload::ErrorOffset { .. } => NBD_REPLY_TYPE_ERROR_OFFSET,
            ChunkPayload::Unknown { chunk_type, .. } => *chunk_type,
        }
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            ChunkPayload::None => {}
            ChunkPayload::OffsetData { offset, data } => {
                out.extend_from_slice(&offset.to_be_bytes());
                out.extend_from_slice(data);
            }
            ChunkPayload::OffsetHole { offset, hole_bytes } => {
                out.extend_from_slice(&offset.to_be_bytes());
                out.extend_from_slice(&hole_bytes.to_be_bytes());
            }
            ChunkPayload::BlockStatus { context_id, descriptors } => {
                out.extend_from_slice(&context_id.to_be_bytes());
                for descriptor in descriptors {
                    out.extend_from_slice(&descriptor.length_bytes.to_be_bytes());
                    out.extend_from_slice(&descriptor.status_flags.to_be_bytes());
                }
            }
            ChunkPayload::Error { error, message } => put_error(out, *error, message),
            ChunkPayload::ErrorOffset { error, message, offset } => {
                put_error(out, *error, message);
                out.extend_from_slice(&offset.to_be_bytes());
            }
            ChunkPayload::Unknown { data, .. } => out.extend_from_slice(data),
        }
    }

    /// Decodes a payload of `chunk_type`, checking every length rule of the spec.
    pub fn parse(chunk_type: u16, data: &[u8]) -> Result<ChunkPayload, WireError> {
        let mut cursor = Cursor::new(data);
        let payload = match chunk_type {
            NBD_REPLY_TYPE_NONE => ChunkPayload::None,
            NBD_REPLY_TYPE_OFFSET_DATA => parse_offset_data(&mut cursor)?,
            NBD_REPLY_TYPE_OFFSET_HOLE => ChunkPayload::OffsetHole {
                offset: cursor.u64()?,
                hole_bytes: nonzero(cursor.u32()?, "hole length")?,
            },
            NBD_REPLY_TYPE_BLOCK_STATUS => parse_block_status(&mut cursor)?,
            NBD_REPLY_TYPE_ERROR => {
                let (error, message) = parse_error(&mut cursor)?;
                ChunkPayload::Error { error, message }
            }
            NBD_REPLY_TYPE_ERROR_OFFSET => {
                let (error, message) = parse_error(&mut cursor)?;
                let offset = cursor.u64()?;
                ChunkPayload::ErrorOffset { error, message, offset }
            }
            other => ChunkPayload::Unknown {
                chunk_type: other,
                data: cursor.take(cursor.remaining_bytes())?.to_vec(),
            },
        };
        cursor.finish("structured reply payload")?;
        Ok(payload)
    }
}

fn nonzero(value: u32, what: &'static str) -> Result<u32, WireError> {
    if value == 0 {
        return Err(WireError::Invalid(what));
    }
    Ok(value)
}

fn parse_offset_data(cursor: &mut Cursor<'_>) -> Result<ChunkPayload, WireError> {
    let offset = cursor.u64()?;
    if cursor.remaining_bytes() == 0 {
        return Err(WireError::Invalid("OFFSET_DATA chunk without data"));
    }
    let data = cursor.take(cursor.remaining_bytes())?.to_vec();
    Ok(ChunkPayload::OffsetData { offset, data })
}

fn parse_block_status(cursor: &mut Cursor<'_>) -> Result<ChunkPayload, WireError> {
    let context_id = cursor.u32()?;
    let remaining_bytes = cursor.remaining_bytes();
    if remaining_bytes == 0 || !remaining_bytes.is_multiple_of(8) {
        return Err(WireError::Invalid("BLOCK_STATUS length is not 4 + 8n, n > 0"));
    }
    let mut descriptors = Vec::with_capacity(remaining_bytes / 8);
    while cursor.remaining_bytes() > 0 {
        descriptors.push(BlockDescriptor {
            length_bytes: nonzero(cursor.u32()?, "extent length")?,
            status_flags: cursor.u32()?,
        });
    }
    Ok(ChunkPayload::BlockStatus { context_id, descriptors })
}

fn put_error(out: &mut Vec<u8>, error: u32, message: &str) {
    let message = truncate_utf8(message, STRING_BYTES_MAX);
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&(message.len() as u16).to_be_bytes());
    out.extend_from_slice(message.as_bytes());
}

fn parse_error(cursor: &mut Cursor<'_>) -> Result<(u32, String), WireError> {
    let error = nonzero(cursor.u32()?, "error value")?;
    let message_bytes = cursor.u16()? as usize;
    let message = cursor.string(message_bytes)?;
    Ok((error, message))
}

/// One structured reply chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StructuredChunk {
    pub flags: u16,
    pub cookie: u64,
    pub payload: ChunkPayload,
}

impl StructuredChunk {
    pub fn is_done(&self) -> bool {
        self.flags & NBD_REPLY_FLAG_DONE != 0
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut payload = Vec::new();
        self.payload.encode_into(&mut payload);
        let mut out = encode_chunk_header(
            self.flags,
            self.payload.chunk_type(),
            self.cookie,
            payload.len() as u32,
        )
        .to_vec();
        out.extend_from_slice(&payload);
        out
    }

    /// Parses a 20-byte chunk header into (flags, type, cookie, payload length).
    pub fn parse_header(bytes: &[u8]) -> Result<(u16, u16, u64, u32), WireError> {
        let mut cursor = Cursor::new(bytes);
        let magic = cursor.u32()?;
        if magic != STRUCTURED_REPLY_MAGIC {
            return Err(WireError::BadMagic {
                expected: STRUCTURED_REPLY_MAGIC as u64,
                found: magic as u64,
            });
        }
        let header = (cursor.u16()?, cursor.u16()?, cursor.u64()?, cursor.u32()?);
        cursor.finish("structured reply header")?;
        Ok(header)
    }

    /// Parses one whole chunk (header and exactly its payload).
    pub fn parse(bytes: &[u8]) -> Result<StructuredChunk, WireError> {
        let mut cursor = Cursor::new(bytes);
        let header = cursor.take(STRUCTURED_REPLY_HEADER_BYTES)?;
        let (flags, chunk_type, cookie, length_bytes) = Self::parse_header(header)?;
        let payload = ChunkPayload::parse(chunk_type, cursor.take(length_bytes as usize)?)?;
        cursor.finish("structured reply chunk")?;
        Ok(StructuredChunk { flags, cookie, payload })
    }
}

/// Encodes a chunk header; the server uses it directly to send read data without
/// copying the data into the header buffer.
pub fn encode_chunk_header(
    flags: u16,
    chunk_type: u16,
    cookie: u64,
    payload_bytes: u32,
) -> [u8; STRUCTURED_REPLY_HEADER_BYTES] {
    let mut out = [0u8; STRUCTURED_REPLY_HEADER_BYTES];
    out[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    out[4..6].copy_from_slice(&flags.to_be_bytes());
    out[6..8].copy_from_slice(&chunk_type.to_be_bytes());
    out[8..16].copy_from_slice(&cookie.to_be_bytes());
    out[16..20].copy_from_slice(&payload_bytes.to_be_bytes());
    out
}

/// Header plus 8-byte offset of an OFFSET_DATA chunk whose `data_bytes` follow.
pub fn encode_offset_data_prefix(flags: u16, cookie: u64, offset: u64, data_bytes: u32) -> Vec<u8> {
    let mut out = encode_chunk_header(
        flags,
        NBD_REPLY_TYPE_OFFSET_DATA,
        cookie,
        data_bytes.saturating_add(8),
    )
    .to_vec();
    out.extend_from_slice(&offset.to_be_bytes());
    out
}
