//! The ARC: an adaptive replacement cache of physical block bytes in RAM.
//!
//! One short `parking_lot::Mutex` guards the policy: every operation is O(1) list surgery on a
//! hash map and an arena, with no I/O and no allocation of block data under the lock, so many
//! readers share it well. Evicted blocks are collected under the lock and handed to the bounded
//! [`EvictionFeed`] after it is released.
//!
//! Memory: resident charge (value bytes plus `entry_overhead_bytes` each) never exceeds
//! `arc_max_bytes`; ghosts add at most `ghost_entries_max` keys (~100 bytes each); the feed holds
//! at most `feed_bytes_max` bytes of evicted data (shared with, not copied from, the ARC).

mod config;
mod feed;
mod lists;
mod policy;
mod stats;

#[cfg(test)]
mod policy_tests;
#[cfg(test)]
mod proptests;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

pub use config::{ArcConfig, ENTRY_OVERHEAD_BYTES_DEFAULT};
pub use feed::{EvictionFeed, FeedItem};
pub use policy::InsertKind;
pub use stats::ArcStats;

use crate::key::BlockKey;
use policy::ArcState;

/// Most entries the batch calls serve per lock acquisition: a batch holds the lock for this
/// many O(1) operations (tens of microseconds when each misses the CPU caches), so a demand
/// read waiting behind a prefetch's batch waits that long, not for the whole GET's blocks.
pub const BATCH_ENTRIES_MAX: usize = 64;

/// The ARC. Cheap to share behind an `Arc`; all methods take `&self`.
pub struct AdaptiveCache {
    state: Mutex<ArcState>,
    feed: Arc<EvictionFeed>,
    /// Whether evictions go to the feed. Off while nothing drains it (a pool with no cache
    /// device): the feed would otherwise hold up to `feed_bytes_max` of evicted blocks beyond
    /// `arc_max_bytes`, and every eviction would take its lock for nothing.
    feeding: AtomicBool,
}

impl AdaptiveCache {
    pub fn new(config: ArcConfig) -> Self {
        let feed = EvictionFeed::new(config.feed_entries_max, config.feed_bytes_max);
        Self {
            state: Mutex::new(ArcState::new(&config)),
            feed: Arc::new(feed),
            feeding: AtomicBool::new(true),
        }
    }

    /// Starts or stops handing evicted blocks to the feed. Stopping empties it: what waits there
    /// is freed now rather than when a drainer that may never come takes it.
    pub fn set_feeding(&self, feeding: bool) {
        self.feeding.store(feeding, Ordering::Release);
        if !feeding {
            while self.feed.pop().is_some() {}
        }
    }

    /// Whether evictions go to the feed (see [`AdaptiveCache::set_feeding`]).
    pub fn is_feeding(&self) -> bool {
        self.feeding.load(Ordering::Acquire)
    }

    /// A demand read of the block whose bytes hash to `checksum`. `None` is a miss: the caller
    /// reads the block elsewhere and inserts it. A hit is the bytes that were inserted with that
    /// checksum, so the caller need not hash them again.
    pub fn get(&self, key: &BlockKey, checksum: u64) -> Option<Bytes> {
        self.state.lock().get_demand(key, checksum)
    }

    /// A read-ahead probe: returns the block if resident without touching its recency.
    pub fn get_prefetch(&self, key: &BlockKey, checksum: u64) -> Option<Bytes> {
        self.state.lock().get_prefetch(key, checksum)
    }

    /// Whether the block is resident; counts nothing, changes nothing.
    pub fn contains(&self, key: &BlockKey) -> bool {
        self.state.lock().contains(key)
    }

    /// Caches a block read from elsewhere. `checksum` is `xxh3_64(value)`, which the caller has
    /// verified (or computed) for exactly these bytes: reads are answered by comparing it, not
    /// by hashing the block again. A value larger than the size target is refused.
    pub fn insert(&self, key: BlockKey, value: Bytes, checksum: u64, kind: InsertKind) {
        let mut evicted = Vec::new();
        self.state.lock().insert(key, value, checksum, kind, &mut evicted);
        self.feed_all(evicted);
    }

    /// `get` (or, with `prefetch`, `get_prefetch`) of each `(key, checksum)`, in order, taking
    /// the lock once per [`BATCH_ENTRIES_MAX`] entries instead of once per block: a 1 MiB read
    /// is 256 blocks, and on two cores a lock taken per block was contended enough to put a
    /// reader to sleep on it thousands of times per GiB read (bench/notes/engine-store.md).
    pub fn get_many(&self, keys: &[(BlockKey, u64)], prefetch: bool) -> Vec<Option<Bytes>> {
        let mut out = Vec::with_capacity(keys.len());
        for batch in keys.chunks(BATCH_ENTRIES_MAX) {
            let mut state = self.state.lock();
            for (key, checksum) in batch {
                out.push(if prefetch {
                    state.get_prefetch(key, *checksum)
                } else {
                    state.get_demand(key, *checksum)
                });
            }
        }
        out
    }

    /// `insert` of each `(key, value, checksum)`, in order, taking the lock once per
    /// [`BATCH_ENTRIES_MAX`] entries (a coalesced GET brings thousands of blocks at once).
    pub fn insert_many(&self, items: Vec<(BlockKey, Bytes, u64)>, kind: InsertKind) {
        let mut evicted = Vec::new();
        let mut items = items.into_iter().peekable();
        while items.peek().is_some() {
            let mut state = self.state.lock();
            for (key, value, checksum) in items.by_ref().take(BATCH_ENTRIES_MAX) {
                state.insert(key, value, checksum, kind, &mut evicted);
            }
        }
        self.feed_all(evicted);
    }

    /// A long sequential stream has read these blocks: the ones it alone has used leave the
    /// cache now (see `ArcState::let_go_read_once`), so that a scan recycles the memory of the
    /// blocks behind it for the blocks ahead of it instead of filling the whole ARC with data
    /// read once. PostgreSQL's ring buffer for large sequential scans, for the same reasons:
    /// the hot set stays, and a scan does not take `arc_max` of fresh memory (which cost this
    /// VM 1.2-1.5 CPU-s per GiB read, bench/notes/engine-store.md "The ARC's first fill").
    /// Returns how many were let go.
    pub fn let_go_read_once(&self, keys: &[BlockKey]) -> usize {
        let mut out = Vec::new();
        let mut n = 0;
        for batch in keys.chunks(BATCH_ENTRIES_MAX) {
            let mut state = self.state.lock();
            for key in batch {
                n += usize::from(state.let_go_read_once(key, &mut out));
            }
        }
        self.feed_all(out);
        n
    }

    /// Forgets a block (resident or ghost). Returns whether it was resident.
    pub fn remove(&self, key: &BlockKey) -> bool {
        self.state.lock().remove(key)
    }

    /// Changes `arc_max_bytes` at run time; shrinking below the current size evicts now.
    pub fn set_max_bytes(&self, arc_max_bytes: u64) {
        let mut evicted = Vec::new();
        self.state.lock().set_max_bytes(arc_max_bytes, &mut evicted);
        self.feed_all(evicted);
    }

    /// Changes `arc_min_bytes` at run time (capped at `arc_max_bytes`).
    pub fn set_min_bytes(&self, arc_min_bytes: u64) {
        let mut evicted = Vec::new();
        self.state.lock().set_min_bytes(arc_min_bytes, &mut evicted);
        self.feed_all(evicted);
    }

    /// Memory pressure: lowers the target `c` by `bytes` (not below `arc_min_bytes`) and
    /// evicts. `c` grows back as the cache refills, so call it while pressure lasts.
    pub fn shrink_target(&self, bytes: u64) {
        let mut evicted = Vec::new();
        self.state.lock().shrink_target(bytes, &mut evicted);
        self.feed_all(evicted);
    }

    pub fn stats(&self) -> ArcStats {
        let mut stats = self.state.lock().stats();
        stats.feed_dropped = self.feed.dropped();
        stats.feed_skipped_held = self.feed.skipped_held();
        stats.feed_bytes = self.feed.bytes();
        stats
    }

    /// Up to `max_entries` keys for warm-up: MFU first, then MRU, most recent first.
    pub fn hot_set(&self, max_entries: usize) -> Vec<BlockKey> {
        self.state.lock().hot_set(max_entries)
    }

    /// The eviction feed the L2ARC writer drains.
    pub fn feed(&self) -> Arc<EvictionFeed> {
        Arc::clone(&self.feed)
    }

    /// Verifies the internal invariants (list links, byte totals, `c`/`p` bounds).
    /// Walks every entry: for tests and debugging, not for hot paths.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.state.lock().check_invariants()
    }

    /// Called after the lock is released: blocks not fed are freed here, outside it.
    fn feed_all(&self, evicted: Vec<FeedItem>) {
        if self.is_feeding() {
            self.feed.push_many(evicted);
        }
    }
}
