//! ARC configuration.

/// Charged per resident entry on top of its value length, so that `arc_max_bytes` bounds the
/// real memory of many small entries too (the node, the index slot and the `Bytes` header are
/// about this size on a 64-bit target).
pub const ENTRY_OVERHEAD_BYTES_DEFAULT: u64 = 128;

/// Ghost entries allowed per byte of `arc_max_bytes`: one per 2 KiB (a ghost costs about
/// 100 bytes), so ghosts add at most ~5 % of `arc_max_bytes`.
const GHOST_BYTES_PER_ENTRY: u64 = 2048;
const GHOST_ENTRIES_MIN: u64 = 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArcConfig {
    /// Floor of the size target `c`; shrinking never goes below it.
    pub arc_min_bytes: u64,
    /// Ceiling of the size target `c`; resident charge never exceeds it.
    pub arc_max_bytes: u64,
    /// Charge added to every resident entry (see [`ENTRY_OVERHEAD_BYTES_DEFAULT`]).
    pub entry_overhead_bytes: u64,
    /// Bound on keys remembered by the two ghost lists together.
    pub ghost_entries_max: u64,
    /// Bound on evicted entries waiting in the L2ARC feed (oldest dropped beyond it).
    pub feed_entries_max: usize,
    /// Bound on evicted bytes waiting in the L2ARC feed (oldest dropped beyond it).
    pub feed_bytes_max: u64,
    /// Whether prefetched blocks that were never read on demand go to the L2ARC feed. Off by
    /// default, as OpenZFS's `l2arc_noprefetch`: a scan must not flush the L2ARC either.
    pub feed_prefetched: bool,
}

impl ArcConfig {
    /// A configuration with derived defaults for everything but the two size bounds.
    pub fn new(arc_min_bytes: u64, arc_max_bytes: u64) -> Self {
        Self {
            arc_min_bytes: arc_min_bytes.min(arc_max_bytes),
            arc_max_bytes,
            entry_overhead_bytes: ENTRY_OVERHEAD_BYTES_DEFAULT,
            ghost_entries_max: (arc_max_bytes / GHOST_BYTES_PER_ENTRY).max(GHOST_ENTRIES_MIN),
            feed_entries_max: 4096,
            feed_bytes_max: (arc_max_bytes / 16).clamp(1 << 20, 64 << 20),
            feed_prefetched: false,
        }
    }
}
