//! The read path: dirty data first (open, then syncing txg), then the block map, then the block
//! cache, then the store by ranged GETs. Adjacent blocks of one segment coalesce into one request,
//! independent requests run in parallel, sequential access triggers readahead. Reads never wait
//! for uploads: the syncing txg's data stays readable in memory until its root is published.

use super::{bad, Inner, Pool};
use crate::blkptr::BlockPtr;
use crate::blockmap::FANOUT;
use crate::codec::checksum64;
use crate::compress::decompress;
use crate::dirty::{Dirty, BLOCK_BYTES};
use crate::error::{Error, Result};
use crate::objstore::StoreErrorKind;
use crate::segment::segment_key;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use std::sync::Arc;

pub(super) enum Source {
    Mem(Bytes),
    Zero,
    Ptr(BlockPtr),
}

/// Detects sequential streams per volume to drive readahead.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SeqDetector {
    next_block: u64,
    run_blocks: u64,
    prefetched_to: u64,
}

impl Pool {
    /// Reads `len` bytes at `offset`. Holes read as zeros.
    pub async fn read(&self, volume_id: u32, offset: u64, len: u32) -> Result<Bytes> {
        let (size, tree) = self.readable_tree(volume_id)?;
        if offset.checked_add(len as u64).is_none_or(|e| e > size) {
            return Err(bad(format!("range {offset}+{len} is beyond the volume's {size} bytes")));
        }
        if len == 0 {
            return Ok(Bytes::new());
        }
        let first = offset / BLOCK_BYTES;
        let last = (offset + len as u64 - 1) / BLOCK_BYTES;
        self.inner.hot.touch(volume_id, first, last);
        let mut tree = tree;
        let mut looked_again = 0;
        let blocks = loop {
            let got = match self.resolve(volume_id, tree, first, last).await {
                Ok(sources) => fetch_blocks(&self.inner, &sources, false).await,
                Err(e) => Err(e),
            };
            match got {
                // A segment the store does not have, for one of two reasons that are no damage:
                // - it left the store while this read waited between resolving its pointers and
                //   fetching them: an overwrite or compaction freed it and the collector deleted
                //   it roots_kept txgs later (gc.rs does not wait for reads in flight; under load
                //   that is a second or two), and the map now points elsewhere;
                // - it is the running sync's, not uploaded yet: compaction's moves (and scrub's
                //   repairs) reach the map before their segment reaches the store, and no dirty
                //   data stands in for them as it does for written blocks (sync.rs).
                // So wait for the sync in progress to end, then look again, as scrub does. A
                // segment the current map still references fails again and is reported.
                Err(e) if is_missing_segment(&e) && looked_again < MISSING_SEGMENT_LOOKS_MAX => {
                    looked_again += 1;
                    let _ = tokio::time::timeout(MISSING_SEGMENT_WAIT, self.inner.sync_lock.lock())
                        .await;
                    tree = self.readable_tree(volume_id)?.1;
                }
                other => break other?,
            }
        };
        let mut out = BytesMut::with_capacity(len as usize);
        let start = (offset % BLOCK_BYTES) as usize;
        let mut need = len as usize;
        for (i, b) in blocks.iter().enumerate() {
            let from = if i == 0 { start } else { 0 };
            let n = (b.len() - from).min(need);
            out.extend_from_slice(&b[from..from + n]);
            need -= n;
        }
        self.maybe_readahead(volume_id, first, last);
        Ok(out.freeze())
    }

    /// Allocation of `offset..offset+len` as runs of (bytes, allocated), for NBD block status and
    /// sparse copies. Looks at the map only; reads no data. At most 64 MiB is described per call.
    pub async fn extents(&self, volume_id: u32, offset: u64, len: u64) -> Result<Vec<(u64, bool)>> {
        let (size, tree) = self.readable_tree(volume_id)?;
        let len = len.min(64 << 20).min(size.saturating_sub(offset));
        if len == 0 {
            return Ok(Vec::new());
        }
        let first = offset / BLOCK_BYTES;
        let last = (offset + len - 1) / BLOCK_BYTES;
        let sources = self.resolve(volume_id, tree, first, last).await?;
        let mut runs: Vec<(u64, bool)> = Vec::new();
        for (i, s) in sources.iter().enumerate() {
            let b = first + i as u64;
            let start = (b * BLOCK_BYTES).max(offset);
            let end = ((b + 1) * BLOCK_BYTES).min(offset + len);
            let allocated = !matches!(s, Source::Zero);
            match runs.last_mut() {
                Some((n, a)) if *a == allocated => *n += end - start,
                _ => runs.push((end - start, allocated)),
            }
        }
        Ok(runs)
    }

    /// Size and map of a volume or, read-only, of a snapshot (snapshot ids share the id space).
    fn readable_tree(&self, id: u32) -> Result<(u64, crate::blockmap::TreeRef)> {
        let m = self.inner.meta.read();
        if let Some(v) = m.volumes.get(&id) {
            return Ok((v.size_bytes, v.tree));
        }
        let s = m
            .snapshots
            .get(&id)
            .ok_or_else(|| bad(format!("no volume or snapshot with id {id}")))?;
        Ok((s.size_bytes, s.tree))
    }

    /// Where each block of `first..=last` comes from, as of now.
    pub(super) async fn resolve(
        &self,
        volume_id: u32,
        tree: crate::blockmap::TreeRef,
        first: u64,
        last: u64,
    ) -> Result<Vec<Source>> {
        let mut out: Vec<Option<Source>> = Vec::with_capacity((last - first + 1) as usize);
        {
            let t = self.inner.txg.lock();
            for b in first..=last {
                let d = t
                    .open
                    .get(volume_id, b)
                    .or_else(|| t.syncing.as_ref().and_then(|s| s.get(volume_id, b)));
                out.push(d.map(|d| match d {
                    Dirty::Data(bytes) => Source::Mem(bytes),
                    Dirty::Zero => Source::Zero,
                }));
            }
        }
        let mut b = first;
        while b <= last {
            let leaf_end = ((b / FANOUT as u64) + 1) * FANOUT as u64;
            let run_end = leaf_end.min(last + 1);
            let i0 = (b - first) as usize;
            if out[i0..(run_end - first) as usize].iter().any(|s| s.is_none()) {
                let gen = self.inner.cache.generation();
                let slots = tree
                    .lookup_leaf_run(
                        &self.inner.cache,
                        &*self.inner,
                        b,
                        (run_end - b) as usize,
                        gen,
                    )
                    .await?;
                for (k, slot) in slots.iter().enumerate() {
                    if out[i0 + k].is_none() {
                        let p = BlockPtr::from_bytes(slot)?;
                        out[i0 + k] = Some(if p.is_hole() { Source::Zero } else { Source::Ptr(p) });
                    }
                }
            }
            b = run_end;
        }
        Ok(out.into_iter().map(|s| s.unwrap_or(Source::Zero)).collect())
    }

    fn maybe_readahead(&self, volume_id: u32, first: u64, last: u64) {
        if self.inner.blocks.holds_nothing() {
            return; // Prefetched blocks would have nowhere to go.
        }
        let (window_blocks, tree) = {
            let max = self.inner.config.read().readahead_bytes_max / BLOCK_BYTES;
            let mut ra = self.inner.readahead.lock();
            let d = ra.entry(volume_id).or_default();
            if first == d.next_block && first != 0 {
                d.run_blocks += last - first + 1;
            } else {
                d.run_blocks = 0;
                d.prefetched_to = 0;
            }
            d.next_block = last + 1;
            // Two sequential reads in a row start a window that doubles up to the maximum.
            if d.run_blocks < 2 * (last - first + 1)
                || d.prefetched_to > last + d.run_blocks.min(max) / 2
            {
                return;
            }
            let window = d.run_blocks.min(max).max(1);
            let from = d.prefetched_to.max(last + 1);
            d.prefetched_to = from + window;
            let tree =
                self.inner.meta.read().volumes.get(&volume_id).map(|v| (v.tree, v.size_bytes));
            ((from, window), tree)
        };
        let Some((tree, size)) = tree else { return };
        let (from, window) = window_blocks;
        let end = (from + window).min(size / BLOCK_BYTES);
        if from >= end {
            return;
        }
        let pool = self.clone();
        self.inner.counters.add_readahead(end - from);
        tokio::spawn(async move {
            if let Ok(sources) = pool.resolve(volume_id, tree, from, end - 1).await {
                let _ = fetch_blocks(&pool.inner, &sources, true).await;
            }
        });
    }
}

/// Brings the blocks of `sources` into the block cache as prefetches (warm-up).
pub(super) async fn prefetch_sources(inner: &Arc<Inner>, sources: &[Source]) -> Result<()> {
    fetch_blocks(inner, sources, true).await.map(|_| ())
}

/// Logical bytes for every source, fetching what is needed from the cache or the store.
async fn fetch_blocks(
    inner: &Arc<Inner>,
    sources: &[Source],
    prefetch: bool,
) -> Result<Vec<Bytes>> {
    let zero = Bytes::from(vec![0u8; BLOCK_BYTES as usize]);
    let mut out: Vec<Option<Bytes>> = Vec::with_capacity(sources.len());
    let mut wanted: Vec<(usize, BlockPtr)> = Vec::new();
    let mut on_device: Vec<(usize, BlockPtr)> = Vec::new();
    for (i, s) in sources.iter().enumerate() {
        out.push(match s {
            Source::Mem(b) => Some(b.clone()),
            Source::Zero => Some(zero.clone()),
            Source::Ptr(p) => match inner
                .blocks
                .get_ram(p, prefetch)
                .and_then(|phys| verify_decode(inner, p, &phys).ok())
            {
                Some(b) => Some(b),
                None => {
                    if inner.blocks.on_device(p) {
                        on_device.push((i, *p));
                    } else {
                        wanted.push((i, *p));
                    }
                    None
                }
            },
        });
    }
    if !on_device.is_empty() {
        wanted.extend(read_from_device(inner, on_device, prefetch, &mut out).await);
    }
    if !prefetch && !wanted.is_empty() {
        wanted = wait_for_prefetches(inner, wanted, &mut out).await;
    }
    let max_req = inner.config.read().read_request_bytes_max;
    let concurrency = inner.config.read().read_concurrency;
    let groups = coalesce(&wanted, max_req);
    let results: Vec<Result<Vec<(usize, Bytes)>>> = futures::stream::iter(groups)
        .map(|g| fetch_group(inner, g, prefetch))
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    for r in results {
        for (i, b) in r? {
            out[i] = Some(b);
        }
    }
    out.into_iter().map(|b| b.ok_or_else(|| Error::Bug("block left unread".into()))).collect()
}

/// Cache-device reads in parallel on blocking threads (at most `read_concurrency` at once per
/// request); returns the blocks the device could not give back verified (evicted meanwhile, or
/// a bad copy), which go to the store.
async fn read_from_device(
    inner: &Arc<Inner>,
    blocks: Vec<(usize, BlockPtr)>,
    prefetch: bool,
    out: &mut [Option<Bytes>],
) -> Vec<(usize, BlockPtr)> {
    let concurrency = inner.config.read().read_concurrency.max(1);
    let results: Vec<(usize, BlockPtr, Option<Bytes>)> = futures::stream::iter(blocks)
        .map(|(i, p)| {
            let cache = inner.blocks.clone();
            let env = inner.env.clone();
            async move {
                let got = cache.read_device(p, prefetch, env).await;
                (i, p, got)
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let mut missed = Vec::new();
    for (i, p, got) in results {
        match got.and_then(|phys| verify_decode(inner, &p, &phys).ok()) {
            Some(b) => out[i] = Some(b),
            None => missed.push((i, p)),
        }
    }
    missed
}

/// Groups blocks that sit back to back in one segment into single ranged GETs.
fn coalesce(wanted: &[(usize, BlockPtr)], max_req: u64) -> Vec<Vec<(usize, BlockPtr)>> {
    let mut sorted = wanted.to_vec();
    sorted.sort_by_key(|(_, p)| (p.segment_id, p.offset_bytes));
    let mut groups: Vec<Vec<(usize, BlockPtr)>> = Vec::new();
    for (i, p) in sorted {
        if let Some(g) = groups.last_mut() {
            let (_, first) = g[0];
            let (_, prev) = g[g.len() - 1];
            let adjacent = prev.segment_id == p.segment_id && prev.range().end == p.range().start;
            if adjacent && p.range().end - first.range().start <= max_req {
                g.push((i, p));
                continue;
            }
        }
        groups.push(vec![(i, p)]);
    }
    groups
}

/// Demand blocks that a prefetch is already fetching: wait for it (bounded), then take them from
/// the cache. Returns the blocks still to fetch.
async fn wait_for_prefetches(
    inner: &Arc<Inner>,
    wanted: Vec<(usize, BlockPtr)>,
    out: &mut [Option<Bytes>],
) -> Vec<(usize, BlockPtr)> {
    let pending: Vec<tokio::sync::watch::Receiver<bool>> = {
        let map = inner.prefetching.lock();
        wanted
            .iter()
            .filter_map(|(_, p)| map.get(&(p.segment_id, p.offset_bytes)).cloned())
            .collect()
    };
    if pending.is_empty() {
        return wanted;
    }
    for mut rx in pending {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(30), rx.wait_for(|done| *done))
            .await;
    }
    let mut still = Vec::new();
    for (i, p) in wanted {
        match inner.blocks.get(&p, false).and_then(|phys| verify_decode(inner, &p, &phys).ok()) {
            Some(b) => out[i] = Some(b),
            None => still.push((i, p)),
        }
    }
    still
}

async fn fetch_group(
    inner: &Arc<Inner>,
    g: Vec<(usize, BlockPtr)>,
    prefetch: bool,
) -> Result<Vec<(usize, Bytes)>> {
    if !prefetch {
        return fetch_group_now(inner, g, false).await;
    }
    // Register the blocks so demand reads wait for this fetch instead of repeating it.
    let (tx, rx) = tokio::sync::watch::channel(false);
    let keys: Vec<(u64, u32)> = {
        let mut map = inner.prefetching.lock();
        let mut mine = Vec::new();
        for (_, p) in &g {
            let k = (p.segment_id, p.offset_bytes);
            if let std::collections::hash_map::Entry::Vacant(e) = map.entry(k) {
                e.insert(rx.clone());
                mine.push(k);
            }
        }
        mine
    };
    let r = fetch_group_now(inner, g, true).await;
    {
        let mut map = inner.prefetching.lock();
        for k in keys {
            map.remove(&k);
        }
    }
    let _ = tx.send(true);
    r
}

async fn fetch_group_now(
    inner: &Arc<Inner>,
    g: Vec<(usize, BlockPtr)>,
    prefetch: bool,
) -> Result<Vec<(usize, Bytes)>> {
    let start = g[0].1.range().start;
    let end = g[g.len() - 1].1.range().end;
    let bytes = get_segment_range(inner, g[0].1.segment_id, start..end).await?;
    let mut out = Vec::with_capacity(g.len());
    for (i, p) in g {
        let r = p.range();
        let phys = &bytes[(r.start - start) as usize..(r.end - start) as usize];
        let logical = verify_decode(inner, &p, phys)?;
        // A copy, as in sync.rs's cache_written: a slice would keep the whole GET buffer (up to
        // `read_request_bytes_max` of coalesced blocks, or a decrypted chunk run) alive for as
        // long as any one of its blocks stays cached, and the ARC only counts the block.
        inner.blocks.insert(&p, Bytes::copy_from_slice(phys), prefetch);
        out.push((i, logical));
    }
    Ok(out)
}

/// Why a read fails when the store has no segment its pointer names.
const SEGMENT_MISSING: &str = "missing from the store although the map references it";
/// Times a read resolves its pointers again after finding a segment gone (see `Pool::read`).
const MISSING_SEGMENT_LOOKS_MAX: u32 = 3;
/// The longest a read waits for the running sync before it looks again (a sync retrying through a
/// store outage may take much longer; the read then fails as it would have).
const MISSING_SEGMENT_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

fn is_missing_segment(e: &Error) -> bool {
    matches!(e, Error::Corrupt { why, .. } if why == SEGMENT_MISSING)
}

async fn get_segment_range(
    inner: &Inner,
    segment_id: u64,
    range: std::ops::Range<u64>,
) -> Result<Bytes> {
    inner.counters.add_store_read(range.end - range.start);
    match inner.store.get_range(&segment_key(segment_id), range).await {
        Ok(b) => Ok(b),
        Err(e) if e.kind == StoreErrorKind::NotFound => {
            Err(Error::corrupt(format!("segment {segment_id:016x}"), SEGMENT_MISSING))
        }
        Err(e) => Err(e.into()),
    }
}

/// Checksum before decompression (rule 3); a mismatch is counted and never returned.
fn verify_decode(inner: &Inner, p: &BlockPtr, phys: &[u8]) -> Result<Bytes> {
    let found = checksum64(phys);
    if found != p.checksum {
        inner.counters.add_checksum_error();
        inner.blocks.invalidate(p);
        return Err(Error::Checksum {
            what: format!("block at segment {:016x} offset {}", p.segment_id, p.offset_bytes),
            expected: p.checksum,
            found,
        });
    }
    Ok(Bytes::from(decompress(p.compression()?, phys, p.logical_bytes as usize)?))
}

/// One block by pointer, through the cache (map pages, compaction).
pub(crate) async fn read_verified(inner: &Inner, p: &BlockPtr) -> Result<Bytes> {
    if let Some(phys) = inner.blocks.get(p, false) {
        if let Ok(b) = verify_decode(inner, p, &phys) {
            return Ok(b);
        }
    }
    let phys = get_segment_range(inner, p.segment_id, p.range()).await?;
    let b = verify_decode(inner, p, &phys)?;
    inner.blocks.insert(p, Bytes::copy_from_slice(&phys), false);
    Ok(b)
}
