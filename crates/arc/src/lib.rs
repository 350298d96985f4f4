//! fardisk read caches.
//!
//! * [`AdaptiveCache`]: the ARC in RAM (MRU/MFU lists with ghost lists, adaptive split `p`,
//!   byte-weighted target `c`), scan resistant, feeding its evictions into a bounded
//!   [`EvictionFeed`].
//! * [`L2Arc`]: the persistent second-level cache on local cache devices, fed from the
//!   eviction feed at a capped rate, rebuilt after restart from its log-block headers, and
//!   unable to return bytes whose checksum does not match what the caller expects.
//! * [`encode_hot_set`] / [`decode_hot_set`]: a checksummed blob of ARC keys. The engine does
//!   not store it: its warm-up list is its own `hotset` object of logical regions
//!   (docs/format/l2arc.md, design note 0003).
//!
//! Both caches are keyed by [`BlockKey`], the immutable location of a block in the object
//! store. Because a location never changes meaning, a cache entry can be old but never stale;
//! the caller's expected checksum guards against everything else.
//!
//! The crate has no engine dependencies and no async: every call is short and bounded, and the
//! L2ARC's device I/O is plain positioned I/O that an async caller wraps in `spawn_blocking`.
//! Byte layouts: `docs/format/l2arc.md`.

mod arc;
mod clock;
mod codec;
mod hot_set;
mod key;
mod l2arc;

pub use arc::{
    AdaptiveCache, ArcConfig, ArcStats, EvictionFeed, FeedItem, InsertKind,
    ENTRY_OVERHEAD_BYTES_DEFAULT,
};
pub use clock::{Clock, ManualClock, MonotonicClock, SystemClock};
pub use hot_set::{decode_hot_set, encode_hot_set, HotSetError, HOT_SET_ENTRIES_MAX};
pub use key::{BlockKey, LocationHash, LocationHasher};
// The device decoders for the cargo-fuzz targets in fuzz/ (not an API).
#[doc(hidden)]
pub use l2arc::fuzz_api;
pub use l2arc::{
    cache_label_pool_guid, DeviceId, DeviceState, DeviceStats, L2Arc, L2ArcConfig, L2Error,
    L2Stats, PlannedRead, ReadBuf, RebuildStats, WriteTickReport, WriterHandle,
    LOG_BLOCK_BYTES_MAX, LOG_BLOCK_BYTES_MIN, SLOTS_PER_DEVICE_TARGET,
};
