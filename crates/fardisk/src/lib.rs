//! The `fardisk` command: the zpool-shaped CLI, the per-pool daemon and its front ends.
//!
//! Dependencies run one way: `cli` and `daemon` both use `control` (the typed requests and
//! replies between them) and the shared pieces below it (`config`, `paths`, `keys`, `store`,
//! `vdev_format`, `device`, `progress`); neither uses the other. The binary (`main.rs`) hands
//! the CLI the function that runs a daemon in the foreground.

// Unit tests may wait in real time (mounts, devices and threads they drive are real).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

// Loop devices are bound and unbound by the kernel in real time (a short bounded poll until an
// unbound device leaves sysfs, or a new image appears in the mount).
#[allow(clippy::disallowed_methods)]
pub mod blockdev;
// The CLI and the daemon work with people, processes and sockets in real time (progress,
// polling, timeouts, the import time shown on image files): they use the system clock and
// sleeps directly. The engine below them reads time only through `Env::clock`.
#[allow(clippy::disallowed_methods)]
pub mod cli;
pub mod config;
pub mod control;
#[allow(clippy::disallowed_methods)]
pub mod daemon;
pub mod device;
pub mod fuse;
// The holder waits on processes and sockets in real time (poll intervals, exit times).
#[allow(clippy::disallowed_methods)]
pub mod holder;
pub mod keys;
pub mod paths;
pub mod progress;
pub mod sd_notify;
pub mod store;
pub mod vdev_format;
