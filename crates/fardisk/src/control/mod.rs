//! The contract between the CLI and the daemon. Both depend on this module; it depends on
//! neither (nor do they on each other):
//! - `request.rs`: one typed request per command, with its arguments and its registration (its
//!   wire name, and whether a success enters the pool history);
//! - `reply.rs`: the answer, which carries the engine's `ErrorKind` when the request failed, so
//!   the CLI can tell "fenced" from "retry later", bad input, damaged data and a bug;
//! - `socket.rs`: the wire, one JSON line each way over the daemon's owner-only unix socket;
//! - `daemon_options.rs`: what `fardisk import` hands the daemon it starts.

pub mod daemon_options;
pub mod reply;
pub mod request;
pub mod socket;

pub use daemon_options::{DaemonOptions, DaemonRunner, NbdListen};
pub use reply::{one_line, ControlError, Reply};
pub use request::{Envelope, Registration, Request, ScrubAction, SnapshotTarget};
pub use socket::{call, command_line, is_alive};
