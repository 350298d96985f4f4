//! The write path: writes land in the open txg in memory, whole 4 KiB blocks at a time (partial
//! blocks are read, patched and re-dirtied), all-zero blocks become holes, and the dirty-data
//! throttle delays and finally stalls writers as ZFS's does.

use super::{bad, Pool};
use crate::dirty::{is_all_zero, Dirty, BLOCK_BYTES};
use crate::error::Result;
use bytes::{Bytes, BytesMut};
use std::time::Duration;

/// The longest a single write is delayed by the curve (the hard stop waits instead).
const DELAY_US_MAX: u64 = 100_000;
/// Wakeups a stalled writer waits for before re-checking the pool's health.
const STALL_WAIT_MS: u64 = 1_000;

impl Pool {
    fn check_range(&self, volume_id: u32, offset: u64, len: u64) -> Result<u64> {
        let size = self.volume_size(volume_id).ok_or_else(|| bad(format!("no volume with id {volume_id}")))?;
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(size),
            _ => Err(bad(format!("range {offset}+{len} is beyond the volume's {size} bytes"))),
        }
    }

    /// Writes `data` at `offset`; returns the txg it landed in.
    pub async fn write(&self, volume_id: u32, offset: u64, data: Bytes) -> Result<u64> {
        self.check_writable()?;
        self.check_range(volume_id, offset, data.len() as u64)?;
        self.throttle(data.len() as u64).await?;
        let mut pos = 0usize;
        let mut txg = 0;
        while pos < data.len() {
            let abs = offset + pos as u64;
            let block = abs / BLOCK_BYTES;
            let within = (abs % BLOCK_BYTES) as usize;
            let n = (BLOCK_BYTES as usize - within).min(data.len() - pos);
            let piece = data.slice(pos..pos + n);
            txg = if n == BLOCK_BYTES as usize {
                self.put_block(volume_id, block, whole_block(piece))
            } else {
                self.patch_block(volume_id, block, within, piece).await?
            };
            pos += n;
        }
        Ok(txg)
    }

    /// Makes `len` bytes at `offset` read as zeros and frees their space (TRIM, WRITE_ZEROES).
    pub async fn zero(&self, volume_id: u32, offset: u64, len: u64) -> Result<u64> {
        self.check_writable()?;
        self.check_range(volume_id, offset, len)?;
        let end = offset + len;
        let mut txg = self.open_txg();
        let mut abs = offset;
        // Bounded by the range: one step per block, partial blocks at the ends are patched.
        while abs < end {
            let block = abs / BLOCK_BYTES;
            let within = (abs % BLOCK_BYTES) as usize;
            let n = (BLOCK_BYTES - within as u64).min(end - abs);
            if n == BLOCK_BYTES {
                self.throttle(64).await?;
                txg = self.put_block(volume_id, block, Dirty::Zero);
            } else {
                let zeros = Bytes::from(vec![0u8; n as usize]);
                txg = self.patch_block(volume_id, block, within, zeros).await?;
            }
            abs += n;
        }
        Ok(txg)
    }

    fn put_block(&self, volume_id: u32, block: u64, d: Dirty) -> u64 {
        let mut t = self.inner.txg.lock();
        t.open.insert(volume_id, block, d);
        if t.open.bytes >= self.inner.config.read().dirty_sync_bytes {
            self.inner.kick.notify_one();
        }
        t.open_txg
    }

    /// Read-modify-write of part of a block. If another writer dirtied the block while we read
    /// the old contents, the patch goes onto that newer version instead.
    async fn patch_block(&self, volume_id: u32, block: u64, within: usize, piece: Bytes) -> Result<u64> {
        let base = self.read(volume_id, block * BLOCK_BYTES, BLOCK_BYTES as u32).await?;
        let mut t = self.inner.txg.lock();
        let current = match t.open.get(volume_id, block) {
            Some(Dirty::Data(b)) => b.clone(),
            Some(Dirty::Zero) => Bytes::from(vec![0u8; BLOCK_BYTES as usize]),
            None => base,
        };
        let mut buf = BytesMut::from(&current[..]);
        buf[within..within + piece.len()].copy_from_slice(&piece);
        t.open.insert(volume_id, block, whole_block(buf.freeze()));
        Ok(t.open_txg)
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
                    let delay_us = (scale_us * (dirty - min) / (max - dirty).max(1)).min(DELAY_US_MAX);
                    self.inner.counters.add_throttle_delay(delay_us);
                    self.inner.env.clock.sleep(Duration::from_micros(delay_us)).await;
                }
                return Ok(());
            }
            self.inner.counters.add_stall();
            self.inner.kick.notify_one();
            let freed = self.inner.dirty_freed.notified();
            let _ = tokio::time::timeout(Duration::from_millis(STALL_WAIT_MS), freed).await;
            self.check_writable()?;
        }
    }

    pub fn dirty_bytes(&self) -> u64 {
        let t = self.inner.txg.lock();
        t.open.bytes + t.syncing.as_ref().map(|s| s.bytes).unwrap_or(0)
    }
}

fn whole_block(b: Bytes) -> Dirty {
    if is_all_zero(&b) {
        Dirty::Zero
    } else {
        Dirty::Data(b)
    }
}
