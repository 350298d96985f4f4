//! The Prometheus endpoint: `GET /metrics` over plain HTTP/1.1, one request per connection. Off
//! unless `import --metrics ADDR` is given; a non-loopback address needs `--metrics-public`
//! (`control::daemon_options::parse_listen`), so the pool's figures never leave the host by
//! accident.

use super::handlers::DaemonState;
use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

/// A request line and headers larger than this are refused (a scraper sends a few hundred bytes).
const REQUEST_BYTES_MAX: usize = 8192;
/// Scrapes served at once; more wait for a slot (the accept loop never grows without bound).
const CONNECTIONS_MAX: usize = 8;
/// A client that does not send its request in this time is dropped.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

pub async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr).await.with_context(|| format!("cannot listen for metrics on {addr} (in use? pick another port with --metrics 127.0.0.1:PORT)"))
}

/// Serves scrapes until `stop` turns true.
pub async fn serve(
    listener: TcpListener,
    state: Arc<DaemonState>,
    name: String,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => return },
            _ = stop.changed() => return,
        };
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        let (st, name) = (state.clone(), name.clone());
        tokio::spawn(async move {
            let _ = answer(stream, &st, &name).await;
            drop(permit);
        });
    }
}

async fn answer(mut stream: TcpStream, st: &DaemonState, name: &str) -> std::io::Result<()> {
    let mut buf = vec![0u8; REQUEST_BYTES_MAX];
    let mut len = 0;
    // Read up to the end of the headers (the request has no body).
    let head_end = loop {
        if len == buf.len() {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                "request too large\n",
            )
            .await;
        }
        let n = match tokio::time::timeout(READ_TIMEOUT, stream.read(&mut buf[len..])).await {
            Ok(r) => r?,
            Err(_) => return Ok(()),
        };
        if n == 0 {
            return Ok(());
        }
        len += n;
        if let Some(i) = buf[..len]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .or_else(|| buf[..len].windows(2).position(|w| w == b"\n\n"))
        {
            break i;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]);
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => {
            let body = scrape(st, name);
            respond(
                &mut stream,
                "200 OK",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                &body,
            )
            .await
        }
        ("GET", "/") => {
            respond(&mut stream, "200 OK", "text/plain", "fardisk metrics: GET /metrics\n").await
        }
        ("GET", _) => {
            respond(
                &mut stream,
                "404 Not Found",
                "text/plain",
                "not found; metrics are at /metrics\n",
            )
            .await
        }
        _ => respond(&mut stream, "405 Method Not Allowed", "text/plain", "only GET\n").await,
    }
}

/// One scrape: the same snapshots as `status --json` and `arcstat --json`.
pub fn scrape(st: &DaemonState, name: &str) -> String {
    let status = super::handlers::status_json(st);
    let arc = super::handlers::arcstat_json(st);
    let now_ms = fardisk_engine::Env::system().clock.wall_ms();
    super::metrics::encode(name, &status, &arc, now_ms)
}

async fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &str,
) -> std::io::Result<()> {
    let head = format!("HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}
