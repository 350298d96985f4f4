//! ARC counters and the snapshot handed to callers (the `arcstats` of fardisk).

/// Event counters, kept under the ARC lock (every operation takes it anyway).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counters {
    pub(crate) demand_hits: u64,
    pub(crate) demand_misses: u64,
    pub(crate) prefetch_hits: u64,
    pub(crate) prefetch_misses: u64,
    pub(crate) demand_hits_on_prefetched: u64,
    pub(crate) mru_ghost_hits: u64,
    pub(crate) mfu_ghost_hits: u64,
    pub(crate) inserts: u64,
    pub(crate) inserts_rejected: u64,
    pub(crate) evictions: u64,
    pub(crate) evicted_bytes: u64,
    pub(crate) stale_dropped: u64,
    pub(crate) stream_dropped: u64,
}

/// A point-in-time view of the ARC. Byte figures are charges (value length plus per-entry
/// overhead), the same unit as `c`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ArcStats {
    pub hits: u64,
    pub misses: u64,
    pub demand_hits: u64,
    pub demand_misses: u64,
    pub prefetch_hits: u64,
    pub prefetch_misses: u64,
    /// Demand hits on blocks that were brought in by prefetch (prefetch that paid off).
    pub demand_hits_on_prefetched: u64,
    pub mru_ghost_hits: u64,
    pub mfu_ghost_hits: u64,
    /// MRU side, including prefetched blocks not yet read.
    pub mru_bytes: u64,
    /// Part of `mru_bytes` held by prefetched blocks not yet read on demand.
    pub mru_prefetch_bytes: u64,
    pub mfu_bytes: u64,
    pub mru_ghost_bytes: u64,
    pub mfu_ghost_bytes: u64,
    pub p_bytes: u64,
    pub c_bytes: u64,
    pub c_min_bytes: u64,
    pub c_max_bytes: u64,
    pub size_bytes: u64,
    pub entries: u64,
    pub ghost_entries: u64,
    pub inserts: u64,
    /// Inserts refused because the value alone exceeds the size target.
    pub inserts_rejected: u64,
    pub evictions: u64,
    pub evicted_bytes: u64,
    /// Entries dropped because a read's checksum named other bytes at their key: a stale copy
    /// that was never returned (expected to stay 0).
    pub stale_dropped: u64,
    /// Blocks a long sequential stream read for the first time, let go once read
    /// ([`crate::AdaptiveCache::let_go_read_once`]): their memory holds the stream's next blocks.
    pub stream_dropped: u64,
    /// Evicted entries the L2ARC feed had to drop because its writer fell behind.
    pub feed_dropped: u64,
    /// Evicted entries the L2ARC feed did not queue because the L2ARC held them already.
    pub feed_skipped_held: u64,
    pub feed_bytes: u64,
}
