//! The `fardisk` command: the zpool-shaped CLI, the per-pool daemon and its front ends.
//!
//! Dependencies run one way: `cli` and `daemon` both use `control` (the typed requests and
//! replies between them) and the shared pieces below it (`config`, `paths`, `keys`, `store`,
//! `vdev_format`, `device`, `progress`); neither uses the other. The binary (`main.rs`) hands
//! the CLI the function that runs a daemon in the foreground.

pub mod cli;
pub mod config;
pub mod control;
pub mod daemon;
pub mod device;
pub mod fuse;
pub mod keys;
pub mod paths;
pub mod progress;
pub mod store;
pub mod vdev_format;
