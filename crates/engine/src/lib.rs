//! fardisk's engine: pools of thin volumes whose durable home is an object store, committed in
//! atomic transaction groups. See ARCHITECTURE.md for the data paths and docs/format.md for every
//! byte that reaches the store. "Rule N" in a comment is rule N of docs/design/0000-rules.md.

// Library code reads time and randomness only through `Env` (clippy.toml); the library's own
// build is checked for that. Its unit tests may wait in real time for real tasks.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod arc_cache;
pub mod blkptr;
pub mod block_buffers;
pub mod blockmap;
pub mod cache;
pub mod clock;
pub mod codec;
pub mod compress;
pub mod destroying;
pub mod device_reads;
pub mod dirty;
pub mod error;
pub mod fence;
pub mod frees;
pub mod objstore;
pub mod pool;
pub mod props;
pub mod rng;
pub mod root;
pub mod segment;
pub mod size;
pub mod space;

pub use error::{Error, ErrorKind, Result};
pub use pool::{Env, Pool, PoolConfig};
