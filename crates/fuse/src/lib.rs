//! fardisk's FUSE session layer: the kernel ABI ([`abi`]), request parsing from borrowed
//! buffers with every length checked ([`request`]), replies encoded without allocation
//! ([`reply`]), the INIT handshake ([`init`]), mounting ([`mount`]), and two transports —
//! /dev/fuse worker threads and FUSE-over-io_uring queues — behind one [`Session`].
//!
//! It knows nothing of fardisk's engine: a [`Filesystem`] gets parsed requests and a
//! [`Reply`] to answer from any thread. A connection can change hands between processes
//! ([`Session::resume`], [`Session::notify_resend`], [`handover`]); docs/design/
//! 0004-fuse-path-profile.md says why this layer exists and what it measured.

pub mod abi;
mod errno;
mod filesystem;
pub mod handover;
pub mod init;
pub mod mount;
pub mod refuse;
pub mod reply;
pub mod request;
mod session;
mod transport;

pub use errno::Errno;
pub use filesystem::Filesystem;
pub use init::{InitOptions, KernelInit, Negotiated};
pub use mount::MountOptions;
pub use reply::{DirBuf, Reply};
pub use request::{Operation, Request};
pub use session::{Session, SessionConfig, SessionMonitor, SessionStats, Transport};
