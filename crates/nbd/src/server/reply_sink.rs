//! The write side of a connection. Request tasks finish in any order; each takes the
//! lock, writes its whole reply (every chunk) and flushes, so replies never interleave
//! byte-wise even though they may be out of order.

use std::io;
use std::pin::Pin;

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::Mutex;

use super::command::Refusal;
use super::shaping::read_pieces;
use crate::wire::consts::*;
use crate::wire::reply::{encode_chunk_header, encode_offset_data_prefix};
use crate::wire::{BlockDescriptor, ChunkPayload, Command, SimpleReply, StructuredChunk};

/// Buffer for coalescing headers with small payloads into one write.
const WRITE_BUFFER_BYTES: usize = 64 * 1024;

pub type BoxedWriter = Pin<Box<dyn AsyncWrite + Send>>;

/// The outcome of one request, before encoding.
#[derive(Debug)]
pub enum Reply {
    /// Success without data.
    Done,
    Read {
        offset: u64,
        data: Bytes,
        dont_fragment: bool,
    },
    BlockStatus(Vec<BlockDescriptor>),
    Error(Refusal),
}

pub struct ReplySink {
    writer: Mutex<BufWriter<BoxedWriter>>,
    structured_replies: bool,
    /// Boundaries at which reads are split into data and hole chunks.
    read_granularity_bytes: u32,
}

impl ReplySink {
    pub fn new(
        writer: BoxedWriter,
        structured_replies: bool,
        read_granularity_bytes: u32,
    ) -> ReplySink {
        ReplySink {
            writer: Mutex::new(BufWriter::with_capacity(WRITE_BUFFER_BYTES, writer)),
            structured_replies,
            read_granularity_bytes,
        }
    }

    pub async fn send(&self, cookie: u64, command: Command, reply: Reply) -> io::Result<()> {
        let mut writer = self.writer.lock().await;
        match reply {
            Reply::Done => self.write_done(&mut writer, cookie, command).await?,
            Reply::Read { offset, data, dont_fragment } => {
                self.write_read(&mut writer, cookie, offset, data, dont_fragment).await?
            }
            Reply::BlockStatus(descriptors) => {
                let chunk = StructuredChunk {
                    flags: NBD_REPLY_FLAG_DONE,
                    cookie,
                    payload: ChunkPayload::BlockStatus {
                        context_id: BASE_ALLOCATION_CONTEXT_ID,
                        descriptors,
                    },
                };
                writer.write_all(&chunk.encode()).await?;
            }
            Reply::Error(refusal) => self.write_error(&mut writer, cookie, refusal).await?,
        }
        writer.flush().await
    }

    /// Shuts the write side down after the last reply (the client sees EOF).
    pub async fn close(&self) {
        let mut writer = self.writer.lock().await;
        // The peer may already be gone; there is nobody left to report a failure to.
        let _ = writer.shutdown().await;
    }

    async fn write_done(
        &self,
        writer: &mut BufWriter<BoxedWriter>,
        cookie: u64,
        command: Command,
    ) -> io::Result<()> {
        // A structured-reply client must never get a simple reply to a READ, even an
        // empty one.
        if self.structured_replies && command == Command::Read {
            let header = encode_chunk_header(NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_NONE, cookie, 0);
            return writer.write_all(&header).await;
        }
        writer.write_all(&SimpleReply { error: 0, cookie }.encode()).await
    }

    async fn write_error(
        &self,
        writer: &mut BufWriter<BoxedWriter>,
        cookie: u64,
        refusal: Refusal,
    ) -> io::Result<()> {
        if !self.structured_replies {
            let header = SimpleReply { error: refusal.errno, cookie };
            return writer.write_all(&header.encode()).await;
        }
        let chunk = StructuredChunk {
            flags: NBD_REPLY_FLAG_DONE,
            cookie,
            payload: ChunkPayload::Error { error: refusal.errno, message: refusal.message },
        };
        writer.write_all(&chunk.encode()).await
    }

    async fn write_read(
        &self,
        writer: &mut BufWriter<BoxedWriter>,
        cookie: u64,
        offset: u64,
        data: Bytes,
        dont_fragment: bool,
    ) -> io::Result<()> {
        if !self.structured_replies {
            writer.write_all(&SimpleReply { error: 0, cookie }.encode()).await?;
            return writer.write_all(&data).await;
        }
        let pieces = read_pieces(offset, &data, dont_fragment, self.read_granularity_bytes);
        let last = pieces.len().saturating_sub(1);
        for (index, piece) in pieces.iter().enumerate() {
            // The data is already in memory, so no error can follow: the last content
            // chunk may carry DONE.
            let flags = if index == last { NBD_REPLY_FLAG_DONE } else { 0 };
            let piece_offset = offset + piece.start as u64;
            let length_bytes = piece.length_bytes as u32;
            if piece.hole {
                let chunk = StructuredChunk {
                    flags,
                    cookie,
                    payload: ChunkPayload::OffsetHole {
                        offset: piece_offset,
                        hole_bytes: length_bytes,
                    },
                };
                writer.write_all(&chunk.encode()).await?;
            } else {
                let prefix = encode_offset_data_prefix(flags, cookie, piece_offset, length_bytes);
                writer.write_all(&prefix).await?;
                writer.write_all(&data[piece.start..piece.start + piece.length_bytes]).await?;
            }
        }
        Ok(())
    }
}
