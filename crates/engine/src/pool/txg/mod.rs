//! Transaction groups: the commit protocol that turns the syncing txg into segments, block-map
//! and space-table pages, and a published root.

mod commit;
mod retry;
pub(super) mod snapshot_space;

pub(super) use commit::{build_and_publish, publish_export};

/// A segment that txg `freed_txg` left without live bytes: reclaim deletes it once no retained
/// root can reference it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FreedSegment {
    pub segment_id: u64,
    pub freed_txg: u64,
}

/// What a published txg hands to reclaim.
#[derive(Debug)]
pub(crate) struct Published {
    /// The root's time (wall clock, ms).
    pub time_ms: u64,
    pub freed: Vec<FreedSegment>,
}
