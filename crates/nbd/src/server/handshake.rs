//! Drives the fixed-newstyle handshake over a stream: greeting, client flags, then
//! options until the client enters transmission, aborts, or misbehaves. Decisions are
//! made by [`Negotiation`]; this file only moves bytes and enforces the limits on
//! option count, option size and handshake time.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use super::negotiate::{Negotiation, Next, Outcome, Session};
use super::shutdown::{shutdown_requested, wait_for_shutdown};
use crate::config::ServerConfig;
use crate::export::ExportProvider;
use crate::wire::consts::OPTION_HEADER_BYTES;
use crate::wire::{encode_greeting, ClientFlags, OptionHeader};

/// Oversized option data is read and dropped in pieces of this size.
const DRAIN_CHUNK_BYTES: usize = 64 * 1024;

/// Runs the handshake. `Ok(None)` means the connection should simply close (abort,
/// protocol violation, unknown export with NBD_OPT_EXPORT_NAME, timeout, shutdown).
pub async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    provider: Arc<dyn ExportProvider>,
    config: &ServerConfig,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<Option<Session>> {
    let timeout = Duration::from_millis(config.handshake_timeout_ms);
    let shutdown_copy = shutdown.clone();
    let negotiation = negotiate(stream, provider, config, shutdown_copy);
    // A real client on a real socket: the handshake deadline is real time, not the engine's clock.
    #[allow(clippy::disallowed_methods)]
    let negotiation = tokio::time::timeout(timeout, negotiation);
    tokio::select! {
        result = negotiation => match result {
            Ok(result) => result,
            Err(_elapsed) => {
                tracing::info!("nbd: handshake timed out");
                Ok(None)
            }
        },
        // Shutdown while the client is thinking: close without waiting for it.
        () = wait_for_shutdown(&mut shutdown) => Ok(None),
    }
}

async fn negotiate<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    provider: Arc<dyn ExportProvider>,
    config: &ServerConfig,
    shutdown: watch::Receiver<bool>,
) -> io::Result<Option<Session>> {
    stream.write_all(&encode_greeting()).await?;
    stream.flush().await?;
    let mut flag_bytes = [0u8; 4];
    stream.read_exact(&mut flag_bytes).await?;
    let Ok(client_flags) = ClientFlags::parse(&flag_bytes) else {
        tracing::info!("nbd: client sent unknown handshake flags, closing");
        return Ok(None);
    };
    let mut negotiation =
        Negotiation::new(provider, config.max_request_bytes, client_flags.no_zeroes);
    for _ in 0..config.max_options_per_handshake {
        let outcome = next_option(stream, &mut negotiation, config, &shutdown).await?;
        let Some(outcome) = outcome else {
            return Ok(None);
        };
        stream.write_all(&outcome.reply_bytes).await?;
        stream.flush().await?;
        match outcome.next {
            Next::Continue => {}
            Next::Close => return Ok(None),
            Next::Transmit(session) => return Ok(Some(*session)),
        }
    }
    tracing::info!("nbd: client exceeded {} options, closing", config.max_options_per_handshake);
    Ok(None)
}

/// Reads one option and decides on it; `None` when the option header is invalid.
async fn next_option<S: AsyncRead + Unpin>(
    stream: &mut S,
    negotiation: &mut Negotiation,
    config: &ServerConfig,
    shutdown: &watch::Receiver<bool>,
) -> io::Result<Option<Outcome>> {
    let mut header_bytes = [0u8; OPTION_HEADER_BYTES];
    stream.read_exact(&mut header_bytes).await?;
    let Ok(header) = OptionHeader::parse(&header_bytes) else {
        tracing::info!("nbd: bad option magic, closing");
        return Ok(None);
    };
    if header.length_bytes > config.max_option_bytes {
        drain(stream, header.length_bytes as u64).await?;
        return Ok(Some(negotiation.handle_oversized(header.option)));
    }
    let mut data = vec![0u8; header.length_bytes as usize];
    stream.read_exact(&mut data).await?;
    if shutdown_requested(shutdown) {
        return Ok(Some(negotiation.handle_during_shutdown(header.option)));
    }
    Ok(Some(negotiation.handle(header.option, &data)))
}

/// Reads and discards `length_bytes` without ever holding more than one chunk.
async fn drain<S: AsyncRead + Unpin>(stream: &mut S, length_bytes: u64) -> io::Result<()> {
    let mut chunk = vec![0u8; DRAIN_CHUNK_BYTES];
    let mut remaining_bytes = length_bytes;
    while remaining_bytes > 0 {
        let piece_bytes = remaining_bytes.min(DRAIN_CHUNK_BYTES as u64) as usize;
        stream.read_exact(&mut chunk[..piece_bytes]).await?;
        remaining_bytes -= piece_bytes as u64;
    }
    Ok(())
}
