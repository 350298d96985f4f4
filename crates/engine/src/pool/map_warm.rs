//! At import, the interior pages of every volume's block map come into the page cache in the
//! background: one level-1 page per 256 MiB of volume (28 KiB each with its leaf hints, about
//! 112 KiB per GiB) and the few above them. A cold random read then asks the store for its leaf
//! page and, beside it, for the range its leaf's hint names (cold_read.rs): one round trip,
//! where the first read into each 256 MiB asked for the page above its leaf first, then the
//! leaf, then the block (issue #21; the engine test `cold_random_read`).
//!
//! Bounded: at most an eighth of `map_cache_bytes` (16 MiB of the default 128 MiB, the
//! interior pages of about 146 GiB of volume), volumes in id order until it is spent; the GETs
//! go `read_concurrency` at a time. Best effort: a page that does not come is read by the
//! lookup that needs it, as before.

use super::Inner;
use crate::blockmap::{FANOUT, HINTED_PAGE_BYTES};
use crate::dirty::BLOCK_BYTES;
use std::sync::Arc;

/// Loads the interior map pages of the volumes, within the bound above. Holds the pool's
/// `Inner`, not a `Pool` handle, so that dropping the last handle still aborts it.
pub(super) async fn warm_map_interior(inner: Arc<Inner>) {
    let (pages_max, concurrency) = {
        let c = inner.config.read();
        ((c.map_cache_bytes / 8 / HINTED_PAGE_BYTES) as u64, c.read_concurrency)
    };
    let trees: Vec<_> =
        inner.meta.read().volumes.values().map(|v| (v.tree, v.size_bytes)).collect();
    let slots_per_parent = (FANOUT * FANOUT) as u64;
    let mut pages_left = pages_max;
    for (tree, size_bytes) in trees {
        let parents = size_bytes.div_ceil(BLOCK_BYTES).div_ceil(slots_per_parent);
        let n = parents.min(pages_left);
        if n == 0 {
            break;
        }
        pages_left -= n;
        let generation = inner.cache.generation();
        let loaded =
            tree.load_interior_pages(&inner.cache, &*inner, 0..n, generation, concurrency).await;
        if let Err(e) = loaded {
            tracing::debug!(error = %e, "interior map pages not loaded at import");
        }
    }
}
