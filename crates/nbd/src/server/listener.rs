//! Listening sockets: a unix socket created owner-only (0600) and TCP. Both feed one
//! accept loop that caps the number of live connections and stops on shutdown,
//! waiting for the connections it started to finish.

use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use super::connection::serve_connection;
use super::shutdown::wait_for_shutdown;
use crate::config::ServerConfig;
use crate::export::ExportProvider;

/// Pending connections the kernel queues before accept.
const LISTEN_BACKLOG: i32 = 128;

trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

impl Listener {
    async fn accept(&self) -> io::Result<Box<dyn Stream>> {
        match self {
            Listener::Unix(listener) => {
                let (stream, _) = listener.accept().await?;
                Ok(Box::new(stream))
            }
            Listener::Tcp(listener) => {
                let (stream, peer) = listener.accept().await?;
                // Small replies must not wait for Nagle (the spec asks for NODELAY).
                stream.set_nodelay(true)?;
                tracing::debug!("nbd: connection from {peer}");
                Ok(Box::new(stream))
            }
        }
    }
}

/// Serves NBD on a unix socket at `path`, created with mode 0600. A stale socket file
/// left by a dead server is replaced; a live one, or any non-socket file, is an error.
/// The socket file is removed when the server stops.
pub async fn serve_unix(
    path: &Path,
    provider: Arc<dyn ExportProvider>,
    config: ServerConfig,
    shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let listener = bind_unix_owner_only(path)?;
    let result = accept_loop(Listener::Unix(listener), provider, config, shutdown).await;
    if let Err(error) = std::fs::remove_file(path) {
        tracing::warn!("nbd: could not remove socket {}: {error}", path.display());
    }
    result
}

/// Serves NBD on TCP at `addr`.
pub async fn serve_tcp(
    addr: SocketAddr,
    provider: Arc<dyn ExportProvider>,
    config: ServerConfig,
    shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    serve_tcp_listener(listener, provider, config, shutdown).await
}

/// Serves NBD on an already bound TCP listener (lets callers bind port 0 and learn
/// the port first).
pub async fn serve_tcp_listener(
    listener: TcpListener,
    provider: Arc<dyn ExportProvider>,
    config: ServerConfig,
    shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    accept_loop(Listener::Tcp(listener), provider, config, shutdown).await
}

fn remove_stale_socket(path: &Path) -> io::Result<()> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    if !metadata.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket", path.display()),
        ));
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("a server is already listening on {}", path.display()),
        ));
    }
    std::fs::remove_file(path)
}

/// Binds, restricts the socket file to its owner, and only then listens, so no
/// client can connect while the file still has the default permissions.
fn bind_unix_owner_only(path: &Path) -> io::Result<UnixListener> {
    remove_stale_socket(path)?;
    let socket = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    socket.bind(&socket2::SockAddr::unix(path)?)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    socket.listen(LISTEN_BACKLOG)?;
    socket.set_nonblocking(true)?;
    UnixListener::from_std(socket.into())
}

async fn accept_loop(
    listener: Listener,
    provider: Arc<dyn ExportProvider>,
    config: ServerConfig,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let config = config.normalized();
    let slots = Arc::new(Semaphore::new(config.max_connections));
    let mut connections = JoinSet::new();
    loop {
        // Reap finished connections so the set stays bounded by max_connections.
        while connections.try_join_next().is_some() {}
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = wait_for_shutdown(&mut shutdown) => break,
        };
        let stream = match accepted {
            Ok(stream) => stream,
            Err(error) => {
                // Per-connection failures (e.g. the peer reset before accept) must not
                // stop the server; back off briefly in case it is fd exhaustion.
                tracing::warn!("nbd: accept failed: {error}");
                // Real sockets, real time: the back-off is not on the engine's clock.
                #[allow(clippy::disallowed_methods)]
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!("nbd: {} connections open, refusing another", config.max_connections);
            drop(stream);
            continue;
        };
        let provider = provider.clone();
        let config = config.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            serve_connection(stream, provider, config, shutdown).await;
            drop(slot);
        });
    }
    // Connections see the same shutdown signal and finish their in-flight requests.
    while connections.join_next().await.is_some() {}
    Ok(())
}
