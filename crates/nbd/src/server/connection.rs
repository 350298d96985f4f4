//! One client connection from greeting to close: handshake on the whole stream, then
//! split it into a reader (request loop) and a shared reply writer.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

use super::handshake::handshake;
use super::reply_sink::ReplySink;
use super::transmission::Transmission;
use crate::config::ServerConfig;
use crate::export::ExportProvider;

/// Serves one already-accepted connection until it closes. Errors are the client's
/// business (it went away, it broke the protocol) and are logged, never propagated:
/// one connection cannot affect another.
pub async fn serve_connection<S>(
    mut stream: S,
    provider: Arc<dyn ExportProvider>,
    config: ServerConfig,
    shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let config = config.normalized();
    let session = match handshake(&mut stream, provider, &config, shutdown.clone()).await {
        Ok(Some(session)) => session,
        Ok(None) => return,
        Err(error) => {
            tracing::debug!("nbd: handshake ended: {error}");
            return;
        }
    };
    tracing::debug!("nbd: client entered transmission on export {:?}", session.export_name);
    let (reader, writer) = tokio::io::split(stream);
    let sink = Arc::new(ReplySink::new(
        Box::pin(writer),
        session.structured_replies,
        session.block_sizes.preferred_bytes,
    ));
    let reason = Transmission::new(session, &config, sink).run(reader, shutdown).await;
    tracing::debug!("nbd: connection closed: {reason:?}");
}
