//! Verified block reads, below the read path and the commit: a block pointer's bytes from the
//! ARC, the cache device (L2ARC) or the store by ranged GETs, checked against the pointer's
//! checksum before decompression. Blocks adjacent in one segment coalesce into one GET,
//! independent GETs run in parallel, and a prefetch in flight is joined rather than repeated.

use super::Inner;
use crate::blkptr::BlockPtr;
use crate::blockmap::BlockSource;
use crate::codec::checksum64;
use crate::compress::decompress;
use crate::dirty::BLOCK_BYTES;
use crate::error::{Error, Result};
use crate::objstore::StoreErrorKind;
use crate::segment::segment_key;
use bytes::Bytes;
use futures::StreamExt;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::watch;

/// Where one block of a read comes from.
pub(crate) enum Source {
    Mem(Bytes),
    Zero,
    Ptr(BlockPtr),
}

/// Blocks being prefetched, by location (segment, offset): a demand read of one waits for that
/// prefetch instead of fetching the block a second time.
#[derive(Debug, Default)]
pub(crate) struct Prefetching(Mutex<HashMap<(u64, u32), watch::Receiver<bool>>>);

/// Brings the blocks of `sources` into the block cache as prefetches (warm-up).
pub(super) async fn prefetch_sources(inner: &Arc<Inner>, sources: &[Source]) -> Result<()> {
    fetch_blocks(inner, sources, true).await.map(|_| ())
}

/// Logical bytes for every source, fetching what is needed from the cache or the store.
pub(super) async fn fetch_blocks(
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
                let got = env
                    .blocking("cache-device read", move || cache.get_device(&p, prefetch))
                    .await
                    .ok()
                    .flatten();
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
    let pending: Vec<watch::Receiver<bool>> = {
        let map = inner.prefetching.0.lock();
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
    let (tx, rx) = watch::channel(false);
    let keys: Vec<(u64, u32)> = {
        let mut map = inner.prefetching.0.lock();
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
        let mut map = inner.prefetching.0.lock();
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

pub(super) fn is_missing_segment(e: &Error) -> bool {
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

/// Reads blocks for the block map through the block cache.
#[async_trait::async_trait]
impl BlockSource for Inner {
    async fn read_block(&self, ptr: &BlockPtr) -> Result<Bytes> {
        read_verified(self, ptr).await
    }
}
