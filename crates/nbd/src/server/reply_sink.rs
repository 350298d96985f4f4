//! The write side of a connection. Request tasks finish in any order; each takes the
//! lock and writes its whole reply (every chunk), so replies never interleave byte-wise even
//! though they may be out of order.
//!
//! A reply is flushed to the socket unless another reply is already waiting for the lock: the
//! waiter writes its reply behind it and flushes both (or leaves them to the next waiter). At
//! queue depth 64 this turns one `write` system call per reply into one per burst (issue #19's
//! NBD profile); at queue depth 1 nobody waits and every reply is flushed at once, as before.
//! The last sender of a burst always finds no waiter and flushes, so no reply is left in the
//! buffer; `close` flushes anything a cancelled sender left behind.
//!
//! A reply finished while the connection's reader polls its request inline (inside
//! [`reader_flushes`], see `transmission`) is not flushed by its sender: the reader flushes
//! ([`ReplySink::flush_deferred`]) before it next waits for the client, so a burst of requests
//! answered inline also leaves in one write, and no reply waits behind a blocked read.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

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

tokio::task_local! {
    /// Set while the reader polls a request inline: its reply's flush is the reader's job.
    static READER_FLUSHES: ();
}

/// Runs `poll` (the reader's inline poll of one request) so that a reply it finishes is left
/// for [`ReplySink::flush_deferred`].
pub fn reader_flushes<R>(poll: impl FnOnce() -> R) -> R {
    READER_FLUSHES.sync_scope((), poll)
}

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
    /// Senders waiting for `writer` (incremented before the lock, decremented once held or
    /// given up).
    waiting: AtomicUsize,
    /// A reply finished inline is in the buffer, not yet flushed (changed under `writer`).
    unflushed: AtomicBool,
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
            waiting: AtomicUsize::new(0),
            unflushed: AtomicBool::new(false),
            structured_replies,
            read_granularity_bytes,
        }
    }

    pub async fn send(&self, cookie: u64, command: Command, reply: Reply) -> io::Result<()> {
        let mut writer = {
            let _waiting = Waiting::new(&self.waiting);
            self.writer.lock().await
        };
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
        if self.waiting.load(Ordering::Acquire) == 0 {
            if READER_FLUSHES.try_with(|_| ()).is_ok() {
                self.unflushed.store(true, Ordering::Release);
            } else {
                writer.flush().await?;
                self.unflushed.store(false, Ordering::Release);
            }
        }
        Ok(())
    }

    /// Flushes replies that were finished inline and left for the reader. The reader calls
    /// this before anything that may wait for the client (a read of the socket, a request
    /// slot), since the client may be waiting for those replies.
    pub async fn flush_deferred(&self) -> io::Result<()> {
        if !self.unflushed.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut writer = self.writer.lock().await;
        if self.unflushed.swap(false, Ordering::AcqRel) {
            writer.flush().await?;
        }
        Ok(())
    }

    /// Shuts the write side down after the last reply (the client sees EOF); a reply still in
    /// the buffer is written first.
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

/// Counts a sender as waiting for the writer until it holds it or gives up (dropped).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    /// Counts the writes that reach the socket.
    struct CountingWriter {
        writes: Arc<AtomicUsize>,
        bytes: Arc<AtomicUsize>,
    }

    impl AsyncWrite for CountingWriter {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            self.bytes.fetch_add(buf.len(), Ordering::SeqCst);
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn sink() -> (Arc<ReplySink>, Arc<AtomicUsize>, Arc<AtomicUsize>) {
        let (writes, bytes) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let writer = CountingWriter { writes: writes.clone(), bytes: bytes.clone() };
        (Arc::new(ReplySink::new(Box::pin(writer), false, 4096)), writes, bytes)
    }

    #[tokio::test]
    async fn replies_waiting_behind_each_other_share_one_write() {
        let (sink, writes, bytes) = sink();
        let held = sink.writer.lock().await;
        let tasks: Vec<_> = (0..3u64)
            .map(|cookie| {
                let sink = sink.clone();
                tokio::spawn(async move { sink.send(cookie, Command::Write, Reply::Done).await })
            })
            .collect();
        for _ in 0..1000 {
            if sink.waiting.load(Ordering::SeqCst) == 3 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(sink.waiting.load(Ordering::SeqCst), 3, "all three wait for the writer");
        drop(held);
        for task in tasks {
            task.await.expect("task").expect("send");
        }
        assert_eq!(bytes.load(Ordering::SeqCst), 3 * 16, "three simple replies, all out");
        assert_eq!(writes.load(Ordering::SeqCst), 1, "one write for the three replies");
    }

    /// Polls `send` once inside [`reader_flushes`], as the reader does; it must finish.
    fn send_inline(sink: &ReplySink, cookie: u64) {
        let mut send = Box::pin(sink.send(cookie, Command::Write, Reply::Done));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let polled = reader_flushes(|| send.as_mut().poll(&mut cx));
        assert!(matches!(polled, Poll::Ready(Ok(()))), "an uncontended send finishes at once");
    }

    #[tokio::test]
    async fn replies_finished_inline_wait_for_the_readers_flush_and_share_one_write() {
        let (sink, writes, bytes) = sink();
        send_inline(&sink, 1);
        send_inline(&sink, 2);
        assert_eq!(writes.load(Ordering::SeqCst), 0, "left in the buffer for the reader");
        sink.flush_deferred().await.expect("flush");
        assert_eq!((writes.load(Ordering::SeqCst), bytes.load(Ordering::SeqCst)), (1, 32));
        sink.flush_deferred().await.expect("nothing left to flush");
        assert_eq!(writes.load(Ordering::SeqCst), 1);
        // A task's reply (outside the reader's poll) flushes what the reader left, too.
        send_inline(&sink, 3);
        sink.send(4, Command::Flush, Reply::Done).await.expect("send");
        assert_eq!((writes.load(Ordering::SeqCst), bytes.load(Ordering::SeqCst)), (2, 64));
        assert!(!sink.unflushed.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_reply_nobody_waits_behind_is_flushed_at_once() {
        let (sink, writes, bytes) = sink();
        sink.send(7, Command::Flush, Reply::Done).await.expect("send");
        assert_eq!((writes.load(Ordering::SeqCst), bytes.load(Ordering::SeqCst)), (1, 16));
    }
}
