//! The daemon that serves one imported pool: the engine, its front ends (FUSE image files, NBD on
//! unix and TCP sockets) and the control socket the CLI talks to (the requests and replies are
//! `crate::control`'s). It drains everything to the store on `export`, SIGTERM or SIGINT.

mod block_devices;
mod export_replies;
mod handlers;
mod metrics;
pub mod metrics_http;
pub mod serve;
mod snapshot_requests;
mod vdev_requests;

pub use serve::{run, run_foreground};
