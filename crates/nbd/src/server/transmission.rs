//! The transmission phase of one connection: read requests in order, run up to
//! `max_inflight_per_connection` of them concurrently (replies may go out of order),
//! and hold at most `max_inflight_bytes_per_connection` of payload in memory.
//!
//! A request is polled once by the reader itself: when the device answers at once (a write
//! into the dirty set, a read from the ARC) the reply is written from here, without a task
//! per request and a wake-up of another worker (docs/design/0004); only a request that must
//! wait (a read from the store) continues as a task of its own. A request that asks for
//! durability (a FLUSH, or FUA) is polled here only when it is the connection's only request
//! in flight (a client at queue depth 1, which sends nothing before the reply): its log commit
//! may write and flush the log device on the thread that runs it (fardisk-slog's `lead`), and
//! with other requests in flight the reader must go on reading the ones behind it, so that
//! they share the next commit instead of each waiting for its own.
//!
//! The loop ends on NBD_CMD_DISC, end of stream, a protocol violation (bad magic,
//! oversized write), or server shutdown; in every case it waits for the requests
//! already running to reply before closing, as the spec asks for DISC and shutdown.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Waker};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, BufReader};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use super::command::{check_fast_zero, validate, Action, ExportLimits, Refusal};
use super::execute::{execute, ExecuteLimits};
use super::negotiate::Session;
use super::reply_sink::{reader_flushes, Reply, ReplySink};
use super::shutdown::wait_for_shutdown;
use crate::config::ServerConfig;
use crate::wire::consts::{NBD_EINVAL, REQUEST_HEADER_BYTES};
use crate::wire::{Command, RequestHeader};

/// Bytes buffered from the socket; request headers are small and many.
const READ_BUFFER_BYTES: usize = 256 * 1024;

/// Why the request loop stopped (for the log).
#[derive(Debug, PartialEq, Eq)]
pub enum StopReason {
    Disconnect,
    EndOfStream,
    BadMagic,
    OversizedWrite,
    Shutdown,
}

struct Limits {
    requests: Arc<Semaphore>,
    requests_max: u32,
    bytes: Arc<Semaphore>,
}

struct Permits {
    _request: OwnedSemaphorePermit,
    _bytes: Option<OwnedSemaphorePermit>,
}

pub struct Transmission {
    session: Session,
    limits: ExportLimits,
    config: ServerConfig,
    sink: Arc<ReplySink>,
    inflight: Limits,
}

impl Transmission {
    pub fn new(session: Session, config: &ServerConfig, sink: Arc<ReplySink>) -> Transmission {
        let limits = ExportLimits {
            size_bytes: session.device.size_bytes(),
            min_block_bytes: session.block_sizes.minimum_bytes,
            max_request_bytes: config.max_request_bytes,
            read_only: session.device.read_only(),
            structured_replies: session.structured_replies,
            base_allocation: session.base_allocation,
            fast_zero: session.device.fast_zero(),
            fua_always: config.writes_durable_before_reply,
        };
        let requests_max = config.max_inflight_per_connection as u32;
        let inflight = Limits {
            requests: Arc::new(Semaphore::new(requests_max as usize)),
            requests_max,
            bytes: Arc::new(Semaphore::new(config.max_inflight_bytes_per_connection as usize)),
        };
        Transmission { session, limits, config: config.clone(), sink, inflight }
    }

    /// Serves requests until the connection should close, then waits for every
    /// running request to reply and shuts the write side.
    pub async fn run<R: AsyncRead + Unpin>(
        self,
        reader: R,
        mut shutdown: watch::Receiver<bool>,
    ) -> StopReason {
        let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, reader);
        let reason = tokio::select! {
            reason = self.request_loop(&mut reader) => reason,
            () = wait_for_shutdown(&mut shutdown) => StopReason::Shutdown,
        };
        self.wait_for_inflight(&reason).await;
        self.sink.close().await;
        reason
    }

    /// Every running request holds a request permit until its reply is written:
    /// owning all permits means every reply is out. On shutdown the wait is bounded
    /// by `shutdown_grace_ms`; requests still running after that finish unobserved.
    async fn wait_for_inflight(&self, reason: &StopReason) {
        let all = self.inflight.requests.acquire_many(self.inflight.requests_max);
        if *reason != StopReason::Shutdown {
            // The semaphore is never closed, so this is always Ok.
            let _ = all.await;
            return;
        }
        let grace = std::time::Duration::from_millis(self.config.shutdown_grace_ms);
        // Real clients, real time: the grace period is not on the engine's clock.
        #[allow(clippy::disallowed_methods)]
        let all = tokio::time::timeout(grace, all);
        if all.await.is_err() {
            tracing::warn!("nbd: requests still running after the shutdown grace period; closing");
        }
    }

    async fn request_loop<R: AsyncRead + Unpin>(&self, reader: &mut BufReader<R>) -> StopReason {
        // Each iteration consumes at least one 28-byte header, so the loop is bounded
        // by the bytes the client sends; it ends when the stream does.
        loop {
            if reader.buffer().len() < REQUEST_HEADER_BYTES {
                self.flush_deferred().await;
            }
            let mut header_bytes = [0u8; REQUEST_HEADER_BYTES];
            if reader.read_exact(&mut header_bytes).await.is_err() {
                return StopReason::EndOfStream;
            }
            let Ok(header) = RequestHeader::parse(&header_bytes) else {
                tracing::warn!("nbd: bad request magic, closing connection");
                return StopReason::BadMagic;
            };
            if let Err(reason) = self.dispatch(reader, header).await {
                return reason;
            }
        }
    }

    async fn dispatch<R: AsyncRead + Unpin>(
        &self,
        reader: &mut BufReader<R>,
        header: RequestHeader,
    ) -> Result<(), StopReason> {
        if header.command == Command::Disconnect {
            return Err(StopReason::Disconnect);
        }
        let payload_bytes = header.payload_bytes();
        if payload_bytes > self.config.max_request_bytes {
            // We will not buffer it and cannot skip it cheaply: refuse, then hang up
            // (the spec allows closing on an oversized write).
            let refusal = Refusal {
                errno: NBD_EINVAL,
                message: format!("write of {payload_bytes} bytes exceeds the maximum payload"),
            };
            let _ = self.sink.send(header.cookie, header.command, Reply::Error(refusal)).await;
            return Err(StopReason::OversizedWrite);
        }
        let permits = self.acquire(&header).await;
        if reader.buffer().len() < payload_bytes as usize {
            self.flush_deferred().await;
        }
        let payload =
            read_payload(reader, payload_bytes).await.map_err(|_| StopReason::EndOfStream)?;
        // Whether zeroing is cheap can change with the device's state (e.g. a full
        // log), so it is asked per request rather than once per connection.
        let limits = ExportLimits { fast_zero: self.session.device.fast_zero(), ..self.limits };
        let action = validate(&header, &limits).and_then(|action| {
            check_fast_zero(&header, &limits)?;
            Ok(action)
        });
        let device = self.session.device.clone();
        let sink = self.sink.clone();
        let execute_limits = ExecuteLimits {
            descriptors_max: self.config.max_block_status_extents,
            cache_chunk_bytes: self.config.max_request_bytes,
        };
        let durable = matches!(
            action,
            Ok(Action::Flush
                | Action::Write { fua: true, .. }
                | Action::Trim { fua: true, .. }
                | Action::WriteZeroes { fua: true, .. })
        );
        let work = async move {
            let reply = match action {
                Ok(action) => execute(device.as_ref(), action, payload, execute_limits).await,
                Err(refusal) => Reply::Error(refusal),
            };
            if let Err(error) = sink.send(header.cookie, header.command, reply).await {
                tracing::debug!("nbd: reply to cookie {} not sent: {error}", header.cookie);
            }
            drop(permits);
        };
        // Only this request's permit is taken: nothing else of this connection is running.
        let alone =
            self.inflight.requests.available_permits() + 1 >= self.inflight.requests_max as usize;
        if durable && !alone {
            tokio::spawn(work);
        } else {
            finish_here_or_spawn(work);
        }
        Ok(())
    }

    /// Flushes the replies of requests finished inline; the client may be waiting for them
    /// before it sends more. A failure means the client is gone: the next read says so.
    async fn flush_deferred(&self) {
        if let Err(error) = self.sink.flush_deferred().await {
            tracing::debug!("nbd: replies not flushed: {error}");
        }
    }

    /// Waits for a request slot and for room for the request's payload (write data
    /// in, read data out, the piece a CACHE request may make the device buffer), so memory
    /// per connection stays bounded.
    async fn acquire(&self, header: &RequestHeader) -> Permits {
        let buffered_bytes = match header.command {
            Command::Write => header.length_bytes,
            Command::Read | Command::Cache => {
                header.length_bytes.min(self.config.max_request_bytes)
            }
            _ => 0,
        };
        // The semaphores are never closed, so acquisition cannot fail. Before waiting for a
        // slot, the replies finished inline go out: their requests' client may wait for them.
        let requests = &self.inflight.requests;
        let request = match requests.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                self.flush_deferred().await;
                requests.clone().acquire_owned().await.expect("request semaphore is never closed")
            }
        };
        let bytes = if buffered_bytes == 0 {
            None
        } else {
            let bytes = &self.inflight.bytes;
            let permit = match bytes.clone().try_acquire_many_owned(buffered_bytes) {
                Ok(permit) => permit,
                Err(_) => {
                    self.flush_deferred().await;
                    bytes
                        .clone()
                        .acquire_many_owned(buffered_bytes)
                        .await
                        .expect("byte semaphore is never closed")
                }
            };
            Some(permit)
        };
        Permits { _request: request, _bytes: bytes }
    }
}

async fn read_payload<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    length_bytes: u32,
) -> std::io::Result<Bytes> {
    if length_bytes == 0 {
        return Ok(Bytes::new());
    }
    let mut buffer = BytesMut::zeroed(length_bytes as usize);
    reader.read_exact(&mut buffer).await?;
    Ok(buffer.freeze())
}

/// Polls `work` once in the reader's task, with a waker that does nothing; if it is not
/// finished, continues it as a task of its own, whose first poll registers the task's waker
/// (every tokio and std future registers the waker of each poll). A reply it finishes here is
/// flushed by the reader ([`reader_flushes`]).
fn finish_here_or_spawn(work: impl Future<Output = ()> + Send + 'static) {
    let mut work = Box::pin(work);
    let mut cx = Context::from_waker(Waker::noop());
    if reader_flushes(|| work.as_mut().poll(&mut cx)).is_pending() {
        tokio::spawn(work);
    }
}
