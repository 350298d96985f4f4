//! The space table's side of a commit: every segment's live bytes change by what the txg wrote
//! and freed, a segment left with none is marked freed in this txg (reclaim deletes it once no
//! retained root can reference it), and the table's own dirty pages go last into the meta
//! segment, their bytes carried into the next txg (`space_carry`: the table cannot count the
//! pages it is being written into).

use super::retry::CommitReads;
use super::{FreedSegment, PendingMeta};
use crate::blkptr::BlockPtr;
use crate::blockmap::TreeRef;
use crate::dirty::BLOCK_BYTES;
use crate::error::Result;
use crate::pool::Inner;
use crate::root::{Root, VolumeEntry};
use crate::segment::SegmentBuilder;
use crate::space::{SegmentSpace, SpaceTotals};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Space bookkeeping of one sync: live bytes each segment loses (or gains).
#[derive(Default)]
pub(super) struct SpaceDelta {
    /// Change of live bytes per segment.
    live: HashMap<u64, i64>,
}

impl SpaceDelta {
    pub fn free(&mut self, p: &BlockPtr) {
        if !p.is_hole() {
            *self.live.entry(p.segment_id).or_default() -= p.physical_bytes as i64;
        }
    }

    /// A pointer a volume's live map dropped: garbage unless a snapshot or clone still sees it
    /// (born at or before the volume's hold txg, snapshot_space.rs).
    pub fn free_unless_held(&mut self, p: &BlockPtr, hold_txg: u64) {
        if p.birth_txg > hold_txg {
            self.free(p);
        }
    }
}

/// Bytes of blocks in the segment being built (its header aside).
pub(super) fn builder_live_bytes(b: &SegmentBuilder) -> u64 {
    (b.len_bytes() - crate::segment::SEGMENT_HEADER_BYTES) as u64
}

/// Applies this txg's space changes to the space table, writes its dirty pages into the meta
/// segment `builder` (`written`: bytes written into each segment of this txg so far), and
/// assembles the root. Returns the root and the segments that became free.
pub(super) async fn update_space(
    inner: &Arc<Inner>,
    txg: u64,
    builder: &mut SegmentBuilder,
    written: &BTreeMap<u64, u64>,
    mut delta: SpaceDelta,
    pending: &PendingMeta,
    volumes: &BTreeMap<u32, VolumeEntry>,
) -> Result<(Root, Vec<FreedSegment>)> {
    let mut root = inner.meta.read().root.clone();
    let extra_written = delta.fold_carry(std::mem::take(&mut root.space_carry));
    let mut table = Table {
        inner,
        txg,
        space: root.space,
        totals: root.totals,
        generation: inner.cache.generation(),
    };
    table.add_written(written).await?;
    let freed = table.apply(delta, &extra_written).await?;
    for seg in &pending.deleted_segments {
        table.space.update(&inner.cache, &CommitReads(inner), *seg, [0u8; 40]).await?;
    }
    let carry = table.write_pages(builder, written).await?;
    table.totals.logical_bytes = volumes.values().map(|v| v.allocated_blocks * BLOCK_BYTES).sum();
    root.txg = txg;
    root.put_id = inner.rng.next_u128();
    root.space = table.space;
    root.totals = table.totals;
    root.space_carry = carry;
    root.volumes = volumes.values().cloned().collect();
    Ok((root, freed))
}

impl SpaceDelta {
    /// Folds the previous root's carried page bytes into this txg's changes. Returns the bytes
    /// those pages added to their segment (written, not only live), by segment.
    fn fold_carry(&mut self, carry: Vec<(u64, i64)>) -> HashMap<u64, u64> {
        let mut extra_written: HashMap<u64, u64> = HashMap::new();
        for (seg, d) in carry {
            *self.live.entry(seg).or_default() += d;
            if d > 0 {
                *extra_written.entry(seg).or_default() += d as u64;
            }
        }
        extra_written
    }
}

/// The space table while one commit updates it.
struct Table<'a> {
    inner: &'a Arc<Inner>,
    txg: u64,
    space: TreeRef,
    totals: SpaceTotals,
    /// The page cache generation the commit's lookups read at.
    generation: u64,
}

impl Table<'_> {
    /// A slot for every segment this txg wrote, all of it live.
    async fn add_written(&mut self, written: &BTreeMap<u64, u64>) -> Result<()> {
        let inner = self.inner;
        for (seg, w) in written {
            let s = SegmentSpace {
                written_bytes: *w,
                live_bytes: *w,
                created_txg: self.txg,
                freed_txg: 0,
            };
            self.space.update(&inner.cache, &CommitReads(inner), *seg, s.to_slot()).await?;
            self.totals.physical_bytes += w;
            self.totals.live_bytes += w;
        }
        Ok(())
    }

    /// Applies the live-byte changes, in segment order; a segment left with no live bytes is
    /// marked freed in this txg and returned.
    async fn apply(
        &mut self,
        delta: SpaceDelta,
        extra_written: &HashMap<u64, u64>,
    ) -> Result<Vec<FreedSegment>> {
        let (inner, txg) = (self.inner, self.txg);
        let mut freed = Vec::new();
        let mut segs: Vec<(u64, i64)> = delta.live.into_iter().collect();
        segs.sort_unstable();
        for (seg, d) in segs {
            let reads = CommitReads(inner);
            let slot = self.space.lookup(&inner.cache, &reads, seg, self.generation).await?;
            let mut s = SegmentSpace::from_slot(&slot)?;
            if s.is_empty_slot() {
                continue; // Already deleted (a late carry).
            }
            let totals = &mut self.totals;
            let extra = extra_written.get(&seg).copied().unwrap_or(0);
            s.written_bytes += extra;
            totals.physical_bytes += extra;
            let live = (s.live_bytes as i64 + d).max(0) as u64;
            totals.live_bytes =
                (totals.live_bytes as i64 + live as i64 - s.live_bytes as i64).max(0) as u64;
            s.live_bytes = live;
            if live == 0 && s.freed_txg == 0 {
                s.freed_txg = txg;
                totals.physical_bytes = totals.physical_bytes.saturating_sub(s.written_bytes);
                freed.push(FreedSegment { segment_id: seg, freed_txg: txg });
            }
            self.space.update(&inner.cache, &CommitReads(inner), seg, s.to_slot()).await?;
        }
        Ok(freed)
    }

    /// Writes the table's dirty pages into the meta segment. Returns the carry for the next
    /// txg: the pages' old copies lose their bytes, and the meta segment gains the new ones.
    async fn write_pages(
        &mut self,
        builder: &mut SegmentBuilder,
        written: &BTreeMap<u64, u64>,
    ) -> Result<Vec<(u64, i64)>> {
        let inner = self.inner;
        let algo = inner.config.read().compression;
        let before = builder.block_count();
        let mut carry: Vec<(u64, i64)> = Vec::new();
        let reads = CommitReads(inner);
        for (_, _, old) in
            self.space.write_dirty(&inner.cache, &reads, builder, self.txg, algo).await?
        {
            carry.push((old.segment_id, -(old.physical_bytes as i64)));
        }
        let added =
            builder_live_bytes(builder) - written.get(&builder.segment_id()).copied().unwrap_or(0);
        if before != builder.block_count() {
            carry.push((builder.segment_id(), added as i64));
        }
        Ok(carry)
    }
}
