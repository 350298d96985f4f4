//! The engine's block cache backed by the ARC (RAM) and, when the pool has cache devices, the
//! L2ARC (local SSD), fed from the ARC's evictions at a capped rate. Keys are block locations,
//! which never change meaning, and every block is verified against its pointer's checksum by the
//! caller as well as by the L2ARC.

use crate::blkptr::BlockPtr;
use crate::cache::BlockCache;
use bytes::Bytes;
use fardisk_arc::{AdaptiveCache, ArcConfig, BlockKey, InsertKind, L2Arc, WriterHandle};
use parking_lot::Mutex;
use std::time::Duration;

/// How often the L2ARC writer drains the eviction feed.
const L2_TICK: Duration = Duration::from_millis(100);

pub struct ArcBlockCache {
    arc: AdaptiveCache,
    l2: Option<L2Arc>,
    writer: Mutex<Option<WriterHandle>>,
}

impl std::fmt::Debug for ArcBlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArcBlockCache").field("l2", &self.l2.is_some()).finish()
    }
}

fn key(p: &BlockPtr) -> BlockKey {
    BlockKey { segment_id: p.segment_id, offset_bytes: p.offset_bytes }
}

impl ArcBlockCache {
    /// An ARC of at most `arc_max_bytes` (at least an eighth of that is kept when shrinking), with
    /// an optional L2ARC whose writer starts at once.
    pub fn new(arc_max_bytes: u64, l2: Option<L2Arc>) -> ArcBlockCache {
        let arc = AdaptiveCache::new(ArcConfig::new(arc_max_bytes / 8, arc_max_bytes));
        let writer = l2.as_ref().map(|l| l.spawn_writer(arc.feed(), L2_TICK));
        ArcBlockCache { arc, l2, writer: Mutex::new(writer) }
    }

    pub fn arc(&self) -> &AdaptiveCache {
        &self.arc
    }

    pub fn l2(&self) -> Option<&L2Arc> {
        self.l2.as_ref()
    }

    /// Stops the L2ARC writer and makes what it wrote durable (export).
    pub fn shutdown(&self) {
        if let Some(w) = self.writer.lock().take() {
            w.stop();
        }
        if let Some(l2) = &self.l2 {
            l2.sync();
        }
    }

    pub fn stats_json(&self) -> serde_json::Value {
        serde_json::json!({
            "arc": self.arc.stats(),
            "l2arc": self.l2.as_ref().map(|l| l.stats()),
        })
    }
}

impl BlockCache for ArcBlockCache {
    fn get(&self, ptr: &BlockPtr, prefetch: bool) -> Option<Bytes> {
        let k = key(ptr);
        let hit = if prefetch { self.arc.get_prefetch(&k) } else { self.arc.get(&k) };
        if hit.is_some() {
            return hit;
        }
        let from_l2 = self.l2.as_ref()?.get(&k, ptr.checksum)?;
        let kind = if prefetch { InsertKind::Prefetch } else { InsertKind::Demand };
        self.arc.insert(k, from_l2.clone(), kind);
        Some(from_l2)
    }

    fn insert(&self, ptr: &BlockPtr, physical: Bytes, prefetch: bool) {
        let kind = if prefetch { InsertKind::Prefetch } else { InsertKind::Demand };
        self.arc.insert(key(ptr), physical, kind);
    }

    fn invalidate(&self, ptr: &BlockPtr) {
        let k = key(ptr);
        self.arc.remove(&k);
        if let Some(l2) = &self.l2 {
            l2.remove(&k);
        }
    }
}

// Replaced by the cache-warmup branch's run-time device management when it merges.
impl ArcBlockCache {
    pub fn add_device(&self, path: &std::path::Path, _pool_guid: u128, _size_bytes_if_new: u64, _force: bool) -> Result<(), String> {
        Err(format!("cannot add cache device {} to a running pool yet: export, 'fardisk create' it in, or re-import", path.display()))
    }
    pub fn remove_device(&self, _path: &std::path::Path) -> Result<(), String> {
        Ok(())
    }
}
