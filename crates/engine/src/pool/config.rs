//! Tunables of an imported pool, with ZFS-like defaults. Properties stored in the root override
//! them at import (`txg_timeout`, `compression`, ...).

use crate::compress::Compression;
use crate::error::{Error, Result};
use crate::objstore::RetryPolicy;
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
    /// Largest single ranged GET when coalescing adjacent blocks.
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
    /// None: a txg whose upload fails is retried until the store comes back (production).
    /// Some(n): give up after n attempts and fault the pool (tests that simulate a crash).
    pub sync_attempts_max: Option<u64>,
    /// Where a fenced writer writes the records it acknowledged and never published (held.rs);
    /// None: they stay only in its log until the process ends.
    pub held_records_dir: Option<std::path::PathBuf>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            txg_timeout: Some(Duration::from_secs(5)),
            dirty_bytes_max: 512 << 20,
            dirty_sync_bytes: 96 << 20,
            dirty_delay_min_percent: 60,
            dirty_delay_scale_us: 500,
            segment_bytes_target: 16 << 20,
            upload_concurrency: 8,
            read_concurrency: 32,
            read_request_bytes_max: 4 << 20,
            map_cache_bytes: 64 << 20,
            compression: Compression::Lz4,
            retry: RetryPolicy::default(),
            compact_live_percent: 50,
            compact_bytes_per_txg: 64 << 20,
            roots_kept: 8,
            root_retention_s: 0,
            readahead_bytes_max: 8 << 20,
            sync_attempts_max: None,
            held_records_dir: None,
        }
    }
}

/// Properties a pool stores in its root, with their defaults; `get all` lists these.
pub const POOL_PROPS: &[(&str, &str)] = &[
    ("compression", "lz4"),
    ("txg_timeout", "5"),
    ("dirty_bytes_max", "536870912"),
    ("sync", "standard"),
    ("logbias", "latency"),
    ("arc_max", "1073741824"),
    ("map_cache_bytes", "67108864"),
    ("l2arc_write_max", "8388608"),
    ("roots_kept", "8"),
    ("root_retention_s", "0"),
    ("scrub_rate_max", "67108864"),
    ("multihost", "off"),
    ("multihost_lease_ms", "20000"),
];

pub fn parse_u64(name: &str, v: &str) -> Result<u64> {
    v.parse::<u64>()
        .map_err(|_| Error::BadInput(format!("{name} must be a whole number, not '{v}'")))
}

/// Checks one property value; the same check guards `create -o` and `set`.
pub fn validate_prop(name: &str, value: &str) -> Result<()> {
    match name {
        "compression" => Compression::parse(value).map(|_| ()),
        "txg_timeout" => match parse_u64(name, value)? {
            1..=300 => Ok(()),
            _ => Err(Error::BadInput("txg_timeout must be 1 to 300 seconds".into())),
        },
        "dirty_bytes_max" => match parse_u64(name, value)? {
            v if v >= 16 << 20 => Ok(()),
            _ => Err(Error::BadInput("dirty_bytes_max must be at least 16 MiB (16777216)".into())),
        },
        "sync" => match value {
            "standard" | "always" | "disabled" => Ok(()),
            _ => Err(Error::BadInput("sync must be standard, always or disabled".into())),
        },
        "logbias" => match value {
            "latency" | "throughput" => Ok(()),
            _ => Err(Error::BadInput("logbias must be latency or throughput".into())),
        },
        "arc_max" | "l2arc_write_max" | "roots_kept" | "scrub_rate_max" => {
            parse_u64(name, value).map(|_| ())
        }
        "map_cache_bytes" => match parse_u64(name, value)? {
            v if v >= 1 << 20 => Ok(()),
            _ => Err(Error::BadInput("map_cache_bytes must be at least 1 MiB (1048576)".into())),
        },
        "multihost" => match value {
            "on" | "off" => Ok(()),
            _ => Err(Error::BadInput("multihost must be on or off".into())),
        },
        "multihost_lease_ms" => match parse_u64(name, value)? {
            5_000..=600_000 => Ok(()),
            _ => Err(Error::BadInput(
                "multihost_lease_ms must be 5000 to 600000 (milliseconds)".into(),
            )),
        },
        "root_retention_s" => match parse_u64(name, value)? {
            0..=31_536_000 => Ok(()),
            _ => Err(Error::BadInput("root_retention_s must be 0 to 31536000 (a year)".into())),
        },
        _ => Err(Error::BadInput(format!(
            "unknown property '{name}'; known: {}",
            POOL_PROPS.iter().map(|p| p.0).collect::<Vec<_>>().join(", ")
        ))),
    }
}

impl PoolConfig {
    /// Applies stored properties over the defaults.
    pub fn apply_props(&mut self, props: &BTreeMap<String, String>) -> Result<()> {
        for (k, v) in props {
            match k.as_str() {
                "compression" => self.compression = Compression::parse(v)?,
                "txg_timeout" if self.txg_timeout.is_some() => {
                    self.txg_timeout = Some(Duration::from_secs(parse_u64(k, v)?))
                }
                "dirty_bytes_max" => {
                    self.dirty_bytes_max = parse_u64(k, v)?;
                    self.dirty_sync_bytes = self.dirty_sync_bytes.min(self.dirty_bytes_max / 4);
                }
                "roots_kept" => self.roots_kept = parse_u64(k, v)?.max(1),
                // The page cache is sized at import: a `set` takes effect at the next one.
                "map_cache_bytes" => {
                    self.map_cache_bytes = parse_u64(k, v)?.try_into().unwrap_or(usize::MAX)
                }
                "root_retention_s" => self.root_retention_s = parse_u64(k, v)?,
                _ => {}
            }
        }
        Ok(())
    }
}
