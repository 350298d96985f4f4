//! What `status`, `iostat` and the metrics report of an imported pool: its health (health.rs),
//! its counters (counters.rs) and each subsystem's state, gathered without holding one
//! subsystem's lock while asking another.

use super::health::PoolHealth;
use super::Pool;
use crate::objstore::StoreStatsSnapshot;
use crate::space::SpaceTotals;
use std::sync::atomic::Ordering;

#[derive(Debug, Clone, serde::Serialize)]
pub struct VolumeInfo {
    pub name: String,
    pub id: u32,
    pub size_bytes: u64,
    pub allocated_bytes: u64,
}

/// Work the syncer does a bounded amount of per txg until the space comes back
/// (docs/design/0006-free-queue.md).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Freeing {
    /// Map subtrees cut off by trims, rollbacks and destroyed volumes, in the root's free queue.
    pub queued_subtrees: u64,
    /// Destroyed snapshots (and former maps) whose walk has not ended.
    pub trees_being_destroyed: u64,
    /// How far the walk under way has come through its volume's blocks, in percent (0 with
    /// none).
    pub destroy_done_percent: f64,
}

fn freeing(i: &super::Inner) -> Freeing {
    let meta = i.meta.read();
    let root = &meta.root;
    let first = root.destroying.iter().find(|d| d.cursor_block > 0);
    Freeing {
        queued_subtrees: root.free_queue.len() as u64,
        trees_being_destroyed: root.destroying.len() as u64,
        destroy_done_percent: first
            .map(|d| {
                let blocks = match meta.volumes.get(&d.volume_id) {
                    Some(v) => v.size_bytes / crate::dirty::BLOCK_BYTES,
                    None => d.tree.capacity_slots(),
                };
                (100.0 * d.cursor_block as f64 / blocks.max(1) as f64).min(100.0)
            })
            .unwrap_or(0.0),
    }
}

/// A point-in-time picture of the pool for `status --json` (fields are stable; add, never rename).
#[derive(Debug, Clone, serde::Serialize)]
pub struct PoolStatus {
    pub name: String,
    pub guid: String,
    pub health: PoolHealth,
    pub store: String,
    pub epoch: u64,
    pub import_id: String,
    pub published_txg: u64,
    pub published_time_ms: u64,
    /// Some(txg) when imported read-only at that txg (`import --read-only/--txg/--at`).
    pub read_only_txg: Option<u64>,
    pub open_txg: u64,
    pub dirty_bytes: u64,
    pub dirty_bytes_max: u64,
    pub syncing: bool,
    pub space: SpaceTotals,
    pub garbage_bytes: u64,
    pub compress_ratio: f64,
    pub volumes: Vec<VolumeInfo>,
    pub txgs_synced: u64,
    pub txg_sync_ms_avg: f64,
    pub segments_uploaded: u64,
    pub segment_bytes_uploaded: u64,
    pub checksum_errors: u64,
    pub throttle_delays: u64,
    pub throttle_stalls: u64,
    pub readahead_blocks: u64,
    pub compacted_segments: u64,
    pub deleted_segments: u64,
    /// Segments no root references that txgs never published (crash, fenced writer), deleted.
    pub orphans_deleted: u64,
    /// Reads waiting now for a store that does not answer (failmode=wait).
    pub reads_waiting_for_store: u64,
    /// Reads that waited for the store since import.
    pub reads_waited_for_store: u64,
    pub pending_deletes: u64,
    /// Space the next txgs are still freeing (trims, rollbacks, destroys).
    pub freeing: Freeing,
    pub map_cache_bytes: u64,
    pub store_requests: StoreStatsSnapshot,
    /// Log vdevs, legs and ZIL-like counters; null without a log.
    pub log: serde_json::Value,
    /// Warm-up of the saved hot set after import: regions total/done/skipped, regions tracked.
    pub warmup: serde_json::Value,
    /// The current or last scrub since import (state "none" before the first).
    pub scrub: super::ScrubProgress,
    /// Once fenced: the records this writer acknowledged and never published, and the file
    /// that holds them (held.rs); null otherwise.
    pub held: Option<super::HeldSummary>,
}

/// The intent log in `status --json` (names as zpool status and zil kstats use them).
fn log_json(inner: &super::Inner) -> serde_json::Value {
    let Some(log) = inner.intent.log() else { return serde_json::Value::Null };
    let vdevs: Vec<serde_json::Value> = log
        .status()
        .iter()
        .map(|v| {
            serde_json::json!({
                "guid": format!("{:016x}", v.vdev_guid),
                "kind": format!("{:?}", v.kind).to_ascii_lowercase(),
                "state": v.state.name(),
                "space_used_bytes": v.space_used_bytes,
                "space_total_bytes": v.space_total_bytes,
                "legs": v.legs.iter().map(|l| serde_json::json!({
                    "path": l.path, "state": l.state.name(), "read_errors": l.read_errors,
                    "write_errors": l.write_errors, "checksum_errors": l.checksum_errors, "timeouts": l.timeouts,
                    "volatile": l.volatile,
                    "io_waiting_ms": l.io_waiting_ms,
                    "io_stalled": l.io_waiting_ms.is_some_and(|ms| ms >= fardisk_slog::LEG_IO_STALLED_MS),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let st = log.stats();
    let healthy = log.status().iter().any(|v| matches!(v.state.name(), "ONLINE" | "DEGRADED"));
    serde_json::json!({
        "vdevs": vdevs,
        "healthy": healthy,
        "volatile": log.status().iter().flat_map(|v| v.legs.iter()).any(|l| l.volatile),
        "sync_requests": inner.intent.sync_requests.load(Ordering::Relaxed),
        "txg_fallbacks": inner.intent.fallbacks.load(Ordering::Relaxed),
        "commits": st.sync_requests,
        "device_writes": st.device_writes,
        "blocks_written_ahead": st.blocks_written_ahead,
        "flushes_without_write": st.flushes_without_write,
        "leg_flushes": st.leg_flushes,
        "group_commit_ratio": st.group_commit_ratio(),
        "bytes_logged": st.bytes_logged,
        "records_logged": st.records_logged,
        "log_full_events": st.log_full_events,
        "commit_errors": st.commit_errors,
        "space_used_bytes": st.space_used_bytes,
        "space_total_bytes": st.space_total_bytes,
        "commit_latency_us_total": st.latency_us_total,
        "commit_latency_us": st.latency_histogram_us.iter().map(|b| serde_json::json!({"le_us": b.le_us, "count": b.count})).collect::<Vec<_>>(),
    })
}

/// A store silent this long (every request failing without an answer) makes the pool SUSPENDED.
const STORE_SILENT_SUSPENDED_US: u64 = 5_000_000;

impl Pool {
    pub fn health(&self) -> PoolHealth {
        match self.health_base() {
            PoolHealth::Suspended(why) => {
                PoolHealth::Suspended(format!("{why}; {}", self.suspended_bounds()))
            }
            h => h,
        }
    }

    /// What is still acknowledged while the store is away, and up to which bound: an operator
    /// deciding whether to wait out an outage needs to know how long the database keeps going.
    fn suspended_bounds(&self) -> String {
        let (dirty_max, failmode_wait) = {
            let c = self.inner.config.read();
            (c.dirty_bytes_max, c.failmode_wait)
        };
        // Reads of blocks no cache holds: the one thing no log or dirty limit can carry.
        let reads = if failmode_wait {
            let n = self.inner.counters.snapshot().reads_waiting;
            format!(
                "; reads of blocks no cache holds wait for the store ({n} waiting; failmode=wait)"
            )
        } else {
            "; reads of blocks no cache holds fail after the retry budget (failmode=continue)"
                .to_string()
        };
        let dirty = format!(
            "writes continue until the dirty data reaches its limit ({} of {} MiB){reads}",
            self.dirty_bytes() >> 20,
            dirty_max >> 20
        );
        let Some(log) = self.inner.intent.log() else {
            return format!("sync writes wait for the store (no log); {dirty}");
        };
        let (used, total) = (log.space_used_bytes(), log.space_total_bytes());
        let used_pct = used * 100 / total.max(1);
        format!(
            "sync writes are acknowledged from the log until it is full ({used_pct} % of {} MiB used; it is released as txgs reach the store), then wait for the store; {dirty}",
            total >> 20
        )
    }

    fn health_base(&self) -> PoolHealth {
        let h = self.inner.health.lock().health.clone();
        if h != PoolHealth::Online {
            return h;
        }
        // Requests may spend a whole retry budget (tens of seconds) before a commit gives up an
        // attempt and suspends the pool; the store being silent that long is the truth already.
        let since_us =
            self.inner.store_stats.unreachable_since_us.load(std::sync::atomic::Ordering::Relaxed);
        let silent_us =
            if since_us == 0 { 0 } else { self.inner.env.clock.mono_us().saturating_sub(since_us) };
        if silent_us >= STORE_SILENT_SUSPENDED_US {
            return PoolHealth::Suspended(format!(
                "the store has not answered for {} s; txg commits wait and retry",
                silent_us / 1_000_000
            ));
        }
        // A read that spent its retry budget and waits (failmode=wait) is an outage as the
        // database sees it, however short the store's silence has been so far.
        if self.inner.counters.snapshot().reads_waiting > 0 {
            return PoolHealth::Suspended(
                "a read of the store failed after its retry budget and waits for the store; txg commits wait and retry".to_string(),
            );
        }
        // A log vdev that is not ONLINE makes the pool DEGRADED, as zpool status says.
        if let Some(log) = self.inner.intent.log() {
            let bad: Vec<String> = log
                .status()
                .iter()
                .filter(|v| v.state.name() != "ONLINE")
                .map(|v| format!("log vdev {:016x} is {}", v.vdev_guid, v.state.name()))
                .collect();
            if !bad.is_empty() {
                return PoolHealth::Degraded(bad.join(", "));
            }
        }
        h
    }

    pub fn status(&self) -> PoolStatus {
        let i = &self.inner;
        let c = i.counters.snapshot();
        // The root's part in one look, and `meta` released before anything else is asked: other
        // subsystems' locks are not taken under it here (lock order: pool/mod.rs).
        let (root, volumes) = {
            let meta = i.meta.read();
            let volumes: Vec<VolumeInfo> = meta
                .volumes
                .values()
                .map(|v| VolumeInfo {
                    name: v.name.clone(),
                    id: v.id,
                    size_bytes: v.size_bytes,
                    allocated_bytes: v.allocated_blocks * 4096,
                })
                .collect();
            ((meta.root.txg, meta.root.time_ms, meta.root.totals), volumes)
        };
        let (published_txg, published_time_ms, totals) = root;
        let (open_txg, syncing) = {
            let t = i.txg.state.lock();
            (t.open_txg, t.syncing.is_some())
        };
        let txgs = c.txgs;
        PoolStatus {
            name: i.name.clone(),
            guid: format!("{:032x}", i.guid),
            health: self.health(),
            store: i.store.describe(),
            epoch: i.epoch,
            import_id: format!("{:032x}", i.import_id),
            published_txg,
            read_only_txg: i.health.lock().read_only_txg,
            published_time_ms,
            open_txg,
            dirty_bytes: self.dirty_bytes(),
            dirty_bytes_max: i.config.read().dirty_bytes_max,
            syncing,
            space: totals,
            garbage_bytes: totals.garbage_bytes(),
            compress_ratio: totals.compress_ratio(),
            volumes,
            txgs_synced: txgs,
            txg_sync_ms_avg: if txgs == 0 {
                0.0
            } else {
                c.txg_sync_us_total as f64 / txgs as f64 / 1000.0
            },
            segments_uploaded: c.segments,
            segment_bytes_uploaded: c.segment_bytes,
            checksum_errors: c.checksum_errors,
            throttle_delays: c.throttle_delays,
            throttle_stalls: c.stalls,
            readahead_blocks: c.readahead_blocks,
            compacted_segments: c.compacted_segments,
            deleted_segments: c.deleted_segments,
            orphans_deleted: c.orphans_deleted,
            reads_waiting_for_store: c.reads_waiting,
            reads_waited_for_store: c.reads_waited,
            pending_deletes: i.reclaim.pending_deletes(),
            freeing: freeing(i),
            map_cache_bytes: i.cache.bytes_used() as u64,
            store_requests: i.store_stats.snapshot(),
            log: log_json(i),
            warmup: super::hotset::warmup_json(i),
            scrub: self.scrub_progress(),
            held: i.held.lock().clone(),
        }
    }
}
