//! The space auditor: walks every map (volumes, snapshots, the space table) and checks that the
//! space table's live bytes per segment are exactly what those maps reference, that nothing
//! referenced lives in a segment marked freed, and that every referenced segment exists in the
//! store. Subtrees in the root's free queue (frees.rs) count as referenced for what in them is
//! born after their entry's hold: the queue still owns that space; so do the pages and blocks of a
//! tree being destroyed at and above its cursor (destroying.rs), which its walk has not reached.
//! Slow (a full walk and a
//! listing); for tests and the simulation, after a sync.

use super::Inner;
use super::Pool;
use crate::blkptr::BlockPtr;
use crate::blockmap::{decode_page, BlockSource, TreeRef, TreeWalk, FANOUT};
use crate::error::{Error, Result};
use crate::frees::FreeEntry;
use crate::segment::segment_key;
use crate::space::SegmentSpace;
use std::collections::{BTreeMap, HashSet};

/// What an audit saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpaceAudit {
    pub trees: usize,
    pub referenced_segments: usize,
    pub referenced_bytes: u64,
    pub live_segments: usize,
}

/// Mismatches listed in an audit failure at most.
const MISMATCHES_LISTED_MAX: usize = 8;

impl Pool {
    /// Runs the audit; `Err(Error::Corrupt ..)` describes the first mismatches.
    pub async fn audit_space(&self) -> Result<SpaceAudit> {
        let inner = &self.inner;
        let _guard = inner.txg.sync_lock.lock().await;
        let (trees, space, carry, queue) = {
            let meta = inner.meta.read();
            let mut trees: Vec<(TreeRef, u64)> =
                meta.volumes.values().map(|v| (v.tree, 0)).collect();
            trees.extend(meta.snapshots.values().map(|s| (s.tree, 0)));
            trees.extend(meta.root.destroying.iter().map(|d| (d.tree, d.cursor_block)));
            (trees, meta.root.space, meta.root.space_carry.clone(), meta.root.free_queue.clone())
        };
        let mut referenced = Referenced::default();
        for (t, from_block) in &trees {
            let walk =
                TreeWalk::walk_range(t, &inner.cache, &**inner, *from_block, u64::MAX).await?;
            walk.pages.iter().for_each(|(_, _, p)| referenced.count(p));
            for (_, slot) in &walk.leaf_slots {
                referenced.count(&BlockPtr::from_bytes(slot)?);
            }
        }
        for e in &queue {
            count_queued(inner, e, &mut referenced).await?;
        }
        let space_walk = TreeWalk::walk(&space, &inner.cache, &**inner).await?;
        space_walk.pages.iter().for_each(|(_, _, p)| referenced.count(p));
        let mut table: BTreeMap<u64, SegmentSpace> = BTreeMap::new();
        for (seg, slot) in &space_walk.leaf_slots {
            table.insert(*seg, SegmentSpace::from_slot(slot)?);
        }
        let expected = expected_live(&table, &carry);
        let mut problems = compare(&table, &expected, &referenced.bytes);
        let stored: HashSet<String> =
            inner.store.list("segments/").await?.into_iter().map(|(k, _)| k).collect();
        for seg in referenced.bytes.keys() {
            if !stored.contains(&segment_key(*seg)) {
                problems
                    .push(format!("segment {seg:016x} is referenced but missing from the store"));
            }
        }
        if !problems.is_empty() {
            let n = problems.len();
            problems.truncate(MISMATCHES_LISTED_MAX);
            return Err(Error::corrupt(
                "space audit",
                format!("{n} problem(s): {}", problems.join("; ")),
            ));
        }
        Ok(SpaceAudit {
            trees: trees.len() + 1,
            referenced_segments: referenced.bytes.len(),
            referenced_bytes: referenced.bytes.values().sum(),
            live_segments: expected.len(),
        })
    }
}

/// Physical bytes the maps reference per segment, each block counted once (snapshots and
/// clones share blocks with their volume).
#[derive(Default)]
struct Referenced {
    seen: HashSet<(u64, u32)>,
    bytes: BTreeMap<u64, u64>,
}

impl Referenced {
    fn count(&mut self, p: &BlockPtr) {
        if !p.is_hole() && self.seen.insert((p.segment_id, p.offset_bytes)) {
            *self.bytes.entry(p.segment_id).or_default() += p.physical_bytes as u64;
        }
    }
}

/// What freeing queue entry `e` will free, as `work_down` (txg/frees.rs) walks it: every page
/// and block below it born after its hold.
async fn count_queued(inner: &Inner, e: &FreeEntry, referenced: &mut Referenced) -> Result<()> {
    let mut stack = vec![*e];
    while let Some(e) = stack.pop() {
        referenced.count(&e.ptr);
        let bytes = inner.read_block(&e.ptr).await?;
        for (pos, s) in decode_page(&bytes, e.page_tag, e.level, e.index)?.iter().enumerate() {
            let child = BlockPtr::from_bytes(s)?;
            if child.is_hole() || child.birth_txg <= e.after_txg {
                continue;
            }
            if e.level == 0 {
                referenced.count(&child);
            } else {
                let index = e.index * FANOUT as u64 + pos as u64;
                stack.push(FreeEntry { level: e.level - 1, index, ptr: child, ..e });
            }
        }
    }
    Ok(())
}

/// Live bytes per segment as the space table says, with the root's carried page bytes.
fn expected_live(table: &BTreeMap<u64, SegmentSpace>, carry: &[(u64, i64)]) -> BTreeMap<u64, i64> {
    let mut expected: BTreeMap<u64, i64> = BTreeMap::new();
    for (seg, s) in table {
        if s.freed_txg == 0 && !s.is_empty_slot() {
            expected.insert(*seg, s.live_bytes as i64);
        }
    }
    for (seg, d) in carry {
        *expected.entry(*seg).or_default() += d;
    }
    expected
}

/// Every segment whose table entry and references disagree, as one line each.
fn compare(
    table: &BTreeMap<u64, SegmentSpace>,
    expected: &BTreeMap<u64, i64>,
    referenced: &BTreeMap<u64, u64>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (seg, want) in expected {
        let got = referenced.get(seg).copied().unwrap_or(0) as i64;
        if got != *want {
            problems.push(format!(
                "segment {seg:016x}: table says {want} live bytes, the maps reference {got}"
            ));
        }
    }
    for (seg, got) in referenced {
        if !expected.contains_key(seg) {
            let state = match table.get(seg) {
                Some(s) if s.freed_txg != 0 => format!("freed in txg {}", s.freed_txg),
                _ => "not in the space table".to_string(),
            };
            problems.push(format!(
                "segment {seg:016x}: {got} bytes referenced but the segment is {state}"
            ));
        }
    }
    problems
}
