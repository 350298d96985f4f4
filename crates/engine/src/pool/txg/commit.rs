//! The txg sync: freeze the open txg, pack its blocks into segments, update the block maps and the
//! space table copy-on-write, upload every segment, and only then publish the root (rule 1). A
//! crash at any instant leaves the previous root intact; uploads and the publish are retried until
//! they succeed (the pool shows SUSPENDED meanwhile) or the pool is fenced.

use super::retry::CommitReads;
use super::{snapshot_space, FreedSegment, Published};
use super::{PageMove, PendingMeta, Relocation};
use crate::blkptr::BlockPtr;
use crate::blockmap::TreeWalk;
use crate::dirty::{Dirty, DirtySet, BLOCK_BYTES};
use crate::error::{Error, Result};
use crate::fence::publish_root;
use crate::objstore::{PutMode, StoreError, StoreErrorKind};
use crate::pool::Inner;
use crate::root::Root;
use crate::segment::{segment_id, segment_key, BlockOwner, SegmentBuilder};
use crate::space::{SegmentSpace, SPACE_TREE_ID};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// Backoff ceiling while the store is unreachable during a sync.
const SUSPENDED_RETRY_MS_MAX: u64 = 5_000;
/// Space bookkeeping of one sync.
#[derive(Default)]
struct SpaceDelta {
    live: HashMap<u64, i64>,
}

impl SpaceDelta {
    fn free(&mut self, p: &BlockPtr) {
        if !p.is_hole() {
            *self.live.entry(p.segment_id).or_default() -= p.physical_bytes as i64;
        }
    }

    /// A pointer a volume's live map dropped: garbage unless a snapshot or clone still sees it
    /// (born at or before the volume's hold txg, snapshot_space.rs).
    fn free_unless_held(&mut self, p: &BlockPtr, hold_txg: u64) {
        if p.birth_txg > hold_txg {
            self.free(p);
        }
    }
}

/// One full data segment, packed off the async workers.
struct PackedSegment {
    id: u64,
    bytes: Vec<u8>,
    written_bytes: u64,
    updates: Vec<(u32, u64, BlockPtr)>,
}

/// Compresses `blocks` into one segment (CPU work: runs on a blocking thread, see `Env::blocking`).
fn pack_into(
    mut builder: SegmentBuilder,
    blocks: Vec<((u32, u64), Bytes)>,
    algo: crate::compress::Compression,
) -> (SegmentBuilder, Vec<(u32, u64, BlockPtr)>) {
    let mut updates = Vec::with_capacity(blocks.len());
    for ((vol, block), b) in blocks {
        updates.push((vol, block, builder.add(BlockOwner::Data { tree_id: vol, block }, &b, algo)));
    }
    (builder, updates)
}

/// Puts the data blocks a txg wrote into segment `id` in the block cache, as ZFS keeps written
/// buffers in the ARC: a database reads back what it just wrote, and without this every such read
/// would cross to the store once the dirty data is freed. Each block is copied out of the segment
/// buffer (a slice would keep the whole segment alive for as long as any block stays cached). The
/// keys are the blocks' new locations, which nothing references before the root is published.
fn cache_written(inner: &Inner, id: u64, segment: &[u8], updates: &[(u32, u64, BlockPtr)]) {
    if inner.blocks.holds_nothing() {
        return;
    }
    for (_, _, p) in updates.iter().filter(|(_, _, p)| !p.is_hole() && p.segment_id == id) {
        let range = p.offset_bytes as usize..p.offset_bytes as usize + p.physical_bytes as usize;
        if let Some(physical) = segment.get(range) {
            inner.blocks.insert(p, Bytes::copy_from_slice(physical), false);
        }
    }
}

fn finish_segment(b: SegmentBuilder, updates: Vec<(u32, u64, BlockPtr)>) -> PackedSegment {
    let id = b.segment_id();
    let (bytes, entries) = b.finish();
    PackedSegment {
        id,
        bytes,
        written_bytes: entries.iter().map(|e| e.ptr.physical_bytes as u64).sum(),
        updates,
    }
}

/// Commits txg `txg` (its dirty blocks `set` and queued work `pending`) and publishes its root.
/// Returns what reclaim needs to know of it.
pub(crate) async fn build_and_publish(
    inner: &Arc<Inner>,
    txg: u64,
    set: &DirtySet,
    pending: PendingMeta,
) -> Result<Published> {
    let cfg = inner.config.read().clone();
    let counter0 = inner.meta.read().root.next_segment_counter;
    let (guid, epoch, algo) = (inner.guid, inner.epoch, cfg.compression);
    let mut data: Vec<((u32, u64), Bytes)> = Vec::with_capacity(set.blocks.len());
    let mut updates: Vec<(u32, u64, BlockPtr)> = Vec::new();
    for (k, d) in &set.blocks {
        match d {
            Dirty::Data(b) => data.push((*k, b.clone())),
            Dirty::Zero => updates.push((k.0, k.1, BlockPtr::HOLE)),
        }
    }
    data.sort_unstable_by_key(|(k, _)| *k);
    // Full segments are packed one at a time and start uploading as soon as each is packed, so
    // compression of the next overlaps the upload of the previous; the last, partial one becomes
    // the meta segment that also takes this txg's map pages.
    let blocks_per_segment = (cfg.segment_bytes_target / BLOCK_BYTES as usize).max(1);
    let mut counter = counter0;
    let mut uploads = tokio::task::JoinSet::new();
    let limit = Arc::new(tokio::sync::Semaphore::new(cfg.upload_concurrency.max(1)));
    let mut written: BTreeMap<u64, u64> = BTreeMap::new();
    let mut rest = data;
    while rest.len() > blocks_per_segment {
        let tail = rest.split_off(blocks_per_segment);
        let chunk = std::mem::replace(&mut rest, tail);
        let builder = SegmentBuilder::new(guid, segment_id(epoch, counter), txg);
        counter += 1;
        let seg = inner
            .env
            .blocking("packing", move || {
                let (b, u) = pack_into(builder, chunk, algo);
                finish_segment(b, u)
            })
            .await?;
        written.insert(seg.id, seg.written_bytes);
        cache_written(inner, seg.id, &seg.bytes, &seg.updates);
        updates.extend(seg.updates);
        spawn_upload(&mut uploads, inner, &limit, seg.id, Bytes::from(seg.bytes));
    }
    let meta_builder = SegmentBuilder::new(guid, segment_id(epoch, counter), txg);
    let (mut builder, meta_updates) =
        inner.env.blocking("packing", move || pack_into(meta_builder, rest, algo)).await?;
    updates.extend(meta_updates);
    let mut delta = SpaceDelta::default();
    let (mut volumes, mut snaps) = {
        let meta = inner.meta.read();
        (meta.volumes.clone(), meta.snapshots.clone())
    };
    let holds_before = snapshot_space::holds(&volumes, &snaps);
    relocate(inner, set, &pending, &mut builder, &mut updates, &holds_before).await?;
    // Destroyed volumes keep their origin's hold, taken before this txg's snapshot changes.
    let destroyed_holds: Vec<u64> =
        pending.destroyed.iter().map(|v| snapshot_space::origin_txg(v, &snaps)).collect();
    let ops = snapshot_space::apply_ops(inner, &pending, &mut volumes, &mut snaps).await?;
    for p in &ops.freed {
        delta.free(p);
    }
    // A rolled-back volume's writes of this txg are discarded (and their new blocks are garbage).
    updates.retain(|(vol, _, p)| {
        let keep = !ops.rolled_back.contains(vol);
        if !keep {
            delta.free(p);
        }
        keep
    });
    let holds = snapshot_space::holds(&volumes, &snaps);
    apply_trims_and_grows(inner, &mut volumes, set, &mut delta, &holds, &ops.rolled_back).await?;
    apply_updates(inner, &mut volumes, &updates, &mut delta, &holds).await?;
    for (v, hold) in pending.destroyed.iter().zip(destroyed_holds) {
        for p in snapshot_space::unique_blocks(inner, &v.tree, hold, None).await? {
            delta.free(&p);
        }
        inner.cache.forget_tree(v.id);
    }
    for id in &ops.destroyed {
        inner.cache.forget_tree(*id);
    }
    for PageMove { tree_id, level, index, old } in &pending.page_moves {
        if ops.rolled_back.contains(tree_id) {
            continue;
        }
        let tree = if *tree_id == SPACE_TREE_ID {
            inner.meta.read().root.space
        } else {
            match volumes.get(tree_id) {
                Some(v) => v.tree,
                None => continue,
            }
        };
        if tree.page_location(&inner.cache, &CommitReads(inner), *level, *index).await? == *old {
            tree.touch_page(&inner.cache, &CommitReads(inner), *level, *index).await?;
        }
    }
    for v in volumes.values_mut() {
        let hold = holds.get(&v.id).copied().unwrap_or(0);
        for old in
            v.tree.write_dirty(&inner.cache, &CommitReads(inner), &mut builder, txg, algo).await?
        {
            delta.free_unless_held(&old, hold);
        }
    }
    let time_ms = inner.env.clock.wall_ms();
    snapshot_space::capture_snapshots(&pending, txg, time_ms, &volumes, &mut snaps);
    let meta_id = builder.segment_id();
    let meta_written: u64 = builder_live_bytes(&builder);
    written.insert(meta_id, meta_written);
    let (mut root, freed) =
        update_space(inner, txg, &mut builder, &written, delta, &pending, &volumes).await?;
    root.time_ms = time_ms;
    root.snapshots = snaps.values().cloned().collect();
    let (bytes, _) = builder.finish();
    cache_written(inner, meta_id, &bytes, &updates);
    spawn_upload(&mut uploads, inner, &limit, meta_id, Bytes::from(bytes));
    while let Some(r) = uploads.join_next().await {
        r.map_err(|e| Error::Bug(format!("upload task failed: {e}")))??;
    }
    let root = Root { next_segment_counter: counter + 1, ..root };
    publish_until_done(inner, &root).await?;
    {
        let mut meta = inner.meta.write();
        for (id, v) in volumes {
            if let Some(live) = meta.volumes.get_mut(&id) {
                live.tree = v.tree;
                live.allocated_blocks = v.allocated_blocks;
                live.origin = v.origin;
                if ops.rolled_back.contains(&id) {
                    live.size_bytes = v.size_bytes;
                }
            }
        }
        // Ids handed out while this txg synced must not be handed out again.
        let next_volume_id = meta.root.next_volume_id.max(root.next_volume_id);
        // Properties and vdevs changed while this txg synced (`set`, `add`, `replace`) are newer
        // than this txg's copy; they reach the store with the next txg (their `meta_changed`).
        let (props, vdevs) =
            (std::mem::take(&mut meta.root.props), std::mem::take(&mut meta.root.vdevs));
        meta.root = root;
        meta.root.next_volume_id = next_volume_id;
        (meta.root.props, meta.root.vdevs) = (props, vdevs);
        meta.snapshots = snaps;
    }
    inner.cache.finish_txg();
    // Readers that walked the old map of a rolled-back volume may have cached its pages.
    for id in &ops.rolled_back {
        inner.cache.forget_tree(*id);
    }
    inner.txg.publish(txg);
    inner.intent.published(txg);
    Ok(Published { time_ms, freed })
}

/// Compaction's moves: a block still mapped where compaction found it is copied as is.
async fn relocate(
    inner: &Arc<Inner>,
    set: &DirtySet,
    pending: &PendingMeta,
    builder: &mut SegmentBuilder,
    updates: &mut Vec<(u32, u64, BlockPtr)>,
    holds: &HashMap<u32, u64>,
) -> Result<()> {
    for Relocation { tree_id: vol, block, old, physical: phys } in &pending.relocations {
        if set.get(*vol, *block).is_some() {
            continue; // Overwritten in this txg: the move is moot.
        }
        if old.birth_txg <= holds.get(vol).copied().unwrap_or(0) {
            continue; // A snapshot taken since shares it: moving it would keep two copies.
        }
        let Some(tree) = inner.meta.read().volumes.get(vol).map(|v| v.tree) else { continue };
        let current = BlockPtr::from_bytes(
            &tree
                .lookup(&inner.cache, &CommitReads(inner), *block, inner.cache.generation())
                .await?,
        )?;
        if current != *old {
            continue;
        }
        let p = builder.add_physical(
            BlockOwner::Data { tree_id: *vol, block: *block },
            phys,
            old.compression()?,
            old.logical_bytes,
        );
        updates.push((*vol, *block, p));
    }
    Ok(())
}

async fn apply_updates(
    inner: &Arc<Inner>,
    volumes: &mut BTreeMap<u32, crate::root::VolumeEntry>,
    updates: &[(u32, u64, BlockPtr)],
    delta: &mut SpaceDelta,
    holds: &HashMap<u32, u64>,
) -> Result<()> {
    for (vol, block, new) in updates {
        let Some(v) = volumes.get_mut(vol) else { continue }; // Destroyed meanwhile.
        if *block >= v.size_bytes / BLOCK_BYTES {
            continue; // Shrunk meanwhile.
        }
        if v.tree.capacity_slots() < v.size_bytes / BLOCK_BYTES {
            v.tree.grow(&inner.cache, v.size_bytes / BLOCK_BYTES);
        }
        let old = BlockPtr::from_bytes(
            &v.tree.update(&inner.cache, &CommitReads(inner), *block, new.to_bytes()).await?,
        )?;
        delta.free_unless_held(&old, holds.get(vol).copied().unwrap_or(0));
        v.allocated_blocks = v.allocated_blocks + (!new.is_hole()) as u64 - (!old.is_hole()) as u64;
    }
    Ok(())
}

/// Trims first (blocks written after a trim in the same txg are applied after it), and trees
/// grown to their volume's size.
async fn apply_trims_and_grows(
    inner: &Arc<Inner>,
    volumes: &mut BTreeMap<u32, crate::root::VolumeEntry>,
    set: &DirtySet,
    delta: &mut SpaceDelta,
    holds: &HashMap<u32, u64>,
    rolled_back: &[u32],
) -> Result<()> {
    for v in volumes.values_mut() {
        if v.tree.capacity_slots() < v.size_bytes / BLOCK_BYTES {
            v.tree.grow(&inner.cache, v.size_bytes / BLOCK_BYTES);
        }
    }
    for (&(id, start), &end) in &set.trims {
        if rolled_back.contains(&id) {
            continue;
        }
        let hold = holds.get(&id).copied().unwrap_or(0);
        let Some(v) = volumes.get_mut(&id) else { continue };
        let walk =
            TreeWalk::walk_range(&v.tree, &inner.cache, &CommitReads(inner), start, end).await?;
        for (block, _) in walk.leaf_slots.into_iter().filter(|(b, _)| *b >= start && *b < end) {
            let old = BlockPtr::from_bytes(
                &v.tree
                    .update(&inner.cache, &CommitReads(inner), block, BlockPtr::HOLE.to_bytes())
                    .await?,
            )?;
            delta.free_unless_held(&old, hold);
            v.allocated_blocks -= (!old.is_hole()) as u64;
        }
    }
    Ok(())
}

fn builder_live_bytes(b: &SegmentBuilder) -> u64 {
    (b.len_bytes() - crate::segment::SEGMENT_HEADER_BYTES) as u64
}

/// Applies this txg's space changes to the space table, writes its dirty pages into the meta
/// segment, and assembles the root. Returns the root and the segments that became free.
async fn update_space(
    inner: &Arc<Inner>,
    txg: u64,
    builder: &mut SegmentBuilder,
    written: &BTreeMap<u64, u64>,
    mut delta: SpaceDelta,
    pending: &PendingMeta,
    volumes: &BTreeMap<u32, crate::root::VolumeEntry>,
) -> Result<(Root, Vec<FreedSegment>)> {
    let mut root = inner.meta.read().root.clone();
    let mut space = root.space;
    let mut totals = root.totals;
    let mut extra_written: HashMap<u64, u64> = HashMap::new();
    for (seg, d) in std::mem::take(&mut root.space_carry) {
        *delta.live.entry(seg).or_default() += d;
        if d > 0 {
            *extra_written.entry(seg).or_default() += d as u64;
        }
    }
    let gen = inner.cache.generation();
    for (seg, w) in written {
        let s = SegmentSpace { written_bytes: *w, live_bytes: *w, created_txg: txg, freed_txg: 0 };
        space.update(&inner.cache, &CommitReads(inner), *seg, s.to_slot()).await?;
        totals.physical_bytes += w;
        totals.live_bytes += w;
    }
    let mut freed = Vec::new();
    let mut segs: Vec<(u64, i64)> = delta.live.into_iter().collect();
    segs.sort_unstable();
    for (seg, d) in segs {
        let mut s = SegmentSpace::from_slot(
            &space.lookup(&inner.cache, &CommitReads(inner), seg, gen).await?,
        )?;
        if s.is_empty_slot() {
            continue; // Already deleted (a late carry).
        }
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
        space.update(&inner.cache, &CommitReads(inner), seg, s.to_slot()).await?;
    }
    for seg in &pending.deleted_segments {
        space.update(&inner.cache, &CommitReads(inner), *seg, [0u8; 40]).await?;
    }
    let algo = inner.config.read().compression;
    let before = builder.block_count();
    let mut carry: Vec<(u64, i64)> = Vec::new();
    for old in space.write_dirty(&inner.cache, &CommitReads(inner), builder, txg, algo).await? {
        carry.push((old.segment_id, -(old.physical_bytes as i64)));
    }
    let added =
        builder_live_bytes(builder) - written.get(&builder.segment_id()).copied().unwrap_or(0);
    if before != builder.block_count() {
        carry.push((builder.segment_id(), added as i64));
    }
    totals.logical_bytes = volumes.values().map(|v| v.allocated_blocks * BLOCK_BYTES).sum();
    root.txg = txg;
    root.put_id = inner.rng.next_u128();
    root.space = space;
    root.totals = totals;
    root.space_carry = carry;
    root.volumes = volumes.values().cloned().collect();
    Ok((root, freed))
}

fn spawn_upload(
    set: &mut tokio::task::JoinSet<Result<()>>,
    inner: &Arc<Inner>,
    limit: &Arc<tokio::sync::Semaphore>,
    id: u64,
    bytes: Bytes,
) {
    let inner = inner.clone();
    let limit = limit.clone();
    set.spawn(async move {
        let _permit = limit
            .acquire_owned()
            .await
            .map_err(|_| Error::Bug("upload semaphore closed".into()))?;
        inner.counters.add_segment(bytes.len() as u64);
        retry_forever(&inner, "segment upload", || async {
            match inner.store.put(&segment_key(id), bytes.clone(), PutMode::Create).await {
                Err(e) if e.kind == StoreErrorKind::AlreadyExists => {
                    verify_existing_segment(&inner, id, &bytes).await
                }
                other => other.map_err(Error::from),
            }
        })
        .await
    });
}

/// A create-only segment PUT found its key taken. Segment ids are unique per writer epoch, so it
/// is most likely our own earlier attempt (a lost response) — but S3 also answers that way (409)
/// to a PUT racing an attempt still in flight that may never land. Read it back: the same bytes
/// are stored; none yet is worth another try; other bytes at our key are never counted stored.
async fn verify_existing_segment(inner: &Inner, id: u64, ours: &Bytes) -> Result<()> {
    let key = segment_key(id);
    match inner.store.get(&key).await {
        Ok(theirs) if theirs == *ours => Ok(()),
        Ok(theirs) => Err(Error::Bug(format!(
            "{key} holds {} bytes that are not this writer's segment ({} bytes): another writer uploaded with this epoch",
            theirs.len(),
            ours.len()
        ))),
        Err(e) if e.is_not_found() => Err(Error::Store(StoreError::new(
            StoreErrorKind::Transient,
            "PUT",
            &key,
            "create-only PUT conflicted but the segment is not there (an earlier attempt still in flight?); retrying",
        ))),
        Err(e) => Err(e.into()),
    }
}

async fn publish_until_done(inner: &Arc<Inner>, root: &Root) -> Result<()> {
    retry_forever(inner, "root publish", || publish_root(inner.store.as_ref(), root)).await
}

/// Retries a commit step through store outages: the pool is SUSPENDED meanwhile and resumes by
/// itself. Fencing and bugs end it; `sync_attempts_max` bounds it in tests.
async fn retry_forever<F, Fut>(inner: &Arc<Inner>, what: &str, mut step: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let mut attempt: u64 = 0;
    let mut wait_ms = 100;
    loop {
        match step().await {
            Ok(()) => {
                // Also when the first attempt worked: a failed best-effort delete may have
                // reported the store unreachable meanwhile.
                inner.health.lock().resume();
                if attempt > 0 {
                    tracing::info!("{what} succeeded after the store came back");
                }
                return Ok(());
            }
            Err(e @ (Error::Fenced(_) | Error::Bug(_))) => return Err(e),
            Err(e) => {
                attempt += 1;
                if inner.config.read().sync_attempts_max.is_some_and(|m| attempt >= m) {
                    return Err(e);
                }
                tracing::warn!(error = %e, attempt, "{what} failed; pool suspended, retrying");
                inner.health.lock().suspend(format!("{what}: {e}"));
                inner.env.clock.sleep(Duration::from_millis(wait_ms)).await;
                wait_ms = (wait_ms * 2).min(SUSPENDED_RETRY_MS_MAX);
            }
        }
    }
}

/// The final root of an export: the holder is marked inactive so the next import needs no force.
pub(crate) async fn publish_export(inner: &Arc<Inner>) -> Result<()> {
    let _guard = inner.txg.sync_lock.lock().await;
    let mut root = inner.meta.read().root.clone();
    root.txg += 1;
    root.put_id = inner.rng.next_u128();
    root.time_ms = inner.env.clock.wall_ms();
    root.holder.active = false;
    publish_until_done(inner, &root).await?;
    inner.txg.state.lock().open_txg = root.txg + 1;
    let txg = root.txg;
    inner.meta.write().root = root;
    inner.txg.publish(txg);
    Ok(())
}
