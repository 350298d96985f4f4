//! Compaction: segments whose live bytes fell below `compact_live_percent` are read, and the
//! blocks and map pages the current maps still reference in them are queued for the next txg to
//! rewrite (`PendingMeta::relocations`, `page_moves`). The segment then holds nothing live, is
//! freed by that txg and deleted like any other (delete.rs). A block a snapshot or clone shares
//! stays where it is: moving it would mean rewriting every map that references it.

use super::delete;
use crate::blkptr::BlockPtr;
use crate::codec::checksum64;
use crate::error::{Error, Result};
use crate::pool::txg::{snapshot_space, PageMove, Relocation};
use crate::pool::Inner;
use crate::segment::{parse_segment, segment_key, BlockOwner};
use crate::space::{SegmentSpace, SPACE_TREE_ID};
use bytes::Bytes;
use std::sync::Arc;

/// Picks sparse segments and queues their live blocks and pages to move in the next txg.
pub(crate) async fn compact_step(inner: &Arc<Inner>) -> Result<usize> {
    let (pct, budget) = {
        let c = inner.config.read();
        (c.compact_live_percent, c.compact_bytes_per_txg)
    };
    let newest = inner.meta.read().root.txg;
    let mut candidates: Vec<(u64, SegmentSpace)> = delete::catalog(inner, false)
        .await?
        .into_iter()
        .filter(|(_, s)| s.live_bytes * 100 < s.written_bytes * pct && s.created_txg < newest)
        .collect();
    candidates.sort_by_key(|(_, s)| s.live_bytes * 1000 / s.written_bytes.max(1));
    let mut moved_bytes = 0u64;
    let mut count = 0;
    for (seg, s) in candidates {
        if moved_bytes + s.live_bytes > budget && count > 0 {
            break;
        }
        moved_bytes += queue_live_blocks(inner, seg).await?;
        count += 1;
        inner.counters.add_compacted();
    }
    if count > 0 {
        inner.txg.kick();
    }
    Ok(count)
}

/// Reads a segment and queues every block the current maps still reference.
async fn queue_live_blocks(inner: &Arc<Inner>, seg: u64) -> Result<u64> {
    let bytes = inner.store.get(&segment_key(seg)).await?;
    let index = parse_segment(&bytes, inner.guid, seg)?;
    // A block a snapshot or clone shares stays where it is (snapshot_space.rs).
    let holds = {
        let meta = inner.meta.read();
        snapshot_space::holds(&meta.volumes, &meta.snapshots, &meta.root.destroying)
    };
    let held = |tree_id: u32, p: &BlockPtr| {
        tree_id != SPACE_TREE_ID && p.birth_txg <= holds.get(&tree_id).copied().unwrap_or(0)
    };
    let mut moved = 0u64;
    for e in index.entries {
        moved += match e.owner {
            BlockOwner::Data { tree_id, block } => {
                let found = LiveBlock { seg, tree_id, ptr: e.ptr, held: held(tree_id, &e.ptr) };
                queue_block(inner, &bytes, found, block).await?
            }
            BlockOwner::Page { tree_id, level, index } => {
                let found = LiveBlock { seg, tree_id, ptr: e.ptr, held: held(tree_id, &e.ptr) };
                queue_page(inner, found, level, index).await?
            }
        };
    }
    Ok(moved)
}

/// A block or page found in segment `seg`, owned by tree `tree_id`.
struct LiveBlock {
    seg: u64,
    tree_id: u32,
    ptr: BlockPtr,
    /// A snapshot or clone shares it: it stays.
    held: bool,
}

/// Queues data block `block` of the segment (bytes `segment`) to move if its volume's map still
/// points at it. Returns the bytes queued.
async fn queue_block(
    inner: &Arc<Inner>,
    segment: &[u8],
    found: LiveBlock,
    block: u64,
) -> Result<u64> {
    let LiveBlock { seg, tree_id, ptr, held } = found;
    let Some(tree) = inner.meta.read().volumes.get(&tree_id).map(|v| v.tree) else {
        return Ok(0);
    };
    let gen = inner.cache.generation();
    let current = BlockPtr::from_bytes(&tree.lookup(&inner.cache, &**inner, block, gen).await?)?;
    if current != ptr || held {
        return Ok(0);
    }
    let r = ptr.range();
    // A copy: a slice would keep the whole segment (16 MiB) in memory until the next txg for
    // each of its live blocks, and compaction reads the sparsest ones.
    let physical = Bytes::copy_from_slice(&segment[r.start as usize..r.end as usize]);
    let found = checksum64(&physical);
    if found != ptr.checksum {
        return Err(Error::Checksum {
            what: format!("segment {seg:016x} during compaction"),
            expected: ptr.checksum,
            found,
        });
    }
    let queued = physical.len() as u64;
    inner.txg.pending.lock().relocations.push(Relocation { tree_id, block, old: ptr, physical });
    Ok(queued)
}

/// Queues map page (`level`, `index`) to be written anew if its tree still has it there.
/// Returns the bytes queued.
async fn queue_page(inner: &Arc<Inner>, found: LiveBlock, level: u8, index: u64) -> Result<u64> {
    let LiveBlock { tree_id, ptr, held, .. } = found;
    let tree = if tree_id == SPACE_TREE_ID {
        inner.meta.read().root.space
    } else {
        match inner.meta.read().volumes.get(&tree_id).map(|v| v.tree) {
            Some(t) => t,
            None => return Ok(0),
        }
    };
    if tree.page_location(&inner.cache, &**inner, level, index).await? != ptr || held {
        return Ok(0);
    }
    inner.txg.pending.lock().page_moves.push(PageMove { tree_id, level, index, old: ptr });
    Ok(ptr.physical_bytes as u64)
}
