//! The write path: writes land in the open txg in memory, whole 4 KiB blocks at a time (partial
//! blocks are read, patched and re-dirtied), all-zero blocks become holes, and the dirty-data
//! throttle delays and finally stalls writers as ZFS's does.

use super::{bad, Pool};
use crate::clock::timeout;
use crate::dirty::{is_all_zero, Dirty, BLOCK_BYTES};
use crate::error::Result;
use bytes::{Bytes, BytesMut};
use std::time::Duration;

/// The longest a single write is delayed by the curve (the hard stop waits instead).
const DELAY_US_MAX: u64 = 100_000;
/// Wakeups a stalled writer waits for before re-checking the pool's health.
const STALL_WAIT_MS: u64 = 1_000;
/// Reads of a partial write's edge blocks before it gives up because a txg rotated after each.
const EDGE_READS_MAX: usize = 64;

/// The partial blocks at the ends of a write, as read before taking the txg lock.
struct Edges {
    head: Option<Bytes>,
    tail: Option<Bytes>,
    /// The open txg when they were read.
    read_in_txg: u64,
}

impl Pool {
    fn check_range(&self, volume_id: u32, offset: u64, len: u64) -> Result<u64> {
        let size = self
            .volume_size(volume_id)
            .ok_or_else(|| bad(format!("no volume with id {volume_id}")))?;
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(size),
            _ => Err(bad(format!("range {offset}+{len} is beyond the volume's {size} bytes"))),
        }
    }

    /// Writes `data` at `offset`; returns the txg it landed in. With `sync=always` the write is
    /// durable when this returns.
    pub async fn write(&self, volume_id: u32, offset: u64, data: Bytes) -> Result<u64> {
        let txg = self.write_inner(volume_id, offset, data, true).await?;
        if self.inner.meta.read().sync_always() {
            self.sync_request().await?;
        } else {
            self.write_ahead();
        }
        Ok(txg)
    }

    /// `log_write_ahead=on`: the records of the writes just applied start for the log devices
    /// now, so the next sync request finds them written (pool/intent; only while sync requests
    /// come).
    fn write_ahead(&self) {
        if self.inner.config.read().log_write_ahead {
            let now_us = self.inner.env.clock.mono_us();
            self.inner.intent.write_ahead(self.inner.txg.published_txg(), now_us);
        }
    }

    /// A write replayed from the intent log: it is in the log already.
    pub(crate) async fn write_unlogged(
        &self,
        volume_id: u32,
        offset: u64,
        data: Bytes,
    ) -> Result<u64> {
        self.write_inner(volume_id, offset, data, false).await
    }

    async fn write_inner(
        &self,
        volume_id: u32,
        offset: u64,
        data: Bytes,
        log: bool,
    ) -> Result<u64> {
        self.write_inner_with(volume_id, offset, data, log, None).await
    }

    /// `write_inner`, where `known_first` (if given) is the current content of the first block
    /// and the open txg when it was read, so this write cannot fail on a read unless a txg
    /// rotated meanwhile.
    async fn write_inner_with(
        &self,
        volume_id: u32,
        offset: u64,
        data: Bytes,
        log: bool,
        mut known_first: Option<(Bytes, u64)>,
    ) -> Result<u64> {
        self.check_writable()?;
        self.check_range(volume_id, offset, data.len() as u64)?;
        // A replayed write (not logged) is not throttled: no syncer runs until the replay is
        // done, so a stall would wait forever (an import under a lowered `dirty_bytes_max`
        // hung), and its dirty data is at most what the crashed writer held under its limit.
        if log {
            self.throttle(data.len() as u64).await?;
        }
        if data.is_empty() {
            return Ok(self.open_txg());
        }
        for _ in 0..EDGE_READS_MAX {
            let edges = match known_first.take() {
                Some((first, read_in_txg)) => Edges { head: Some(first), tail: None, read_in_txg },
                None => self.read_edges(volume_id, offset, data.len() as u64).await?,
            };
            #[cfg(test)]
            self.pause_for_test().await;
            if let Some(txg) = self.apply_write(volume_id, offset, &data, log, &edges)? {
                return Ok(txg);
            }
        }
        Err(crate::Error::Suspended(format!(
            "a partial-block write at {offset} found the txg changed after each of {EDGE_READS_MAX} reads of its edge blocks; retry"
        )))
    }

    /// Reads the partial blocks at the ends of a write (before taking the txg lock: a read may
    /// go to the store), noting the open txg first.
    async fn read_edges(&self, volume_id: u32, offset: u64, len: u64) -> Result<Edges> {
        let read_in_txg = self.open_txg();
        let first = offset / BLOCK_BYTES;
        let end = offset + len;
        let last = (end - 1) / BLOCK_BYTES;
        let head = if !offset.is_multiple_of(BLOCK_BYTES) || (first == last && len != BLOCK_BYTES) {
            Some(self.read(volume_id, first * BLOCK_BYTES, BLOCK_BYTES as u32).await?)
        } else {
            None
        };
        let tail = if last != first && !end.is_multiple_of(BLOCK_BYTES) {
            Some(self.read(volume_id, last * BLOCK_BYTES, BLOCK_BYTES as u32).await?)
        } else {
            None
        };
        Ok(Edges { head, tail, read_in_txg })
    }

    /// Applies the write to the open txg under the txg lock. Returns None, changing nothing, when
    /// an edge block must be patched but its bytes read before the lock may be stale: the block
    /// is not dirty in the open txg and a txg rotated since the read (another write of that
    /// block may have gone into the txg now syncing or published, after the read).
    fn apply_write(
        &self,
        volume_id: u32,
        offset: u64,
        data: &Bytes,
        log: bool,
        edges: &Edges,
    ) -> Result<Option<u64>> {
        let first = offset / BLOCK_BYTES;
        let end = offset + data.len() as u64;
        let last = (end - 1) / BLOCK_BYTES;
        let logbias_throughput = log && self.inner.meta.read().logbias_throughput(volume_id);
        let pending_max = self.inner.config.read().dirty_bytes_max;
        let mut t = self.inner.txg.state.lock();
        let txg = t.open_txg;
        let partial = |block: u64| {
            let b_start = block * BLOCK_BYTES;
            offset.max(b_start) != b_start
                || end.min(b_start + BLOCK_BYTES) != b_start + BLOCK_BYTES
        };
        if txg != edges.read_in_txg
            && [first, last].iter().any(|b| partial(*b) && t.open.get(volume_id, *b).is_none())
        {
            return Ok(None);
        }
        for block in first..=last {
            let b_start = block * BLOCK_BYTES;
            let lo = offset.max(b_start);
            let hi = end.min(b_start + BLOCK_BYTES);
            let piece = data.slice((lo - offset) as usize..(hi - offset) as usize);
            let d = if hi - lo == BLOCK_BYTES {
                whole_block(piece)
            } else {
                let edge =
                    if block == first { (&edges.head, "head") } else { (&edges.tail, "tail") };
                patch(t.open.get(volume_id, block), edge, (lo - b_start) as usize, &piece)?
            };
            t.open.insert(volume_id, block, d);
        }
        // Records given up for their size (intent/) are made durable by the txg: start it.
        let gave_up = log
            && self.inner.intent.record_write(
                txg,
                volume_id,
                offset,
                data,
                logbias_throughput,
                pending_max,
            );
        if gave_up || t.open.bytes >= self.inner.config.read().dirty_sync_bytes {
            self.inner.txg.kick();
        }
        Ok(Some(txg))
    }

    #[cfg(test)]
    async fn pause_for_test(&self) {
        let pause = self.inner.pause_before_write_lock.lock().take();
        if let Some(sem) = pause {
            let _ = sem.acquire().await.map(|p| p.forget());
        }
    }

    /// Makes `len` bytes at `offset` read as zeros and frees their space (TRIM, WRITE_ZEROES).
    pub async fn zero(&self, volume_id: u32, offset: u64, len: u64) -> Result<u64> {
        let txg = self.zero_inner(volume_id, offset, len, true).await?;
        self.write_ahead();
        Ok(txg)
    }

    pub(crate) async fn zero_unlogged(&self, volume_id: u32, offset: u64, len: u64) -> Result<u64> {
        self.zero_inner(volume_id, offset, len, false).await
    }

    async fn zero_inner(&self, volume_id: u32, offset: u64, len: u64, log: bool) -> Result<u64> {
        self.check_writable()?;
        self.check_range(volume_id, offset, len)?;
        let end = offset + len;
        let pending_max = self.inner.config.read().dirty_bytes_max;
        let first_full = offset.div_ceil(BLOCK_BYTES);
        let end_full = end / BLOCK_BYTES;
        // Unaligned edges are zero-filled writes (logged as writes); whole blocks become holes.
        if first_full >= end_full {
            return self
                .write_inner(volume_id, offset, Bytes::from(vec![0u8; len as usize]), log)
                .await;
        }
        // The partial last block is read before anything is applied: a read that fails (the
        // store away too long) must fail the whole request, not leave its middle zeroed.
        let tail = if end > end_full * BLOCK_BYTES {
            let read_in_txg = self.open_txg();
            Some((
                self.read(volume_id, end_full * BLOCK_BYTES, BLOCK_BYTES as u32).await?,
                read_in_txg,
            ))
        } else {
            None
        };
        if offset < first_full * BLOCK_BYTES {
            self.write_inner(
                volume_id,
                offset,
                Bytes::from(vec![0u8; (first_full * BLOCK_BYTES - offset) as usize]),
                log,
            )
            .await?;
        }
        let txg = {
            let mut t = self.inner.txg.state.lock();
            t.open.trim(volume_id, first_full, end_full);
            if log
                && self.inner.intent.record_zero(
                    t.open_txg,
                    volume_id,
                    first_full * BLOCK_BYTES,
                    (end_full - first_full) * BLOCK_BYTES,
                    pending_max,
                )
            {
                self.inner.txg.kick();
            }
            t.open_txg
        };
        if tail.is_some() {
            let zeros = Bytes::from(vec![0u8; (end - end_full * BLOCK_BYTES) as usize]);
            return self
                .write_inner_with(volume_id, end_full * BLOCK_BYTES, zeros, log, tail)
                .await;
        }
        Ok(txg)
    }

    /// ZFS's dirty-data throttle: no delay below `dirty_delay_min_percent` of the limit, then a
    /// delay that grows as dirty data approaches the limit, and a stall at the limit until a txg
    /// sync frees memory.
    async fn throttle(&self, incoming_bytes: u64) -> Result<()> {
        let (max, min_pct, scale_us) = {
            let c = self.inner.config.read();
            (c.dirty_bytes_max, c.dirty_delay_min_percent, c.dirty_delay_scale_us)
        };
        loop {
            let dirty = self.dirty_bytes();
            if dirty + incoming_bytes <= max || dirty == 0 {
                let min = max * min_pct / 100;
                if dirty > min {
                    let delay_us =
                        (scale_us * (dirty - min) / (max - dirty).max(1)).min(DELAY_US_MAX);
                    self.inner.counters.add_throttle_delay(delay_us);
                    self.inner.env.clock.sleep(Duration::from_micros(delay_us)).await;
                }
                return Ok(());
            }
            self.inner.counters.add_stall();
            self.inner.txg.kick();
            let freed = self.inner.txg.dirty_freed();
            let stall = Duration::from_millis(STALL_WAIT_MS);
            let _ = timeout(&*self.inner.env.clock, stall, freed).await;
            self.check_writable()?;
        }
    }

    pub fn dirty_bytes(&self) -> u64 {
        self.inner.txg.dirty_bytes()
    }
}

/// A block the write covers only in part, `piece` at byte `within`: patched onto the newest
/// version, the open txg's (`dirty`) if another writer got there first, else the edge block
/// read before the txg lock (`edge`: its bytes, and which edge it is).
fn patch(
    dirty: Option<Dirty>,
    edge: (&Option<Bytes>, &str),
    within: usize,
    piece: &[u8],
) -> Result<Dirty> {
    let base = match dirty {
        Some(Dirty::Data(b)) => b,
        Some(Dirty::Zero) => Bytes::from_static(&crate::dirty::ZERO_BLOCK),
        None => {
            let (read, which) = edge;
            read.clone().ok_or_else(|| crate::Error::Bug(format!("{which} block not read")))?
        }
    };
    let mut buf = BytesMut::from(&base[..]);
    buf[within..within + piece.len()].copy_from_slice(piece);
    Ok(whole_block(buf.freeze()))
}

fn whole_block(b: Bytes) -> Dirty {
    if is_all_zero(&b) {
        Dirty::Zero
    } else {
        Dirty::Data(b)
    }
}

#[cfg(test)]
#[path = "write_tests.rs"]
mod tests;
