//! fardisk-nbd: an NBD (Network Block Device) server library.
//!
//! - [`wire`]: the pure protocol codec (bytes in, typed values out; fuzzed).
//! - [`server`]: unix/TCP listeners, the fixed-newstyle handshake, and a pipelined
//!   transmission loop (bounded in-flight requests and bytes, out-of-order replies,
//!   serialized writes).
//! - [`BlockDevice`] / [`ExportProvider`]: what the storage engine implements.
//! - [`MemDevice`]: an in-memory sparse device for tests and demos; [`SectorDevice`]: the same
//!   with 512-byte sectors, refusing unaligned requests (tests of the front ends);
//!   [`PartsDevice`]: the same answering reads in parts (tests of vectored replies).
//!
//! Semantics follow the NBD protocol document (NetworkBlockDevice/nbd, doc/proto.md).

pub mod config;
pub mod device;
pub mod export;
pub mod mem_device;
pub mod parts_device;
pub mod sector_device;
pub mod server;
pub mod wire;

pub use config::ServerConfig;
pub use device::{BlockDevice, DeviceError, Extent};
pub use export::{ExportInfo, ExportMap, ExportProvider};
pub use mem_device::{MemDevice, MemDeviceStats};
pub use parts_device::PartsDevice;
pub use sector_device::SectorDevice;
pub use server::{serve_connection, serve_tcp, serve_tcp_listener, serve_unix};
