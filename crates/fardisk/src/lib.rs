//! The `fardisk` command: the zpool-shaped CLI, the per-pool daemon and its front ends.

pub mod cli;
pub mod config_file;
pub mod daemon;
pub mod device;
pub mod fuse;
pub mod keys;
pub mod paths;
pub mod progress;
pub mod vdev_format;
