//! The syncer's side of the free queue (crate::frees): each txg reads at most
//! `free_pages_per_txg_max` pages of the queued subtrees and frees what in them was born after
//! the entry's hold, in the same root as the queue's new state, so a crash resumes where the
//! last published root left the queue. Subtrees are walked depth first (the newest entry first),
//! so the queue holds at most 255 entries per level of the subtree being freed beside what trims,
//! rollbacks and destroys queued. Design note docs/design/0006-free-queue.md.

use super::retry::CommitReads;
use super::space::SpaceDelta;
use crate::blkptr::BlockPtr;
use crate::blockmap::{decode_page, BlockSource, FANOUT};
use crate::error::Result;
use crate::frees::FreeEntry;
use crate::pool::Inner;
use crate::root::VolumeEntry;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The bounds of one txg's freeing.
#[derive(Debug, Clone, Copy)]
pub(super) struct FreeBudget {
    pub pages_max: u64,
    pub entries_max: usize,
}

/// Queues subtree (`level`, `index`) at `ptr` of a tree with pages tagged `page_tag` for freeing,
/// unless a snapshot or origin holds all of it (born at or before `after_txg`).
pub(super) fn queue_subtree(queue: &mut Vec<FreeEntry>, entry: FreeEntry) {
    if !entry.ptr.is_hole() && entry.ptr.birth_txg > entry.after_txg {
        queue.push(entry);
    }
}

/// Frees queued subtrees until `budget.pages_max` pages were read and the queue is at most
/// `budget.entries_max` long (or empty). Live bytes go into `delta`; leaves freed for a volume
/// leave its `allocated_blocks`. Returns the pages read.
///
/// Leaf pages are read `read_concurrency` at a time: against a far store one page per round trip
/// would make freeing a large volume take hours of commits. Only leaf pages share a round trip
/// because they push nothing: the queue then holds, and the txg frees, exactly what reading them
/// one by one would, so the bounds above (and a replayed simulation) do not change. A page above
/// the leaves is read alone, and its children go on top (depth first).
pub(super) async fn work_down(
    inner: &Arc<Inner>,
    queue: &mut Vec<FreeEntry>,
    delta: &mut SpaceDelta,
    volumes: &mut BTreeMap<u32, VolumeEntry>,
    budget: FreeBudget,
) -> Result<u64> {
    let concurrency = inner.config.read().read_concurrency.max(1);
    let mut pages = 0u64;
    loop {
        let batch = take_batch(queue, pages, budget, concurrency);
        if batch.is_empty() {
            break;
        }
        let reads =
            batch.iter().map(|e| async move { CommitReads(inner).read_block(&e.ptr).await });
        let read = futures::future::try_join_all(reads).await?;
        for (e, bytes) in batch.iter().zip(read) {
            free_page(e, &bytes, queue, delta, volumes)?;
            pages += 1;
        }
    }
    Ok(pages)
}

/// Pops what the next round trip reads: the top entry, and below it more leaf pages (up to
/// `concurrency` in all) as long as reading them one by one would not have stopped first.
fn take_batch(
    queue: &mut Vec<FreeEntry>,
    pages: u64,
    budget: FreeBudget,
    concurrency: usize,
) -> Vec<FreeEntry> {
    let mut batch = Vec::new();
    while let Some(&e) = queue.last() {
        let read = pages + batch.len() as u64;
        let done = read >= budget.pages_max && queue.len() <= budget.entries_max;
        if done || batch.len() >= concurrency || (!batch.is_empty() && e.level != 0) {
            break;
        }
        queue.pop();
        batch.push(e);
        if e.level != 0 {
            break; // Its children come next, before anything below it in the queue.
        }
    }
    batch
}

/// Frees page `e` (read as `bytes`): leaves' blocks into `delta`, children above the leaves
/// onto the queue.
fn free_page(
    e: &FreeEntry,
    bytes: &[u8],
    queue: &mut Vec<FreeEntry>,
    delta: &mut SpaceDelta,
    volumes: &mut BTreeMap<u32, VolumeEntry>,
) -> Result<()> {
    let slots = decode_page(bytes, e.page_tag, e.level, e.index)?;
    delta.free(&e.ptr);
    let mut leaves_freed = 0u64;
    for (pos, s) in slots.iter().enumerate() {
        let child = BlockPtr::from_bytes(s)?;
        if child.is_hole() || child.birth_txg <= e.after_txg {
            continue; // Nothing there, or held by a snapshot or origin with all below it.
        }
        if e.level == 0 {
            delta.free(&child);
            leaves_freed += 1;
        } else {
            let index = e.index * FANOUT as u64 + pos as u64;
            queue.push(FreeEntry { level: e.level - 1, index, ptr: child, ..*e });
        }
    }
    if let Some(v) = volumes.get_mut(&e.volume_id) {
        v.allocated_blocks = v.allocated_blocks.saturating_sub(leaves_freed);
    }
    Ok(())
}
