//! The daemon that serves one imported pool: the engine, its front ends (FUSE image files, NBD on
//! unix and TCP sockets) and the control socket the CLI talks to. It drains everything to the
//! store on `export`, SIGTERM or SIGINT.

pub mod control;
mod handlers;
mod metrics;
pub mod metrics_http;
pub mod serve;
mod snapshot_requests;
mod vdev_requests;

pub use serve::{run, DaemonOptions, NbdListen};
