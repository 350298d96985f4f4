//! Transaction groups: the commit protocol that turns the syncing txg into segments, block-map
//! and space-table pages, and a published root.

mod commit;
mod retry;
pub(super) mod snapshot_space;

pub(super) use commit::{build_and_publish, publish_export};
