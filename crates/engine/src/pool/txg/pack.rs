//! The data side of a commit: the txg's dirty blocks, compressed, packed into segments of about
//! `segment_bytes_target`. Full segments are packed one at a time off the async workers and
//! start uploading as soon as each is packed (create-only PUTs, `upload_concurrency` at once), so
//! compression of the next overlaps the upload of the previous; the last, partial one becomes
//! the meta segment that also takes this txg's map pages and is uploaded last.

use super::retry::retry_forever;
use crate::blkptr::BlockPtr;
use crate::compress::Compression;
use crate::dirty::{Dirty, DirtySet, BLOCK_BYTES};
use crate::error::{Error, Result};
use crate::objstore::{PutMode, StoreError, StoreErrorKind};
use crate::pool::{Inner, PoolConfig};
use crate::segment::{segment_id, segment_key, BlockOwner, SegmentBuilder};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Where a block of a volume is as of this txg: `ptr` in one of its segments, or a hole.
#[derive(Debug, Clone, Copy)]
pub(super) struct BlockUpdate {
    pub volume_id: u32,
    pub block: u64,
    pub ptr: BlockPtr,
}

/// A dirty data block to pack.
struct DataBlock {
    volume_id: u32,
    block: u64,
    data: Bytes,
}

/// One full data segment, packed off the async workers.
struct PackedSegment {
    id: u64,
    bytes: Vec<u8>,
    written_bytes: u64,
    updates: Vec<BlockUpdate>,
}

/// The segments of one txg: ids handed out, uploads in flight, bytes written into each.
pub(super) struct Segments<'a> {
    inner: &'a Arc<Inner>,
    txg: u64,
    algo: Compression,
    blocks_per_segment: usize,
    /// The counter of the next segment's id (the id is the writer's epoch and this).
    counter: u64,
    uploads: JoinSet<Result<()>>,
    limit: Arc<Semaphore>,
    /// Bytes of blocks written into each segment of this txg, by segment id.
    pub written: BTreeMap<u64, u64>,
}

impl<'a> Segments<'a> {
    pub fn new(inner: &'a Arc<Inner>, txg: u64, cfg: &PoolConfig) -> Segments<'a> {
        Segments {
            inner,
            txg,
            algo: cfg.compression,
            blocks_per_segment: (cfg.segment_bytes_target / BLOCK_BYTES as usize).max(1),
            counter: inner.meta.read().root.next_segment_counter,
            uploads: JoinSet::new(),
            limit: Arc::new(Semaphore::new(cfg.upload_concurrency.max(1))),
            written: BTreeMap::new(),
        }
    }

    fn builder(&self) -> SegmentBuilder {
        SegmentBuilder::new(self.inner.guid, segment_id(self.inner.epoch, self.counter), self.txg)
    }

    /// Packs the dirty blocks of `set`: full segments go uploading, the rest starts the meta
    /// segment (returned). Returns every block's new location too (holes for zeroed blocks).
    pub async fn pack_data(
        &mut self,
        set: &DirtySet,
    ) -> Result<(Vec<BlockUpdate>, SegmentBuilder)> {
        let mut data: Vec<DataBlock> = Vec::with_capacity(set.blocks.len());
        let mut updates: Vec<BlockUpdate> = Vec::new();
        for (&(volume_id, block), d) in &set.blocks {
            match d {
                Dirty::Data(b) => data.push(DataBlock { volume_id, block, data: b.clone() }),
                Dirty::Zero => updates.push(BlockUpdate { volume_id, block, ptr: BlockPtr::HOLE }),
            }
        }
        data.sort_unstable_by_key(|b| (b.volume_id, b.block));
        let mut rest = data;
        while rest.len() > self.blocks_per_segment {
            let tail = rest.split_off(self.blocks_per_segment);
            let chunk = std::mem::replace(&mut rest, tail);
            let (builder, algo) = (self.builder(), self.algo);
            self.counter += 1;
            let seg = self
                .inner
                .env
                .blocking("packing", move || {
                    let (b, u) = pack_into(builder, chunk, algo);
                    finish_segment(b, u)
                })
                .await?;
            self.written.insert(seg.id, seg.written_bytes);
            cache_written(self.inner, seg.id, &seg.bytes, &seg.updates);
            updates.extend(seg.updates);
            self.upload(seg.id, Bytes::from(seg.bytes));
        }
        let (builder, algo) = (self.builder(), self.algo);
        let (meta_segment, meta_updates) =
            self.inner.env.blocking("packing", move || pack_into(builder, rest, algo)).await?;
        updates.extend(meta_updates);
        Ok((updates, meta_segment))
    }

    /// Counts what the meta segment holds so far (its data blocks and the volumes' pages) as
    /// written, before the space table's own pages join it.
    pub fn count_meta_written(&mut self, meta_segment: &SegmentBuilder) {
        let written = super::space::builder_live_bytes(meta_segment);
        self.written.insert(meta_segment.segment_id(), written);
    }

    /// Uploads the meta segment and waits until every segment of the txg is in the store.
    /// Returns the meta segment's counter (the root records the next one).
    pub async fn upload_last_and_wait(
        mut self,
        meta_segment: SegmentBuilder,
        updates: &[BlockUpdate],
    ) -> Result<u64> {
        let meta_id = meta_segment.segment_id();
        let (bytes, _) = meta_segment.finish();
        cache_written(self.inner, meta_id, &bytes, updates);
        self.upload(meta_id, Bytes::from(bytes));
        while let Some(r) = self.uploads.join_next().await {
            r.map_err(|e| Error::Bug(format!("upload task failed: {e}")))??;
        }
        Ok(self.counter)
    }

    /// Starts uploading segment `id` (at most `upload_concurrency` at once).
    fn upload(&mut self, id: u64, bytes: Bytes) {
        let inner = self.inner.clone();
        let limit = self.limit.clone();
        self.uploads.spawn(async move {
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
}

/// Compresses `blocks` into one segment (CPU work: runs on a blocking thread, see `Env::blocking`).
fn pack_into(
    mut builder: SegmentBuilder,
    blocks: Vec<DataBlock>,
    algo: Compression,
) -> (SegmentBuilder, Vec<BlockUpdate>) {
    let mut updates = Vec::with_capacity(blocks.len());
    for DataBlock { volume_id, block, data } in blocks {
        let ptr = builder.add(BlockOwner::Data { tree_id: volume_id, block }, &data, algo);
        updates.push(BlockUpdate { volume_id, block, ptr });
    }
    (builder, updates)
}

fn finish_segment(b: SegmentBuilder, updates: Vec<BlockUpdate>) -> PackedSegment {
    let id = b.segment_id();
    let (bytes, entries) = b.finish();
    PackedSegment {
        id,
        bytes,
        written_bytes: entries.iter().map(|e| e.ptr.physical_bytes as u64).sum(),
        updates,
    }
}

/// Puts the data blocks a txg wrote into segment `id` in the block cache, as ZFS keeps written
/// buffers in the ARC: a database reads back what it just wrote, and without this every such read
/// would cross to the store once the dirty data is freed. Each block is copied out of the segment
/// buffer (a slice would keep the whole segment alive for as long as any block stays cached). The
/// keys are the blocks' new locations, which nothing references before the root is published.
fn cache_written(inner: &Inner, id: u64, segment: &[u8], updates: &[BlockUpdate]) {
    if inner.blocks.holds_nothing() {
        return;
    }
    for p in updates.iter().map(|u| &u.ptr).filter(|p| !p.is_hole() && p.segment_id == id) {
        let range = p.offset_bytes as usize..p.offset_bytes as usize + p.physical_bytes as usize;
        if let Some(physical) = segment.get(range) {
            inner.blocks.insert(p, Bytes::copy_from_slice(physical), false);
        }
    }
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
