//! FUSE front end: a directory in which every volume of an imported pool appears as one
//! regular file of the volume's size, the way a zvol appears as a device node. Users attach
//! a loop device to the file (`losetup --direct-io=on -f --show DIR/VOL`), put ext4 or xfs
//! on it and run their database there.
//!
//! The data path of one request:
//! 1. A transport thread of the `fardisk-fuse` session (a /dev/fuse worker, or with
//!    `FuseOptions::uring` an io_uring queue) receives a request, parses it in place and
//!    calls [`filesystem`].
//! 2. Metadata requests (lookup, getattr, readdir, open, ...) are answered on that thread;
//!    they only consult the [`ExportProvider`] and two small tables ([`inodes`], [`handles`]).
//! 3. Data requests (read, write, fsync, fallocate) are handed to the tokio runtime by
//!    [`dispatch`] with at most `requests_in_flight_max` running; the task calls the
//!    [`BlockDevice`] (through [`io`], which handles unaligned ranges) and sends the reply.
//!
//! Durability: `fsync`/`fdatasync` on the image call [`BlockDevice::flush`] and are answered
//! only when it returns; writes whose open flags carry O_SYNC/O_DSYNC are sent with FUA. A
//! loop device turns its block-layer FLUSH (and FUA, which loop emulates with a flush) into
//! `vfs_fsync` on the image, so an ext4 journal commit inside reaches `flush()`.
//!
//! The kernel caching mode chosen by default and the measurements behind it are in
//! docs/design/0002-fuse-caching.md; the transports and the profile of the path in
//! docs/design/0004-fuse-path-profile.md. Errors map to errno in one place, [`errno`].
//!
//! [`BlockDevice`]: fardisk_nbd::BlockDevice
//! [`BlockDevice::flush`]: fardisk_nbd::BlockDevice::flush
//! [`ExportProvider`]: fardisk_nbd::ExportProvider

mod attr;
mod data;
mod dispatch;
mod errno;
mod filesystem;
mod handles;
mod inodes;
mod io;
mod mount;
mod options;
mod uring_switch;

pub use errno::errno_for;
pub use fardisk_fuse::{SessionMonitor, SessionStats, Transport};
pub use mount::{
    clear_stale_mount, image_mount_options, mount, mount_held, FuseMonitor, FuseMount,
    HeldConnection, HolderUnmount,
};
pub use options::FuseOptions;
pub use uring_switch::{prepare_uring, UringMode};
