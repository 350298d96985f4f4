//! Verified block reads, below the read path and the commit: a block pointer's bytes from the
//! ARC, the cache device (L2ARC) or the store by ranged GETs, checked against the pointer's
//! checksum before decompression. Blocks adjacent in one segment coalesce into one GET,
//! independent GETs run in parallel, and a GET in flight (a demand read's or a prefetch's) is
//! joined rather than repeated.

use super::Inner;
use crate::blkptr::BlockPtr;
use crate::blockmap::BlockSource;
use crate::codec::checksum64;
use crate::compress::{decompress, Compression};
use crate::dirty::ZERO_BLOCK;
use crate::error::{Error, Result};
use crate::objstore::{Body, CutBlock, StoreErrorKind};
use crate::segment::segment_key;
use bytes::Bytes;
use futures::StreamExt;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{oneshot, watch};

/// Where one block of a read comes from.
pub(crate) enum Source {
    Mem(Bytes),
    Zero,
    Ptr(BlockPtr),
}

/// The pointers among `sources`, in order (the blocks the caches or the store hold).
pub(super) fn block_ptrs(sources: &[Source]) -> Vec<BlockPtr> {
    sources
        .iter()
        .filter_map(|s| match s {
            Source::Ptr(p) => Some(*p),
            _ => None,
        })
        .collect()
}

/// Blocks being fetched from the store, by location (segment, offset), each with the signal its
/// GET sends when it is done: a second reader of a block (a demand read or a prefetch) joins that
/// GET instead of repeating it. Only store fetches are claimed here, so a cache hit never takes
/// this lock.
#[derive(Debug, Default)]
pub(crate) struct Fetching(Arc<Mutex<Claims>>);

/// A block's location (segment, offset) and the signal of the GET that claimed it.
type Claims = HashMap<(u64, u32), watch::Receiver<bool>, fardisk_arc::LocationHash>;

/// The blocks one coalesced GET claimed in [`Fetching`]. Dropping it (the GET done, failed, or
/// abandoned with its read) releases them and wakes whoever joined; the GET has put its blocks
/// in the cache before, so a reader that finds a block unclaimed finds it cached or fetches it.
pub(super) struct Claim {
    fetching: Arc<Mutex<Claims>>,
    keys: Vec<(u64, u32)>,
    done: watch::Sender<bool>,
}

impl Drop for Claim {
    fn drop(&mut self) {
        {
            let mut map = self.fetching.lock();
            for k in &self.keys {
                map.remove(k);
            }
        }
        let _ = self.done.send(true);
    }
}

fn location(p: &BlockPtr) -> (u64, u32) {
    (p.segment_id, p.offset_bytes)
}

/// Brings the blocks of `sources` into the block cache as prefetches (warm-up).
pub(super) async fn prefetch_sources(inner: &Arc<Inner>, sources: &[Source]) -> Result<()> {
    fetch_blocks(inner, sources, true).await.map(|_| ())
}

/// A block a read still needs: `ptr`, for slot `at` of the read's output.
#[derive(Debug, Clone, Copy)]
struct Wanted {
    at: usize,
    ptr: BlockPtr,
}

/// A block fetched for slot `at`, verified and decompressed.
struct Fetched {
    at: usize,
    logical: Bytes,
}

/// Logical bytes for every source, fetching what is needed from the cache or the store. A
/// prefetch only fills the cache: the bytes it returns for the blocks it fetched are empty.
pub(super) async fn fetch_blocks(
    inner: &Inner,
    sources: &[Source],
    prefetch: bool,
) -> Result<Vec<Bytes>> {
    fetch_blocks_then(inner, sources, prefetch, None).await
}

/// [`fetch_blocks`], sending on `claimed` (or dropping it) once every block it will GET is
/// claimed, before the GETs: a readahead step lets the next one go on from there.
pub(super) async fn fetch_blocks_then(
    inner: &Inner,
    sources: &[Source],
    prefetch: bool,
    claimed: Option<oneshot::Sender<()>>,
) -> Result<Vec<Bytes>> {
    let zero = Bytes::from_static(&ZERO_BLOCK);
    let mut out: Vec<Option<Bytes>> = Vec::with_capacity(sources.len());
    let mut wanted: Vec<Wanted> = Vec::new();
    let mut on_device: Vec<Wanted> = Vec::new();
    let ptrs = block_ptrs(sources);
    let mut hits = inner.blocks.get_ram_many(&ptrs, prefetch).into_iter();
    for (i, s) in sources.iter().enumerate() {
        out.push(match s {
            Source::Mem(b) => Some(b.clone()),
            Source::Zero => Some(zero.clone()),
            Source::Ptr(p) => {
                match hits.next().flatten().and_then(|phys| decode_hit(inner, p, &phys).ok()) {
                    Some(b) => Some(b),
                    None => {
                        let want = Wanted { at: i, ptr: *p };
                        if inner.blocks.on_device(p) {
                            on_device.push(want);
                        } else {
                            wanted.push(want);
                        }
                        None
                    }
                }
            }
        });
    }
    if !on_device.is_empty() {
        wanted.extend(read_from_device(inner, on_device, prefetch, &mut out).await);
    }
    if wanted.is_empty() {
        return finish(out);
    }
    let (max_req, concurrency) = {
        let c = inner.config.read();
        (c.read_request_bytes_max, c.read_concurrency.max(1))
    };
    let (joined, groups) = claim(inner, wanted, prefetch, &mut out, max_req);
    if let Some(tx) = claimed {
        let _ = tx.send(());
    }
    let own = futures::stream::iter(groups)
        .map(|(g, claim)| async move {
            let r = fetch_group(inner, g, prefetch).await;
            drop(claim); // After the blocks went into the cache: see `Claim`.
            r
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<Result<Vec<Fetched>>>>();
    let mut left = Vec::new();
    let results = if prefetch {
        // Another GET is bringing these into the cache already: nothing left to do for them.
        for (w, _) in &joined {
            out[w.at] = Some(Bytes::new());
        }
        own.await
    } else {
        let (results, not_left) = futures::join!(own, wait_for_fetches(inner, joined));
        for (at, b) in not_left.0 {
            out[at] = Some(b);
        }
        left = not_left.1;
        results
    };
    for r in results {
        for Fetched { at, logical } in r? {
            out[at] = Some(logical);
        }
    }
    // Blocks a joined GET did not leave in the cache (it failed, or they were evicted at once):
    // fetched here without a claim, since waiting a second time could go on.
    for g in coalesce(&left, max_req) {
        for Fetched { at, logical } in fetch_group(inner, g, prefetch).await? {
            out[at] = Some(logical);
        }
    }
    finish(out)
}

fn finish(out: Vec<Option<Bytes>>) -> Result<Vec<Bytes>> {
    out.into_iter().map(|b| b.ok_or_else(|| Error::Bug("block left unread".into()))).collect()
}

/// Cache-device reads in parallel (io_uring, or blocking threads where the cache has no ring;
/// at most `read_concurrency` at once per request); returns the blocks the device could not give back verified (evicted meanwhile, or
/// a bad copy), which go to the store.
async fn read_from_device(
    inner: &Inner,
    blocks: Vec<Wanted>,
    prefetch: bool,
    out: &mut [Option<Bytes>],
) -> Vec<Wanted> {
    let concurrency = inner.config.read().read_concurrency.max(1);
    let results: Vec<(Wanted, Option<Bytes>)> = futures::stream::iter(blocks)
        .map(|want| {
            let cache = inner.blocks.clone();
            let env = inner.env.clone();
            async move {
                let p = want.ptr;
                let got = cache.read_device(p, prefetch, env).await;
                (want, got)
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let mut missed = Vec::new();
    for (want, got) in results {
        match got.and_then(|phys| decode_hit(inner, &want.ptr, &phys).ok()) {
            Some(b) => out[want.at] = Some(b),
            None => missed.push(want),
        }
    }
    missed
}

/// Groups blocks that sit back to back in one segment into single ranged GETs.
fn coalesce(wanted: &[Wanted], max_req: u64) -> Vec<Vec<Wanted>> {
    let mut sorted = wanted.to_vec();
    sorted.sort_by_key(|w| (w.ptr.segment_id, w.ptr.offset_bytes));
    let mut groups: Vec<Vec<Wanted>> = Vec::new();
    for want in sorted {
        let p = want.ptr;
        if let Some(g) = groups.last_mut() {
            let (first, prev) = (g[0].ptr, g[g.len() - 1].ptr);
            let adjacent = prev.segment_id == p.segment_id && prev.range().end == p.range().start;
            if adjacent && p.range().end - first.range().start <= max_req {
                g.push(want);
                continue;
            }
        }
        groups.push(vec![want]);
    }
    groups
}

/// Splits the blocks no cache held into those another GET is fetching already (returned with its
/// signal) and GETs of this read's own, each claimed before it starts. Without a cache nothing
/// is claimed: a joined GET's blocks would have nowhere to wait for the second reader, which
/// would then fetch them after it instead of beside it.
fn claim(
    inner: &Inner,
    wanted: Vec<Wanted>,
    prefetch: bool,
    out: &mut [Option<Bytes>],
    max_req: u64,
) -> (Vec<Joined>, Vec<OwnGet>) {
    if inner.blocks.holds_nothing() {
        return (Vec::new(), coalesce(&wanted, max_req).into_iter().map(|g| (g, None)).collect());
    }
    let mut map = inner.fetching.0.lock();
    let mut joined = Vec::new();
    let mut mine = Vec::new();
    for w in wanted {
        if let Some(rx) = map.get(&location(&w.ptr)) {
            joined.push((w, rx.clone()));
            continue;
        }
        // A GET that finished since this read missed the cache (the device reads above may
        // have taken a while) put the block there before releasing its claim: look once more,
        // under this lock, so the block is either cached now or ours to fetch.
        if inner.blocks.in_ram(&w.ptr) {
            let hit = inner.blocks.get_ram(&w.ptr, prefetch);
            if let Some(b) = hit.and_then(|phys| decode_hit(inner, &w.ptr, &phys).ok()) {
                out[w.at] = Some(b);
                continue;
            }
        }
        mine.push(w);
    }
    let groups = coalesce(&mine, max_req)
        .into_iter()
        .map(|g| {
            let (done, rx) = watch::channel(false);
            let keys: Vec<(u64, u32)> = g.iter().map(|w| location(&w.ptr)).collect();
            for k in &keys {
                map.insert(*k, rx.clone());
            }
            (g, Some(Claim { fetching: inner.fetching.0.clone(), keys, done }))
        })
        .collect();
    (joined, groups)
}

/// Claims every block of `ptrs` for one GET of the caller's own that is more than their run
/// (map_along.rs), or none when another GET has claimed any of them already: the caller then
/// reads them as any read does, joining that GET. The caller caches them before it drops the
/// claim (see `Claim`).
pub(super) fn claim_all(inner: &Inner, ptrs: &[BlockPtr]) -> Option<Claim> {
    let mut map = inner.fetching.0.lock();
    if ptrs.iter().any(|p| map.contains_key(&location(p))) {
        return None;
    }
    let (done, rx) = watch::channel(false);
    let keys: Vec<(u64, u32)> = ptrs.iter().map(location).collect();
    for k in &keys {
        map.insert(*k, rx.clone());
    }
    Some(Claim { fetching: inner.fetching.0.clone(), keys, done })
}

/// A block another GET is fetching, with that GET's signal.
type Joined = (Wanted, watch::Receiver<bool>);

/// One coalesced GET of a read's own, with its claim (none without a cache).
type OwnGet = (Vec<Wanted>, Option<Claim>);

/// Waits for the GETs that demand blocks joined, then takes the blocks from the cache. Returns
/// the blocks found, by slot, and those still to fetch. No timer of its own: the wait is as
/// bounded as the GET it joined (the store's request timeout and retry budget), whose claim is
/// released when that GET ends, fails or is dropped. A timer on a manual clock would also skip
/// the simulation's time ahead at every join.
async fn wait_for_fetches(
    inner: &Inner,
    joined: Vec<Joined>,
) -> (Vec<(usize, Bytes)>, Vec<Wanted>) {
    let (mut found, mut still) = (Vec::new(), Vec::new());
    for (_, rx) in &joined {
        let mut rx = rx.clone();
        // Err: the sender is gone, which `Claim` only lets happen after it sent.
        let _ = rx.wait_for(|done| *done).await;
    }
    for (want, _) in joined {
        let p = &want.ptr;
        match inner.blocks.get_ram(p, false).and_then(|phys| decode_hit(inner, p, &phys).ok()) {
            Some(b) => found.push((want.at, b)),
            None => still.push(want),
        }
    }
    (found, still)
}

/// One coalesced GET; its blocks go into the cache verified.
async fn fetch_group(inner: &Inner, g: Vec<Wanted>, prefetch: bool) -> Result<Vec<Fetched>> {
    let start = g[0].ptr.range().start;
    let end = g[g.len() - 1].ptr.range().end;
    let caching = !inner.blocks.holds_nothing();
    // Each block copied out of the body once, into a buffer of its own, which the cache keeps
    // and a demand read returns: a slice would keep its whole chunk of the body (or a decrypted
    // run) alive for as long as any one of its blocks stays cached, and the ARC only counts the
    // block. The store copies them out as the body arrives and hashes each as it is cut, while
    // it is in the CPU's cache (objstore/blocks.rs). Without a cache the reader's slice of the
    // body is enough.
    let blocks = if caching {
        let ends: Vec<u64> = g.iter().map(|w| w.ptr.range().end - start).collect();
        get_segment_blocks(inner, g[0].ptr.segment_id, start..end, &ends).await?
    } else {
        let body = get_segment_range(inner, g[0].ptr.segment_id, start..end).await?;
        let slice = |w: &Wanted| body.slice(w.ptr.range().start - start..w.ptr.range().end - start);
        g.iter().map(|w| CutBlock::new(slice(w))).collect()
    };
    let mut out = Vec::with_capacity(g.len());
    let mut cached = Vec::with_capacity(if caching { g.len() } else { 0 });
    for (Wanted { at, ptr: p }, CutBlock { bytes: phys, checksum }) in g.into_iter().zip(blocks) {
        check_sum(inner, &p, checksum)?;
        // A prefetch only caches the block: the reader that takes it from the cache decodes it
        // then, so decoding it here too would be a copy thrown away.
        let logical = if prefetch { Bytes::new() } else { decode(&p, &phys)? };
        if caching {
            cached.push((p, phys));
        }
        out.push(Fetched { at, logical });
    }
    // All verified: into the cache together (a block that failed its checksum above failed the
    // whole GET, as before, and nothing of it was cached).
    inner.blocks.insert_many(cached, prefetch);
    Ok(out)
}

/// A range of a segment asked for before the read knows which blocks it holds (cold_read.rs):
/// its bytes, or None when the store did not give them (a guess that fails costs nothing more).
pub(super) async fn get_guessed_range(
    inner: &Inner,
    segment_id: u64,
    range: std::ops::Range<u64>,
) -> Option<Body> {
    let body = get_segment_range(inner, segment_id, range.clone()).await.ok()?;
    (body.len() == range.end - range.start).then_some(body)
}

/// Whether block `p` lies in bytes `range` of segment `segment_id` (a guess's GET).
pub(super) fn in_range(p: &BlockPtr, segment_id: u64, range: &std::ops::Range<u64>) -> bool {
    p.segment_id == segment_id && p.range().start >= range.start && p.range().end <= range.end
}

/// Takes the blocks of `sources` that lie in `body` (segment `segment_id`'s bytes `range`)
/// from it: each checked against its pointer's checksum and decoded into `Source::Mem`, and, with
/// a cache, cached with `neighbours` (other blocks of the same leaf in the range) as
/// prefetches. A block whose bytes do not match is left to the normal fetch, which reports it if
/// the store's copy is bad.
pub(super) fn take_guessed(
    inner: &Inner,
    sources: &mut [Source],
    neighbours: &[BlockPtr],
    segment_id: u64,
    range: &std::ops::Range<u64>,
    body: &Body,
) {
    let start = range.start;
    let inside = |p: &BlockPtr| in_range(p, segment_id, range);
    let phys_of = |p: &BlockPtr| {
        let phys = body.slice(p.range().start - start..p.range().end - start);
        (checksum64(&phys) == p.checksum).then_some(phys)
    };
    let caching = !inner.blocks.holds_nothing();
    let mut cached = Vec::new();
    for s in sources.iter_mut() {
        let Source::Ptr(p) = s else { continue };
        let p = *p;
        let Some(phys) = inside(&p).then(|| phys_of(&p)).flatten() else { continue };
        let Ok(logical) = decode(&p, &phys) else { continue };
        if caching {
            // A buffer of its own: a slice would keep the whole body alive (see fetch_group).
            cached.push((p, Bytes::copy_from_slice(&phys)));
        }
        *s = Source::Mem(logical);
    }
    inner.blocks.insert_many(cached, false);
    if caching {
        cache_prefetched(inner, neighbours, segment_id, range, body);
    }
}

/// The blocks of `ptrs` inside `body` (segment `segment_id`'s bytes `range`) that the ARC does
/// not hold, into it as prefetches: each checked against its pointer and copied into a buffer of
/// its own (a slice would keep the whole body cached, see `fetch_group`). A block whose bytes do
/// not match is left to the read that needs it. Returns how many went in.
pub(super) fn cache_prefetched<'a>(
    inner: &Inner,
    ptrs: impl IntoIterator<Item = &'a BlockPtr>,
    segment_id: u64,
    range: &std::ops::Range<u64>,
    body: &Body,
) -> usize {
    let cached: Vec<(BlockPtr, Bytes)> = ptrs
        .into_iter()
        .filter(|p| in_range(p, segment_id, range) && !inner.blocks.in_ram(p))
        .filter_map(|p| {
            let phys = body.slice(p.range().start - range.start..p.range().end - range.start);
            (checksum64(&phys) == p.checksum).then(|| (*p, Bytes::copy_from_slice(&phys)))
        })
        .collect();
    let n = cached.len();
    inner.blocks.insert_many(cached, true);
    n
}

/// Why a read fails when the store has no segment its pointer names.
const SEGMENT_MISSING: &str = "missing from the store although the map references it";

pub(super) fn is_missing_segment(e: &Error) -> bool {
    matches!(e, Error::Corrupt { why, .. } if why == SEGMENT_MISSING)
}

/// A segment's bytes `range`, as the store's chunks (objstore/body.rs).
pub(super) async fn get_segment_range(
    inner: &Inner,
    segment_id: u64,
    range: std::ops::Range<u64>,
) -> Result<Body> {
    inner.counters.add_store_read(range.end - range.start);
    let got = inner.store.get_range_body(&segment_key(segment_id), range).await;
    got.map_err(|e| segment_read_error(segment_id, e))
}

/// A segment's bytes `range` cut at `ends` (offsets in the range), each block in a buffer of
/// its own (objstore/blocks.rs).
async fn get_segment_blocks(
    inner: &Inner,
    segment_id: u64,
    range: std::ops::Range<u64>,
    ends: &[u64],
) -> Result<Vec<CutBlock>> {
    inner.counters.add_store_read(range.end - range.start);
    let got = inner.store.get_range_blocks(&segment_key(segment_id), range, ends).await;
    got.map_err(|e| segment_read_error(segment_id, e))
}

fn segment_read_error(segment_id: u64, e: crate::objstore::StoreError) -> Error {
    if e.kind == StoreErrorKind::NotFound {
        Error::corrupt(format!("segment {segment_id:016x}"), SEGMENT_MISSING)
    } else {
        e.into()
    }
}

/// Checksum before decompression (rule 3); a mismatch is counted and never returned. A block
/// stored uncompressed (incompressible data) is returned as the same bytes, not a copy.
fn verify_decode(inner: &Inner, p: &BlockPtr, phys: &Bytes) -> Result<Bytes> {
    verify(inner, p, phys)?;
    decode(p, phys)
}

/// A block the cache returned: checked against the pointer's checksum by the cache itself when
/// it says so (the ARC keeps the checksum each block was verified with, the L2ARC hashes what it
/// reads), by us otherwise. Hashing every 4 KiB hit again cost a tenth of a cached read's CPU.
fn decode_hit(inner: &Inner, p: &BlockPtr, phys: &Bytes) -> Result<Bytes> {
    if inner.blocks.hits_verified() {
        decode(p, phys)
    } else {
        verify_decode(inner, p, phys)
    }
}

pub(super) fn decode(p: &BlockPtr, phys: &Bytes) -> Result<Bytes> {
    match p.compression()? {
        Compression::Off if phys.len() == p.logical_bytes as usize => Ok(phys.clone()),
        algo => Ok(Bytes::from(decompress(algo, phys, p.logical_bytes as usize)?)),
    }
}

/// The checksum alone.
fn verify(inner: &Inner, p: &BlockPtr, phys: &[u8]) -> Result<()> {
    check_sum(inner, p, checksum64(phys))
}

/// A block's bytes hashed to `found` (rule 3): a mismatch is counted, the cached copy dropped,
/// and the read fails.
pub(super) fn check_sum(inner: &Inner, p: &BlockPtr, found: u64) -> Result<()> {
    if found != p.checksum {
        inner.counters.add_checksum_error();
        inner.blocks.invalidate(p);
        return Err(Error::Checksum {
            what: format!("block at segment {:016x} offset {}", p.segment_id, p.offset_bytes),
            expected: p.checksum,
            found,
        });
    }
    Ok(())
}

/// One block by pointer, through the caches (map pages, compaction), joining a GET of it in
/// flight.
pub(crate) async fn read_verified(inner: &Inner, p: &BlockPtr) -> Result<Bytes> {
    let mut blocks = fetch_blocks(inner, &[Source::Ptr(*p)], false).await?;
    blocks.pop().ok_or_else(|| Error::Bug("one block asked, none read".into()))
}

/// Reads blocks for the block map through the block cache.
#[async_trait::async_trait]
impl BlockSource for Inner {
    async fn read_block(&self, ptr: &BlockPtr) -> Result<Bytes> {
        read_verified(self, ptr).await
    }

    /// Through the caches, with adjacent blocks coalesced into one GET (a batch of map pages).
    async fn read_blocks(&self, ptrs: &[BlockPtr]) -> Result<Vec<Bytes>> {
        let sources: Vec<Source> = ptrs.iter().map(|p| Source::Ptr(*p)).collect();
        fetch_blocks(self, &sources, false).await
    }
}

#[cfg(test)]
#[path = "fetch_tests.rs"]
mod tests;
