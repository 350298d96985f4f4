//! The wire: one JSON request line from the CLI, one JSON reply line from the daemon, over the
//! daemon's unix socket (owner-only: `daemon/serve.rs` binds it mode 0600). Both ends bound what
//! they read.

use super::reply::{ControlError, Reply};
use super::request::{Envelope, Request};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::path::Path;
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};
use tokio::net::UnixStream;

/// Largest request line the daemon reads (bounds memory per connection).
pub const LINE_BYTES_MAX: usize = 1 << 20;
/// Largest reply line the CLI reads (a status or a history of 1000 events is far smaller).
pub const REPLY_BYTES_MAX: usize = 64 << 20;

/// Sends `request` to the daemon at `socket` and returns its data. A failure the daemon reports
/// is a [`ControlError`] (with its kind) in the returned error's chain.
pub async fn call(socket: &Path, request: Request) -> Result<Value> {
    let stream = UnixStream::connect(socket)
        .await
        .with_context(|| format!("cannot reach the daemon at {}", socket.display()))?;
    let (r, mut w) = stream.into_split();
    let mut line = serde_json::to_vec(&Envelope { request, cmdline: command_line() })?;
    line.push(b'\n');
    w.write_all(&line).await?;
    let mut reader = BufReader::new(r.take(REPLY_BYTES_MAX as u64));
    let mut reply = String::new();
    let n = reader.read_line(&mut reply).await?;
    if n == 0 {
        bail!("the daemon closed the connection without a reply (see its log)");
    }
    let reply: Reply = serde_json::from_str(&reply).context("the daemon sent a malformed reply")?;
    Ok(reply.into_result()?)
}

/// This process's command line as the user typed it (program name shortened to `fardisk`).
pub fn command_line() -> String {
    let mut args = std::env::args();
    let _program = args.next();
    std::iter::once("fardisk".to_string()).chain(args).collect::<Vec<_>>().join(" ")
}

/// True when a daemon answers on `socket`.
pub async fn is_alive(socket: &Path) -> bool {
    call(socket, Request::Ping).await.is_ok()
}

/// The daemon's side: one request from `reader` (at most `LINE_BYTES_MAX` bytes). None when the
/// client sent nothing; a request that does not parse is a bad-input error to answer with.
pub async fn read_request(
    reader: &mut (impl AsyncBufRead + Unpin),
) -> Option<Result<Envelope, ControlError>> {
    let mut line = String::new();
    if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
        return None;
    }
    Some(parse_request(&line))
}

/// One request line; an unknown command is named as such (a newer CLI than this daemon).
pub fn parse_request(line: &str) -> Result<Envelope, ControlError> {
    serde_json::from_str::<Envelope>(line).map_err(|e| {
        let cmd = serde_json::from_str::<Value>(line)
            .ok()
            .and_then(|v| v.get("cmd").and_then(Value::as_str).map(str::to_string));
        match cmd {
            Some(cmd) if e.to_string().contains("unknown variant") => {
                ControlError::bad_input(format!("unknown request '{cmd}'"))
            }
            _ => ControlError::bad_input(format!("malformed request: {e}")),
        }
    })
}

/// The daemon's side: one reply line.
pub async fn write_reply(w: &mut (impl AsyncWrite + Unpin), reply: &Reply) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(reply).unwrap_or_default();
    bytes.push(b'\n');
    w.write_all(&bytes).await?;
    w.flush().await
}

#[cfg(test)]
#[path = "socket_tests.rs"]
mod tests;
