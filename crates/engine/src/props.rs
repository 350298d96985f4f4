//! Pool properties: the one table of every property (name, type, default, allowed values, where
//! it applies, when it can change, unit). `create -o` and `set` validate against it, `get all`
//! lists it, the engine's tunables (`PoolConfig::apply_props`) and the daemon's cache sizes read
//! their values and defaults from it.
//!
//! Values are stored in the root as strings (docs/format.md, "Root"). A size may be given with a
//! suffix (`-o arc_max=16M`, the same parser as `volume create tank/pg 8G`) and is stored as a
//! whole number of bytes, so a root reads the same whatever the value was typed as.

use crate::error::{Error, Result};
use crate::size::{parse_size, SIZE_SUFFIXES};
use std::collections::BTreeMap;

/// What values a property takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropType {
    /// Bytes (or bytes per second), with an optional K, M, G or T suffix; stored in bytes.
    Size { min: u64 },
    /// A whole number in `min..=max`.
    Number { min: u64, max: u64 },
    /// One of `values`; `aliases` are accepted too and stored as given (`compression=on`).
    Choice { values: &'static [&'static str], aliases: &'static [&'static str] },
}

/// The unit of a number or size, as messages say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Bytes,
    BytesPerSecond,
    Seconds,
    Milliseconds,
    /// A count of things (roots).
    Count,
    /// A word (`PropType::Choice`).
    Word,
}

/// Where a property is set and read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppliesTo {
    /// The pool as a whole.
    Pool,
    /// The pool, and each volume may override it (`Pool::volume_set_prop`).
    PoolAndVolumes,
}

/// When a property can be given and when a change takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// At create (`-o`) or with `set`, effective at once.
    Now,
    /// At create or with `set`; read when the pool is imported, so a `set` takes effect at the
    /// next import.
    NextImport,
    /// Only at create.
    CreateOnly,
    /// Shown by `get`, never set.
    ReadOnly,
}

/// A property's value when the pool does not set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropDefault {
    Number(u64),
    Word(&'static str),
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prop {
    pub name: &'static str,
    pub ty: PropType,
    pub unit: Unit,
    pub default: PropDefault,
    pub applies_to: AppliesTo,
    pub change: Change,
    /// Said in parentheses after the allowed values in a refusal ("0 = no limit"); empty for none.
    pub note: &'static str,
}

const fn settable_size(name: &'static str, unit: Unit, min: u64, default: u64) -> Prop {
    Prop {
        name,
        ty: PropType::Size { min },
        unit,
        default: PropDefault::Number(default),
        applies_to: AppliesTo::Pool,
        change: Change::Now,
        note: "",
    }
}

const fn settable_number(name: &'static str, unit: Unit, min: u64, max: u64, default: u64) -> Prop {
    Prop {
        name,
        ty: PropType::Number { min, max },
        unit,
        default: PropDefault::Number(default),
        applies_to: AppliesTo::Pool,
        change: Change::Now,
        note: "",
    }
}

const fn settable_choice(
    name: &'static str,
    values: &'static [&'static str],
    aliases: &'static [&'static str],
    default: &'static str,
) -> Prop {
    Prop {
        name,
        ty: PropType::Choice { values, aliases },
        unit: Unit::Word,
        default: PropDefault::Word(default),
        applies_to: AppliesTo::Pool,
        change: Change::Now,
        note: "",
    }
}

/// Block compression of new writes (`compress.rs`).
pub const COMPRESSION: Prop =
    settable_choice("compression", &["off", "lz4", "zstd"], &["none", "on"], "lz4");
/// Seconds between txg syncs of a pool with changes.
pub const TXG_TIMEOUT: Prop = settable_number("txg_timeout", Unit::Seconds, 1, 300, 5);
/// Dirty data (open + syncing txg) at which writers stall.
pub const DIRTY_BYTES_MAX: Prop =
    settable_size("dirty_bytes_max", Unit::Bytes, 16 << 20, 512 << 20);
/// `always`: every write is a sync request; `disabled`: sync requests return at once.
pub const SYNC: Prop =
    settable_choice("sync", &["standard", "always", "disabled"], &[], "standard");
/// `throughput`: big writes skip the intent log.
pub const LOGBIAS: Prop = Prop {
    applies_to: AppliesTo::PoolAndVolumes,
    ..settable_choice("logbias", &["latency", "throughput"], &[], "latency")
};
/// The ARC's size (the daemon's block cache in RAM).
pub const ARC_MAX: Prop =
    Prop { change: Change::NextImport, ..settable_size("arc_max", Unit::Bytes, 0, 1 << 30) };
/// Clean block-map pages kept in memory. One 10272-byte leaf page maps 1 MiB of volume, so the
/// default covers about 12.7 GiB of volume: the largest benchmark volume (10 GiB, the restore and
/// snapshots rows) reads without a map GET per random read once its pages are in (issue #21; 64
/// MiB covered about 6 GiB).
pub const MAP_CACHE_BYTES: Prop = Prop {
    change: Change::NextImport,
    ..settable_size("map_cache_bytes", Unit::Bytes, 1 << 20, 128 << 20)
};
/// Rate at which the L2ARC is fed from the ARC (the cache devices' writer).
pub const L2ARC_WRITE_MAX: Prop = Prop {
    change: Change::NextImport,
    ..settable_size("l2arc_write_max", Unit::BytesPerSecond, 0, 32 << 20)
};
/// Roots kept behind the newest (at least 1 is used).
pub const ROOTS_KEPT: Prop = settable_number("roots_kept", Unit::Count, 0, u64::MAX, 8);
/// Roots younger than this are kept, for point-in-time import (0: only `roots_kept`).
pub const ROOT_RETENTION_S: Prop =
    Prop { note: "a year", ..settable_number("root_retention_s", Unit::Seconds, 0, 31_536_000, 0) };
/// Bytes per second scrub reads from the store.
pub const SCRUB_RATE_MAX: Prop = Prop {
    note: "0 = no limit",
    ..settable_size("scrub_rate_max", Unit::BytesPerSecond, 0, 64 << 20)
};
/// `on`: the writer holds a lease in the store and acknowledges only while it can prove it.
pub const MULTIHOST: Prop =
    Prop { change: Change::NextImport, ..settable_choice("multihost", &["on", "off"], &[], "off") };
/// Length of the multihost lease.
pub const MULTIHOST_LEASE_MS: Prop = Prop {
    change: Change::NextImport,
    ..settable_number("multihost_lease_ms", Unit::Milliseconds, 5_000, 600_000, 20_000)
};
/// Map pages of trimmed, rolled-back or destroyed subtrees a txg reads and frees from the free
/// queue (frees.rs): the bound on the time a txg spends on them, whatever their size.
pub const FREE_PAGES_PER_TXG_MAX: Prop =
    settable_number("free_pages_per_txg_max", Unit::Count, 1, 1 << 20, 256);
/// Entries the free queue may hold in the root (65 bytes each); past it a txg frees more pages
/// than `free_pages_per_txg_max` until the queue is back under it.
pub const FREE_QUEUE_ENTRIES_MAX: Prop =
    settable_number("free_queue_entries_max", Unit::Count, 2048, 1 << 20, 8192);

/// Store GETs one read request, a txg's walk of freed or destroyed map pages, or a cache fill
/// keeps in flight at once (issue #21: against a far store, what the reader waits for is round
/// trips, not bytes).
pub const READ_CONCURRENCY: Prop = settable_number("read_concurrency", Unit::Count, 1, 1024, 32);
/// How far ahead of a sequential reader blocks are fetched (0: no readahead), and never more than
/// an eighth of `arc_max`. The distance grows with the run (four times what it has read), so a
/// short sequential burst prefetches little, and slides a GET at a time (pool/readahead.rs):
/// 128 MiB keeps about 8 GETs of `read_request_bytes_max` in flight, as many as the raw 8-way
/// reader of BENCHMARKS.md's engine-store (8 MiB reached a fifth of raw GETs at 20 ms, 64 MiB
/// whole windows about half, issue #21).
pub const READAHEAD_BYTES_MAX: Prop =
    Prop { note: "0 = none", ..settable_size("readahead_bytes_max", Unit::Bytes, 0, 128 << 20) };
/// How much of one sequential stream the ARC keeps (0: all of it): past this many bytes of a
/// run, and past a quarter of `arc_max`, the blocks a stream is the first to read leave the
/// ARC once it has read them (to the L2ARC feed, as evictions go), and their memory holds the
/// blocks it fetches next. PostgreSQL's ring buffer for large scans, for the same reasons: a
/// backup or a table scan does not push the hot set out, and it does not take `arc_max` of
/// fresh memory, which on the VM of BENCHMARKS.md cost 1.2-1.5 CPU-s of system time per GiB of
/// a cold 4 GiB read (bench/notes/engine-store.md, "The ARC's first fill"; issue #21). Blocks
/// read before the stream came stay.
pub const ARC_STREAM_BYTES_MAX: Prop = Prop {
    note: "0 = no limit",
    ..settable_size("arc_stream_bytes_max", Unit::Bytes, 0, 256 << 20)
};
/// Leaf map pages past the ones a read needs that come along in the same ranged GET when they
/// sit right after them in one segment (pool/read.rs): bytes, not requests. A sequential reader
/// then asks for one map GET per this many MiB of volume instead of one per MiB (issue #21).
/// A stream's readahead lets its map batches ride along further, to the end of their run (at
/// most an eighth of `map_cache_bytes`); 0 turns that off too.
pub const MAP_READAHEAD_PAGES_MAX: Prop = Prop {
    note: "0 = none",
    ..settable_number("map_readahead_pages_max", Unit::Count, 0, 255, 32)
};
/// The most bytes a read whose leaf map page is not cached asks for beside that leaf, at the place
/// the level-1 page above it says the leaf's blocks were written (pool/cold_read.rs): a cold
/// random read then costs one store round trip, not the leaf's and then the block's (issue #21).
/// One hint window is 32 blocks of volume; a read the range would not cover asks in sequence.
pub const COLD_READ_BYTES_MAX: Prop = Prop {
    note: "0 = the leaf first, then the blocks",
    ..settable_size("cold_read_bytes_max", Unit::Bytes, 0, 256 << 10)
};

/// What a read does when the store does not answer within its retry budget (ZFS's failmode):
/// `wait` retries until the store is back, so a database's query stalls through an outage and
/// goes on after it; `continue` fails it with EIO (today's applications that prefer an error).
/// A read in progress sees a change at its next retry.
pub const FAILMODE: Prop = settable_choice("failmode", &["wait", "continue"], &[], "wait");

/// `on`: while sync requests come, the records of plain writes go to the log devices as they
/// come, without a flush (pool/intent), so a sync request finds them written and costs the log
/// a flush alone; `off` (the default): a sync request writes them and then flushes. Either way
/// a sync request returns only once every earlier write is durable. Off by default because it
/// measured no faster once a commit writes on its caller's thread (fardisk-slog `lead`): at
/// queue depth 1 the write ahead keeps the log writer busy when the flush comes, which then
/// waits for it (BENCHMARKS.md nbd-latency and pgbench-latency, the log_write_ahead rows).
pub const LOG_WRITE_AHEAD: Prop = settable_choice("log_write_ahead", &["on", "off"], &[], "off");

/// How long a mirrored log's write waits for a leg that does not answer once another leg has
/// answered it: past it the leg is FAULTED (`status` says it stopped answering) and sync writes
/// go on with the other legs, as after a write error. A single log device has no other leg and
/// is waited for. Far beyond a healthy flush (under a millisecond) so that only a device that
/// stopped answering is given up on; a commit then stalls once, this long. 0: wait for every
/// leg for as long as it takes, writing the first on the committing thread (about 15 % more
/// one-writer sync writes/s on a mirror, bench/notes/sync-writes.md).
pub const LOG_LEG_TIMEOUT_MS: Prop = Prop {
    note: "0 = never give up on a leg",
    ..settable_number("log_leg_timeout_ms", Unit::Milliseconds, 0, 600_000, 10_000)
};

/// Every property, in the order `get all` lists them.
pub const POOL_PROPS: &[Prop] = &[
    COMPRESSION,
    TXG_TIMEOUT,
    DIRTY_BYTES_MAX,
    SYNC,
    LOGBIAS,
    ARC_MAX,
    MAP_CACHE_BYTES,
    L2ARC_WRITE_MAX,
    ROOTS_KEPT,
    ROOT_RETENTION_S,
    SCRUB_RATE_MAX,
    MULTIHOST,
    MULTIHOST_LEASE_MS,
    FREE_PAGES_PER_TXG_MAX,
    FREE_QUEUE_ENTRIES_MAX,
    READ_CONCURRENCY,
    READAHEAD_BYTES_MAX,
    ARC_STREAM_BYTES_MAX,
    MAP_READAHEAD_PAGES_MAX,
    COLD_READ_BYTES_MAX,
    FAILMODE,
    LOG_WRITE_AHEAD,
    LOG_LEG_TIMEOUT_MS,
];

/// The property called `name`, or the one-line refusal that lists the known ones.
pub fn find(name: &str) -> Result<&'static Prop> {
    POOL_PROPS.iter().find(|p| p.name == name).ok_or_else(|| {
        Error::BadInput(format!(
            "unknown property '{name}'; known: {}",
            POOL_PROPS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
        ))
    })
}

/// "16 MiB" for an exact power-of-1024 multiple, else the bytes.
fn exact_size_text(bytes: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} bytes")
}

impl Prop {
    /// The value `get` shows when the pool does not set the property.
    pub fn default_text(&self) -> String {
        match self.default {
            PropDefault::Number(n) => n.to_string(),
            PropDefault::Word(w) => w.to_string(),
        }
    }

    /// The default of a number or size (0 for a word; a test checks every number has one).
    pub const fn default_number(&self) -> u64 {
        match self.default {
            PropDefault::Number(n) => n,
            PropDefault::Word(_) => 0,
        }
    }

    /// What the property accepts, as the refusal of a wrong value says it.
    pub fn allowed_text(&self) -> String {
        let unit = match self.unit {
            Unit::Bytes => " bytes",
            Unit::BytesPerSecond => " bytes per second",
            Unit::Seconds => " seconds",
            Unit::Milliseconds => " milliseconds",
            Unit::Count | Unit::Word => "",
        };
        let suffixes = format!("{SIZE_SUFFIXES} suffixes allowed");
        let (text, mut asides) = match self.ty {
            PropType::Size { min: 0 } => (format!("a whole number of{unit}"), vec![suffixes]),
            PropType::Size { min } => (
                format!("at least {}", exact_size_text(min)),
                vec![format!("{min}{unit}"), suffixes],
            ),
            PropType::Number { min: 0, max: u64::MAX } => (format!("a whole number{unit}"), vec![]),
            PropType::Number { min, max } => (format!("{min} to {max}{unit}"), vec![]),
            PropType::Choice { values, .. } => match values {
                [rest @ .., last] if !rest.is_empty() => {
                    (format!("{} or {last}", rest.join(", ")), vec![])
                }
                _ => (values.join(""), vec![]),
            },
        };
        if !self.note.is_empty() {
            asides.push(self.note.to_string());
        }
        if asides.is_empty() {
            text
        } else {
            format!("{text} ({})", asides.join("; "))
        }
    }

    fn refuse(&self, value: &str) -> Error {
        Error::BadInput(format!("{} must be {}, not '{value}'", self.name, self.allowed_text()))
    }

    /// Checks `value` and returns it as the root stores it: a size in bytes, anything else as
    /// given. The same check guards `create -o` and `set`.
    pub fn canonical(&self, value: &str) -> Result<String> {
        match self.ty {
            PropType::Choice { values, aliases } => {
                if values.contains(&value) || aliases.contains(&value) {
                    Ok(value.to_string())
                } else {
                    Err(self.refuse(value))
                }
            }
            PropType::Size { .. } | PropType::Number { .. } => {
                Ok(self.parse_number(value)?.to_string())
            }
        }
    }

    /// A number or size, unchecked against its range.
    fn parse_unchecked(&self, value: &str) -> Option<u64> {
        match self.ty {
            PropType::Size { .. } => parse_size(value).ok(),
            PropType::Number { .. } => value.parse::<u64>().ok(),
            PropType::Choice { .. } => None,
        }
    }

    /// A number or size in its allowed range.
    fn parse_number(&self, value: &str) -> Result<u64> {
        let (min, max) = match self.ty {
            PropType::Size { min } => (min, u64::MAX),
            PropType::Number { min, max } => (min, max),
            PropType::Choice { .. } => (1, 0),
        };
        match self.parse_unchecked(value) {
            Some(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(self.refuse(value)),
        }
    }

    /// The number or size `props` (a root's stored properties) sets; None when unset. Only its
    /// form is checked, not its range: a root written before a range was narrowed still opens.
    pub fn stored_number(&self, props: &BTreeMap<String, String>) -> Result<Option<u64>> {
        props
            .get(self.name)
            .map(|v| self.parse_unchecked(v).ok_or_else(|| self.refuse(v)))
            .transpose()
    }

    /// The value `props` sets, or the default (also for a stored value that does not parse,
    /// which only an import checks: `PoolConfig::apply_props`).
    pub fn number_or_default(&self, props: &BTreeMap<String, String>) -> u64 {
        self.stored_number(props).ok().flatten().unwrap_or(self.default_number())
    }
}

/// Checks one property for `create -o` (`for_set` false) or `set` (`for_set` true); returns the
/// value to store (see `Prop::canonical`).
pub fn canonical_prop(name: &str, value: &str, for_set: bool) -> Result<String> {
    let prop = find(name)?;
    check_change(prop, for_set)?;
    prop.canonical(value)
}

/// Refuses a read-only property, and a create-only one outside `create`.
fn check_change(prop: &Prop, for_set: bool) -> Result<()> {
    let name = prop.name;
    match prop.change {
        Change::ReadOnly => {
            Err(Error::BadInput(format!("{name} is read-only; 'fardisk get' shows it")))
        }
        Change::CreateOnly if for_set => Err(Error::BadInput(format!(
            "{name} is fixed when the pool is created (fardisk create -o {name}=VALUE)"
        ))),
        _ => Ok(()),
    }
}

/// Checks one property value; the same check guards `create -o` and `set`.
pub fn validate_prop(name: &str, value: &str) -> Result<()> {
    canonical_prop(name, value, true).map(|_| ())
}

/// Checks a property a volume sets for itself (`Pool::volume_set_prop`).
pub fn canonical_volume_prop(name: &str, value: &str) -> Result<String> {
    let prop = find(name)?;
    if prop.applies_to != AppliesTo::PoolAndVolumes {
        return Err(Error::BadInput(format!("{name} is a pool property; set it on the pool")));
    }
    canonical_prop(name, value, true)
}

/// Every property with the value the pool has and where it comes from, as `get` shows them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PropRow {
    pub property: String,
    pub value: String,
    /// `local`: set on this pool; `default`: from the table.
    pub source: String,
}

pub fn prop_rows(set: &BTreeMap<String, String>) -> Vec<PropRow> {
    POOL_PROPS
        .iter()
        .map(|p| match set.get(p.name) {
            Some(v) => {
                PropRow { property: p.name.into(), value: v.clone(), source: "local".into() }
            }
            None => PropRow {
                property: p.name.into(),
                value: p.default_text(),
                source: "default".into(),
            },
        })
        .collect()
}

#[cfg(test)]
#[path = "props_tests.rs"]
mod tests;
