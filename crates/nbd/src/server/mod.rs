//! The NBD server: listeners, the handshake state machine and its driver, and the
//! transmission loop. See `docs/format/nbd.md` for what goes over the wire.

mod command;
mod connection;
mod execute;
mod handshake;
mod listener;
pub mod negotiate;
mod reply_sink;
pub mod shaping;
mod shutdown;
mod transmission;

pub use command::{validate, Action, ExportLimits, Refusal};
pub use connection::serve_connection;
pub use listener::{serve_tcp, serve_tcp_listener, serve_unix};
