//! The engine's view of its read caches (ARC in RAM, L2ARC on local SSD): blocks by immutable
//! location. A block's pointer never changes meaning, so an overwrite can never make the cache
//! stale. The caller verifies every cached block against the pointer's checksum before use,
//! unless the cache says its hits are verified already ([`BlockCache::hits_verified`]).

use crate::blkptr::BlockPtr;
use crate::pool::Env;
use bytes::Bytes;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// What [`BlockCache::read_device`] returns.
pub type DeviceRead = Pin<Box<dyn Future<Output = Option<Bytes>> + Send>>;

pub trait BlockCache: Send + Sync + std::fmt::Debug + 'static {
    /// Physical bytes of the block, if cached (`prefetch`: asked by readahead, not a demand read).
    fn get(&self, ptr: &BlockPtr, prefetch: bool) -> Option<Bytes>;
    /// Like `get`, but only from memory: never waits for a device, so async code may call it.
    fn get_ram(&self, ptr: &BlockPtr, prefetch: bool) -> Option<Bytes> {
        self.get(ptr, prefetch)
    }
    /// Whether the block is in memory, by index only: counts nothing, changes nothing. A cache
    /// that cannot tell cheaply says false (the caller then fetches the block instead).
    fn in_ram(&self, _ptr: &BlockPtr) -> bool {
        false
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
    /// `get_device` for async code: waits for the device without holding an async worker
    /// thread. By default on a blocking thread (inline with `env.blocking_inline`); the ARC's
    /// L2ARC submits the read to io_uring instead (`arc_cache.rs`).
    fn read_device(self: Arc<Self>, ptr: BlockPtr, prefetch: bool, env: Env) -> DeviceRead {
        Box::pin(async move {
            env.blocking("cache-device read", move || self.get_device(&ptr, prefetch))
                .await
                .ok()
                .flatten()
        })
    }
    /// Caches `physical`, which the caller verified against `ptr.checksum` (or computed it from).
    fn insert(&self, ptr: &BlockPtr, physical: Bytes, prefetch: bool);
    /// `get_ram` of each pointer, in order: a cache behind a lock takes it once per batch, not
    /// once per block (a sequential reader asks for hundreds of blocks at once).
    fn get_ram_many(&self, ptrs: &[BlockPtr], prefetch: bool) -> Vec<Option<Bytes>> {
        ptrs.iter().map(|p| self.get_ram(p, prefetch)).collect()
    }
    /// `insert` of each block, in order (a coalesced GET's blocks), batched as `get_ram_many`.
    fn insert_many(&self, blocks: Vec<(BlockPtr, Bytes)>, prefetch: bool) {
        for (p, physical) in blocks {
            self.insert(&p, physical, prefetch);
        }
    }
    /// True when every block `get`, `get_ram`, `get_device` and `read_device` return is known
    /// to hash to the asking pointer's checksum (the ARC compares the checksum it was inserted
    /// with; the L2ARC hashes what it read): the caller then skips hashing it again.
    fn hits_verified(&self) -> bool {
        false
    }
    /// A long sequential stream (past `arc_stream_bytes_max`) has read these blocks: the ones
    /// nothing but this read has used may leave memory now, so that a scan reuses the memory
    /// of the blocks behind it rather than filling the whole cache (ARC:
    /// `AdaptiveCache::let_go_read_once`). Blocks that were in use before stay.
    fn let_go_read_once(&self, _ptrs: &[BlockPtr]) {}
    /// A cached copy failed verification: drop it.
    fn invalidate(&self, ptr: &BlockPtr);
    /// True when nothing is ever cached (readahead would only waste requests).
    fn holds_nothing(&self) -> bool {
        false
    }
    /// The most bytes the cache keeps in RAM: readahead stays well inside it, so prefetched
    /// blocks are not evicted before the reader reaches them.
    fn ram_bytes_max(&self) -> u64 {
        u64::MAX
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
