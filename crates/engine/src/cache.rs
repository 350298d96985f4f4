//! The engine's view of its read caches (ARC in RAM, L2ARC on local SSD): blocks by immutable
//! location. A block's pointer never changes meaning, so an overwrite can never make the cache
//! stale; the caller verifies every cached block against the pointer's checksum before use.

use crate::blkptr::BlockPtr;
use bytes::Bytes;

pub trait BlockCache: Send + Sync + std::fmt::Debug {
    /// Physical bytes of the block, if cached (`prefetch`: asked by readahead, not a demand read).
    fn get(&self, ptr: &BlockPtr, prefetch: bool) -> Option<Bytes>;
    /// Like `get`, but only from memory: never waits for a device, so async code may call it.
    fn get_ram(&self, ptr: &BlockPtr, prefetch: bool) -> Option<Bytes> {
        self.get(ptr, prefetch)
    }
    /// Whether a local cache device (L2ARC) holds the block, by index only (no I/O). Such blocks
    /// are read with `get` on a blocking thread, so device reads proceed in parallel instead of
    /// occupying the async runtime's few worker threads.
    fn on_device(&self, _ptr: &BlockPtr) -> bool {
        false
    }
    /// The block from the cache device, after `get_ram` missed (may wait for I/O: call it from a
    /// blocking thread). Brings it into memory as `get` would.
    fn get_device(&self, ptr: &BlockPtr, prefetch: bool) -> Option<Bytes> {
        self.get(ptr, prefetch)
    }
    fn insert(&self, ptr: &BlockPtr, physical: Bytes, prefetch: bool);
    /// A cached copy failed verification: drop it.
    fn invalidate(&self, ptr: &BlockPtr);
    /// True when nothing is ever cached (readahead would only waste requests).
    fn holds_nothing(&self) -> bool {
        false
    }
}

#[derive(Debug)]
pub struct NoCache;

impl BlockCache for NoCache {
    fn get(&self, _: &BlockPtr, _: bool) -> Option<Bytes> {
        None
    }
    fn insert(&self, _: &BlockPtr, _: Bytes, _: bool) {}
    fn invalidate(&self, _: &BlockPtr) {}
    fn holds_nothing(&self) -> bool {
        true
    }
}
