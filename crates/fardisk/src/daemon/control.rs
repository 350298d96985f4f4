//! The control socket: one JSON request per line, one JSON reply per line, over a unix socket
//! with owner-only permissions. The CLI's commands against an imported pool all go through here.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// Largest request or reply line accepted (bounds memory per connection).
pub const LINE_BYTES_MAX: usize = 1 << 20;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub cmd: String,
    #[serde(default)]
    pub args: Value,
    /// The client's command line, recorded in the pool history when the request changes the
    /// pool (`fardisk history`).
    #[serde(default)]
    pub cmdline: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    #[serde(default)]
    pub data: Value,
    #[serde(default)]
    pub error: String,
}

impl Reply {
    pub fn ok(data: Value) -> Reply {
        Reply { ok: true, data, error: String::new() }
    }
    pub fn err(e: impl std::fmt::Display) -> Reply {
        Reply { ok: false, data: Value::Null, error: e.to_string() }
    }
}

/// Sends one request to the daemon of `pool` and returns its data, or the daemon's error.
pub async fn call(socket: &Path, cmd: &str, args: Value) -> Result<Value> {
    let stream = UnixStream::connect(socket)
        .await
        .with_context(|| format!("cannot reach the daemon at {}", socket.display()))?;
    let (r, mut w) = stream.into_split();
    let mut line =
        serde_json::to_vec(&Request { cmd: cmd.to_string(), args, cmdline: command_line() })?;
    line.push(b'\n');
    w.write_all(&line).await?;
    let mut reader = BufReader::new(r);
    let mut reply = String::new();
    let n = reader.read_line(&mut reply).await?;
    if n == 0 {
        bail!("the daemon closed the connection without a reply (see its log)");
    }
    let reply: Reply = serde_json::from_str(&reply).context("the daemon sent a malformed reply")?;
    if reply.ok {
        Ok(reply.data)
    } else {
        bail!("{}", reply.error)
    }
}

/// This process's command line as the user typed it (program name shortened to `fardisk`).
pub fn command_line() -> String {
    let mut args = std::env::args();
    let _program = args.next();
    std::iter::once("fardisk".to_string()).chain(args).collect::<Vec<_>>().join(" ")
}

/// True when a daemon answers on `socket`.
pub async fn is_alive(socket: &Path) -> bool {
    call(socket, "ping", Value::Null).await.is_ok()
}
