//! Tunables of an imported pool, with ZFS-like defaults. Properties stored in the root override
//! them at import (`txg_timeout`, `compression`, ...); their names, defaults and allowed values
//! are the property table's (`crate::props`).

use crate::compress::Compression;
use crate::error::Result;
use crate::objstore::RetryPolicy;
use crate::props::{
    ARC_STREAM_BYTES_MAX, COLD_READ_BYTES_MAX, COMPRESSION, DIRTY_BYTES_MAX, FAILMODE,
    FREE_PAGES_PER_TXG_MAX, FREE_QUEUE_ENTRIES_MAX, LOG_LEG_TIMEOUT_MS, LOG_WRITE_AHEAD,
    MAP_CACHE_BYTES, MAP_READAHEAD_PAGES_MAX, READAHEAD_BYTES_MAX, READ_CONCURRENCY, ROOTS_KEPT,
    ROOT_RETENTION_S, TXG_TIMEOUT,
};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Sync the open txg at least this often when it holds changes; None = only on demand (tests).
    pub txg_timeout: Option<Duration>,
    /// Hard limit of dirty bytes (open + syncing txg); writers stall above it.
    pub dirty_bytes_max: u64,
    /// The open txg is synced early once it holds this much.
    pub dirty_sync_bytes: u64,
    /// Writes are delayed progressively once dirty data passes this share of the maximum.
    pub dirty_delay_min_percent: u64,
    /// Each write's delay at the midpoint of the delay curve.
    pub dirty_delay_scale_us: u64,
    pub segment_bytes_target: usize,
    pub upload_concurrency: usize,
    pub read_concurrency: usize,
    /// Largest single ranged GET when coalescing adjacent blocks: the segment size, so a
    /// readahead window asks for whole segments as a raw reader of the objects would (4 MiB
    /// made 304-314 GETs per cold GiB and read at 43-51 % of raw GETs; 16 MiB 119-129 GETs,
    /// bench/notes/engine-store.md).
    pub read_request_bytes_max: u64,
    pub map_cache_bytes: usize,
    pub compression: Compression,
    pub retry: RetryPolicy,
    /// Segments under this share of live bytes are rewritten by compaction.
    pub compact_live_percent: u64,
    /// Bytes compaction may move per txg (so it never starves user writes).
    pub compact_bytes_per_txg: u64,
    /// Roots kept behind the newest (point-in-time import window); segments freed by a txg are
    /// deleted only when no kept root can reference them.
    pub roots_kept: u64,
    /// Roots younger than this are kept too (with everything they reference), so the pool can be
    /// imported read-only as it was at any txg of that window (0: only `roots_kept`).
    pub root_retention_s: u64,
    /// Sequential reads trigger readahead up to this many bytes ahead.
    pub readahead_bytes_max: u64,
    /// The most of one sequential stream the ARC keeps (`arc_stream_bytes_max`; 0: no limit).
    pub arc_stream_bytes_max: u64,
    /// Leaf map pages that ride along in a map page's GET when stored right after it.
    pub map_readahead_pages_max: u64,
    /// Bytes a read whose leaf is not cached asks for beside it where its level-1 page's hint
    /// says its blocks are (`cold_read_bytes_max`; 0: none).
    pub cold_read_bytes_max: u64,
    /// `failmode=wait`: a read the store cannot answer within the retry budget retries until it
    /// can (pool/read.rs); false: it fails (EIO at the front ends).
    pub failmode_wait: bool,
    /// `log_write_ahead=on`: plain writes' records are written to the log as they come, and a
    /// sync request then needs only the flush (pool/intent).
    pub log_write_ahead: bool,
    /// How long a mirrored log's write waits for a leg once another answered it (fardisk-slog
    /// `OpenOptions::leg_timeout_ms`).
    pub log_leg_timeout_ms: u64,
    /// None: a txg whose upload fails is retried until the store comes back (production).
    /// Some(n): give up after n attempts and fault the pool (tests that simulate a crash).
    pub sync_attempts_max: Option<u64>,
    /// Where a fenced writer writes the records it acknowledged and never published (held.rs);
    /// None: they stay only in its log until the process ends.
    pub held_records_dir: Option<std::path::PathBuf>,
    /// Pages of queued subtrees (trims, rollbacks, destroyed volumes) a txg frees (frees.rs).
    pub free_pages_per_txg_max: u64,
    /// Entries the root's free queue holds before a txg frees past `free_pages_per_txg_max`.
    pub free_queue_entries_max: u64,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            txg_timeout: Some(Duration::from_secs(TXG_TIMEOUT.default_number())),
            dirty_bytes_max: DIRTY_BYTES_MAX.default_number(),
            dirty_sync_bytes: 96 << 20,
            dirty_delay_min_percent: 60,
            dirty_delay_scale_us: 500,
            segment_bytes_target: 16 << 20,
            upload_concurrency: 8,
            read_concurrency: READ_CONCURRENCY.default_number() as usize,
            read_request_bytes_max: 16 << 20,
            map_cache_bytes: MAP_CACHE_BYTES.default_number() as usize,
            compression: Compression::Lz4,
            retry: RetryPolicy::default(),
            compact_live_percent: 50,
            compact_bytes_per_txg: 64 << 20,
            roots_kept: ROOTS_KEPT.default_number(),
            root_retention_s: ROOT_RETENTION_S.default_number(),
            readahead_bytes_max: READAHEAD_BYTES_MAX.default_number(),
            arc_stream_bytes_max: ARC_STREAM_BYTES_MAX.default_number(),
            map_readahead_pages_max: MAP_READAHEAD_PAGES_MAX.default_number(),
            cold_read_bytes_max: COLD_READ_BYTES_MAX.default_number(),
            failmode_wait: FAILMODE.default_text() == "wait",
            log_write_ahead: LOG_WRITE_AHEAD.default_text() == "on",
            log_leg_timeout_ms: LOG_LEG_TIMEOUT_MS.default_number(),
            sync_attempts_max: None,
            held_records_dir: None,
            free_pages_per_txg_max: FREE_PAGES_PER_TXG_MAX.default_number(),
            free_queue_entries_max: FREE_QUEUE_ENTRIES_MAX.default_number(),
        }
    }
}

pub use crate::props::{validate_prop, POOL_PROPS};

impl PoolConfig {
    /// Applies the stored properties over these tunables (only those the pool sets: a value
    /// the caller chose stays when the pool has none). A stored value that does not parse stops
    /// the import with the property's refusal.
    pub fn apply_props(&mut self, props: &BTreeMap<String, String>) -> Result<()> {
        if let Some(v) = props.get(COMPRESSION.name) {
            self.compression = Compression::parse(v)?;
        }
        // Tests that drive txgs by hand run without a timeout; a stored one does not start it.
        if let (Some(_), Some(s)) = (self.txg_timeout, TXG_TIMEOUT.stored_number(props)?) {
            self.txg_timeout = Some(Duration::from_secs(s));
        }
        if let Some(bytes) = DIRTY_BYTES_MAX.stored_number(props)? {
            self.dirty_bytes_max = bytes;
            self.dirty_sync_bytes = self.dirty_sync_bytes.min(self.dirty_bytes_max / 4);
        }
        if let Some(n) = ROOTS_KEPT.stored_number(props)? {
            self.roots_kept = n.max(1);
        }
        // The page cache is sized at import: a `set` takes effect at the next one.
        if let Some(bytes) = MAP_CACHE_BYTES.stored_number(props)? {
            self.map_cache_bytes = bytes.try_into().unwrap_or(usize::MAX);
        }
        if let Some(s) = ROOT_RETENTION_S.stored_number(props)? {
            self.root_retention_s = s;
        }
        if let Some(n) = FREE_PAGES_PER_TXG_MAX.stored_number(props)? {
            self.free_pages_per_txg_max = n;
        }
        if let Some(n) = FREE_QUEUE_ENTRIES_MAX.stored_number(props)? {
            self.free_queue_entries_max = n;
        }
        if let Some(n) = READ_CONCURRENCY.stored_number(props)? {
            self.read_concurrency = n.try_into().unwrap_or(usize::MAX);
        }
        if let Some(bytes) = READAHEAD_BYTES_MAX.stored_number(props)? {
            self.readahead_bytes_max = bytes;
        }
        if let Some(bytes) = ARC_STREAM_BYTES_MAX.stored_number(props)? {
            self.arc_stream_bytes_max = bytes;
        }
        if let Some(n) = MAP_READAHEAD_PAGES_MAX.stored_number(props)? {
            self.map_readahead_pages_max = n;
        }
        if let Some(bytes) = COLD_READ_BYTES_MAX.stored_number(props)? {
            self.cold_read_bytes_max = bytes;
        }
        if let Some(v) = props.get(FAILMODE.name) {
            self.failmode_wait = v == "wait";
        }
        if let Some(v) = props.get(LOG_WRITE_AHEAD.name) {
            self.log_write_ahead = v == "on";
        }
        if let Some(ms) = LOG_LEG_TIMEOUT_MS.stored_number(props)? {
            self.log_leg_timeout_ms = ms;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_property_tables() {
        let c = PoolConfig::default();
        assert_eq!(c.txg_timeout, Some(Duration::from_secs(5)));
        assert_eq!(c.dirty_bytes_max, 512 << 20);
        assert_eq!(c.map_cache_bytes, 128 << 20);
        assert_eq!(c.compression.name(), COMPRESSION.default_text());
        assert_eq!((c.roots_kept, c.root_retention_s), (8, 0));
        assert_eq!((c.read_concurrency, c.readahead_bytes_max), (32, 128 << 20));
        assert!(c.failmode_wait, "reads wait through an outage unless told otherwise");
    }

    #[test]
    fn stored_properties_override_only_what_they_set() {
        let mut c =
            PoolConfig { txg_timeout: None, dirty_bytes_max: 32 << 20, ..Default::default() };
        let props = BTreeMap::from([
            ("txg_timeout".to_string(), "30".to_string()),
            ("map_cache_bytes".to_string(), "16777216".to_string()),
            ("roots_kept".to_string(), "0".to_string()),
            ("compression".to_string(), "zstd".to_string()),
            ("free_pages_per_txg_max".to_string(), "64".to_string()),
            ("read_concurrency".to_string(), "4".to_string()),
            ("readahead_bytes_max".to_string(), "0".to_string()),
            ("failmode".to_string(), "continue".to_string()),
        ]);
        assert_eq!(c.free_pages_per_txg_max, 256, "the property table's default");
        c.apply_props(&props).expect("valid");
        assert_eq!((c.free_pages_per_txg_max, c.free_queue_entries_max), (64, 8192));
        assert_eq!(c.txg_timeout, None, "a test's hand-driven txgs stay hand-driven");
        assert_eq!(c.dirty_bytes_max, 32 << 20);
        assert_eq!(c.map_cache_bytes, 16 << 20);
        assert_eq!(c.roots_kept, 1);
        assert_eq!(c.compression, Compression::Zstd);
        assert_eq!((c.read_concurrency, c.readahead_bytes_max), (4, 0));
        assert!(!c.failmode_wait);
        let bad = BTreeMap::from([("dirty_bytes_max".to_string(), "lots".to_string())]);
        assert!(PoolConfig::default().apply_props(&bad).is_err());
    }
}
