//! The read path: dirty data first (open, then syncing txg), then the block map, then the blocks
//! themselves through the caches and the store (fetch.rs). Sequential access triggers readahead.
//! Reads never wait for uploads: the syncing txg's data stays readable in memory until its root
//! is published.

use super::fetch::{block_ptrs, fetch_blocks, fetch_blocks_then, is_missing_segment, Source};
use super::readahead::step_selection;
use super::{bad, Pool};
use crate::blkptr::BlockPtr;
use crate::blockmap::FANOUT;
use crate::clock::timeout;
use crate::dirty::{Dirty, BLOCK_BYTES};
use crate::error::Result;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;

/// Longest pause between two attempts of a read waiting for the store (failmode=wait).
const STORE_WAIT_MS_MAX: u64 = 5_000;

impl Pool {
    /// Reads `len` bytes at `offset`. Holes read as zeros.
    ///
    /// A read whose bytes only the store holds, while the store does not answer within its
    /// retry budget, waits for it with `failmode=wait` (the default), as a commit does
    /// (txg/retry.rs), and fails with `continue`. A database's query then stalls through an
    /// outage instead of failing: PostgreSQL turns an EIO on a data file into an ERROR that
    /// aborts the transaction (pgbench aborts the client), and ext4 an EIO on its metadata into
    /// an error that may take the file system read-only. Status counts the reads waiting.
    pub async fn read(&self, volume_id: u32, offset: u64, len: u32) -> Result<Bytes> {
        let parts = self.read_parts(volume_id, offset, len).await?;
        Ok(join_parts(parts, len as usize))
    }

    /// Reads `len` bytes at `offset` as parts in order (the cache's or the dirty set's blocks,
    /// the first and the last cut to the range), whose concatenation is what [`Pool::read`]
    /// returns: a front end that writes them out with one vectored write (FUSE's writev) saves
    /// the copy into one buffer (no faster on engine-store's cold read, where the first touch of
    /// blocks readahead brought earlier is the cost either way). Waits for the store as
    /// [`Pool::read`] does.
    pub async fn read_parts(&self, volume_id: u32, offset: u64, len: u32) -> Result<Vec<Bytes>> {
        let mut waiting = None;
        let mut wait_ms = 100;
        loop {
            match self.read_once(volume_id, offset, len).await {
                Err(crate::Error::Store(e))
                    if e.is_transient() && self.inner.config.read().failmode_wait =>
                {
                    if waiting.is_none() {
                        tracing::warn!(error = %e, volume_id, offset, "a read waits for the store (failmode=wait)");
                        waiting = Some(self.inner.counters.read_waiting());
                    }
                    self.inner.env.clock.sleep(std::time::Duration::from_millis(wait_ms)).await;
                    wait_ms = (wait_ms * 2).min(STORE_WAIT_MS_MAX);
                }
                other => {
                    if waiting.is_some() && other.is_ok() {
                        tracing::info!(
                            volume_id,
                            offset,
                            "a read that waited for the store succeeded"
                        );
                    }
                    return other;
                }
            }
        }
    }

    async fn read_once(&self, volume_id: u32, offset: u64, len: u32) -> Result<Vec<Bytes>> {
        let (size, tree) = self.readable_tree(volume_id)?;
        if offset.checked_add(len as u64).is_none_or(|e| e > size) {
            return Err(bad(format!("range {offset}+{len} is beyond the volume's {size} bytes")));
        }
        if len == 0 {
            return Ok(Vec::new());
        }
        let first = offset / BLOCK_BYTES;
        let last = (offset + len as u64 - 1) / BLOCK_BYTES;
        self.inner.hot.touch(volume_id, first, last);
        let mut tree = tree;
        let mut looked_again = 0;
        let mut sources = Vec::new();
        let blocks = loop {
            // A read whose leaf is not cached asks for it and for its blocks' likely place at
            // once (cold_read.rs); a second look, after a missing segment, asks plainly.
            let guess = if looked_again == 0 {
                self.cold_guess(volume_id, &tree, first, last)
            } else {
                None
            };
            let resolved = match guess {
                Some(g) => self.resolve_guessed(volume_id, tree, first, last, g).await,
                None => self.resolve(volume_id, tree, first, last).await,
            };
            let got = match resolved {
                Ok(s) => {
                    sources = s;
                    fetch_blocks(&self.inner, &sources, false).await
                }
                Err(e) => Err(e),
            };
            match got {
                // A segment the store does not have, for one of two reasons that are no damage:
                // - it left the store while this read waited between resolving its pointers and
                //   fetching them: an overwrite or compaction freed it and the collector deleted
                //   it roots_kept txgs later (reclaim/ does not wait for reads in flight; under
                //   load that is a second or two), and the map now points elsewhere;
                // - it is the running sync's, not uploaded yet: compaction's moves (and scrub's
                //   repairs) reach the map before their segment reaches the store, and no dirty
                //   data stands in for them as it does for written blocks (txg/).
                // So wait for the sync in progress to end, then look again, as scrub does. A
                // segment the current map still references fails again and is reported.
                Err(e) if is_missing_segment(&e) && looked_again < MISSING_SEGMENT_LOOKS_MAX => {
                    looked_again += 1;
                    let sync_done = self.inner.txg.sync_lock.lock();
                    let _ = timeout(&*self.inner.env.clock, MISSING_SEGMENT_WAIT, sync_done).await;
                    tree = self.readable_tree(volume_id)?.1;
                }
                other => break other?,
            }
        };
        let start = (offset % BLOCK_BYTES) as usize;
        if self.maybe_readahead(volume_id, first, last) {
            // A long stream: what it alone used leaves the cache (`arc_stream_bytes_max`).
            // `blocks` holds these bytes until the reply is built from them.
            self.inner.blocks.let_go_read_once(&block_ptrs(&sources));
        }
        // The blocks' own bytes (the cache's or the dirty set's, shared, never changed), the
        // first and the last cut to the range: no buffer to allocate and fill.
        let mut parts = blocks;
        let mut need = len as usize;
        let mut kept = 0;
        for (i, part) in parts.iter_mut().enumerate() {
            if need == 0 {
                break;
            }
            let from = if i == 0 { start } else { 0 };
            let n = part.len().saturating_sub(from).min(need);
            if n < part.len() {
                *part = part.slice(from..from + n);
            }
            need -= n;
            kept = i + 1;
        }
        parts.truncate(kept);
        if need != 0 {
            return Err(crate::Error::Bug(format!(
                "blocks for {offset}+{len} came {need} bytes short"
            )));
        }
        Ok(parts)
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
            let t = self.inner.txg.state.lock();
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
        // The leaf pages (one per FANOUT blocks) that blocks not dirty need.
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut b = first;
        while b <= last {
            let leaf_end = ((b / FANOUT as u64) + 1) * FANOUT as u64;
            let run_end = leaf_end.min(last + 1);
            if out[(b - first) as usize..(run_end - first) as usize].iter().any(|s| s.is_none()) {
                runs.push((b, run_end));
            }
            b = run_end;
        }
        if runs.is_empty() {
            return Ok(out.into_iter().map(|s| s.unwrap_or(Source::Zero)).collect());
        }
        let gen = self.inner.cache.generation();
        // The leaf pages first, batched: the pages above them one level at a time (usually
        // cached), then every missing leaf in one coalesced read, with the next few leaves
        // riding along in the same GET (`map_readahead_pages_max`). A long read, a readahead
        // window or a sequential reader then waits about one map round trip per batch, and
        // asks the store for about one map GET per batch instead of one per MiB of volume.
        let leaves: Vec<u64> = runs.iter().map(|&(b, _)| b / FANOUT as u64).collect();
        let ahead = self.inner.config.read().map_readahead_pages_max;
        tree.load_leaf_pages(&self.inner.cache, &*self.inner, &leaves, ahead, gen).await?;
        // Now mostly cache hits; a page the cache could not keep (the tree changed meanwhile,
        // or it was evicted) is read here, `read_concurrency` at a time.
        let lookup = |(b, run_end): (u64, u64)| async move {
            let cache = &self.inner.cache;
            let slots =
                tree.lookup_leaf_run(cache, &*self.inner, b, (run_end - b) as usize, gen).await?;
            Ok::<_, crate::error::Error>((b, slots))
        };
        // One run (any read inside one MiB of volume, so every 4 KiB random read) needs no
        // stream of lookups around it.
        let found = if let [run] = runs.as_slice() {
            vec![lookup(*run).await?]
        } else {
            let concurrency = self.inner.config.read().read_concurrency.max(1);
            let found: Vec<Result<(u64, Vec<crate::blockmap::Slot>)>> =
                futures::stream::iter(runs.iter().copied())
                    .map(lookup)
                    .buffered(concurrency)
                    .collect()
                    .await;
            found.into_iter().collect::<Result<Vec<_>>>()?
        };
        for (b, slots) in found {
            let i0 = (b - first) as usize;
            for (k, slot) in slots.iter().enumerate() {
                if out[i0 + k].is_none() {
                    let p = BlockPtr::from_bytes(slot)?;
                    out[i0 + k] = Some(if p.is_hole() { Source::Zero } else { Source::Ptr(p) });
                }
            }
        }
        Ok(out.into_iter().map(|s| s.unwrap_or(Source::Zero)).collect())
    }

    /// Sends readahead for a read of `first..=last` when it continues a sequential stream.
    /// Returns whether that stream has run past what the ARC keeps of one stream
    /// (`arc_stream_bytes_max`, at most a quarter of the cache's RAM).
    fn maybe_readahead(&self, volume_id: u32, first: u64, last: u64) -> bool {
        if self.inner.blocks.holds_nothing() {
            return false; // Prefetched blocks would have nowhere to go.
        }
        // At most an eighth of the cache's RAM ahead: blocks the cache cannot hold until the
        // reader gets there are fetched twice.
        // Map pages ahead in batches of at most an eighth of the map cache, so a batch is not
        // evicted before the reader gets there (one leaf page maps FANOUT blocks).
        // A batch's leaves ride along to the end of their run, up to a batch's budget
        // (`load_map`); `map_readahead_pages_max=0` turns riding along off.
        let (max, step, map_batch_max, ride_pages, kept_blocks) = {
            let c = self.inner.config.read();
            let ram = self.inner.blocks.ram_bytes_max();
            let max = c.readahead_bytes_max.min(ram / 8);
            let map_leaves = (c.map_cache_bytes / 8 / crate::blockmap::PAGE_BYTES) as u64;
            let kept = match c.arc_stream_bytes_max {
                0 => u64::MAX,
                bytes => bytes.min(ram / 4) / BLOCK_BYTES,
            };
            let ride_pages = match c.map_readahead_pages_max {
                0 => 0,
                pages => pages.max(map_leaves),
            };
            let map_batch_max = map_leaves * FANOUT as u64;
            let step = c.read_request_bytes_max / BLOCK_BYTES;
            (max / BLOCK_BYTES, step, map_batch_max, ride_pages, kept)
        };
        let (ahead, tree, claimed, after, streamed) = {
            let mut ra = self.inner.readahead.0.lock();
            let stream = ra.entry(volume_id).or_default();
            let ahead = stream.detector.on_read(first, last, max, step, map_batch_max);
            let streamed = stream.detector.run_blocks() > kept_blocks;
            let Some(ahead) = ahead else {
                return streamed;
            };
            let tree =
                self.inner.meta.read().volumes.get(&volume_id).map(|v| (v.tree, v.size_bytes));
            let (claimed, next) = tokio::sync::oneshot::channel();
            let after = stream.claimed.replace(next);
            (ahead, tree, claimed, after, streamed)
        };
        let Some((tree, size)) = tree else { return streamed };
        let end_block = size / BLOCK_BYTES;
        let map = ahead.map.start..ahead.map.end.min(end_block);
        if !map.is_empty() {
            let pool = self.clone();
            tokio::spawn(async move { pool.load_map(tree, map, ride_pages).await });
        }
        let (from, end) = (ahead.blocks.start, ahead.blocks.end.min(end_block));
        if from >= end {
            return streamed;
        }
        let pool = self.clone();
        // Resolved a GET's worth further (the map pages are loaded a distance ahead), and at most
        // a quarter of the distance's cap, so a small ARC still holds what goes out: the step
        // takes the rest of the runs it started in its segments.
        let resolve_end = (end + step.min(max / 4)).min(end_block);
        tokio::spawn(async move {
            if let Some(after) = after {
                let _ = after.await; // The step before this one has claimed its blocks.
            }
            let Ok(sources) = pool.resolve(volume_id, tree, from, resolve_end - 1).await else {
                return;
            };
            let locations: Vec<Option<(u64, std::ops::Range<u64>)>> = sources
                .iter()
                .map(|s| match s {
                    Source::Ptr(p) => Some((p.segment_id, p.range())),
                    _ => None,
                })
                .collect();
            let (chosen, leading) = step_selection(&locations, (end - from) as usize);
            if let Some(stream) = pool.inner.readahead.0.lock().get_mut(&volume_id) {
                stream.detector.extended(end, from + leading as u64);
            }
            let mut sources: Vec<Option<Source>> = sources.into_iter().map(Some).collect();
            let wanted: Vec<Source> = chosen.iter().filter_map(|&i| sources[i].take()).collect();
            pool.inner.counters.add_readahead(wanted.len() as u64);
            let _ = fetch_blocks_then(&pool.inner, &wanted, true, Some(claimed)).await;
        });
        streamed
    }
}

/// Times a read resolves its pointers again after finding a segment gone (see `Pool::read`).
const MISSING_SEGMENT_LOOKS_MAX: u32 = 3;
/// The longest a read waits for the running sync before it looks again (a sync retrying through a
/// store outage may take much longer; the read then fails as it would have).
const MISSING_SEGMENT_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// `parts` in one buffer of `len` bytes: the part itself when there is one (a read inside one
/// block, a database's or a VM's 4 KiB random read, costs no copy).
fn join_parts(mut parts: Vec<Bytes>, len: usize) -> Bytes {
    if parts.len() <= 1 {
        return parts.pop().unwrap_or_default();
    }
    let mut out = BytesMut::with_capacity(len);
    for part in &parts {
        out.extend_from_slice(part);
    }
    out.freeze()
}
