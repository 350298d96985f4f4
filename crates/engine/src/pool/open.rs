//! Creating a pool and importing it: conditional-write probe, finding the newest root without
//! listing data, the holder check, and claiming the pool with a new epoch (which fences any
//! previous writer).

use super::{Env, Inner, Meta, Pool, PoolConfig, TxgState};
use crate::blockmap::{PageCache, TreeRef};
use crate::cache::BlockCache;
use crate::dirty::DirtySet;
use crate::error::{Error, Result};
use crate::fence::{check_conditional_writes, find_latest_root, publish_root, scan_roots};
use crate::objstore::{DynStore, InstrumentedStore, RetryingStore};
use crate::rng::Rng;
use crate::root::{Holder, Root, VdevEntry};
use crate::space::{SpaceTotals, SPACE_TREE_ID};
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug, Clone, Default)]
pub struct CreateOptions {
    pub props: BTreeMap<String, String>,
    pub vdevs: Vec<VdevEntry>,
    /// The guid the log and cache devices were labelled with (random when None).
    pub pool_guid: Option<u128>,
}

/// Attempts at publishing the claim root when the store's answer is ambiguous.
const CLAIM_ATTEMPTS_MAX: usize = 4;

#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Take over a pool another live writer holds; that writer is fenced at its next commit.
    pub force: bool,
    pub config: PoolConfig,
    /// Import even though log devices are missing (`zpool import -m`): the pool opens at its
    /// last published txg plus whatever the remaining log legs hold.
    pub missing_log: bool,
    /// What the last daemon saw of the log before it stopped: (bytes of records not yet in the
    /// store, wall-clock ms when seen). Only used to tell the operator what a missing log costs.
    pub log_unpublished_hint: Option<(u64, u64)>,
    /// Where the log devices named in the root are opened (files unless a test says otherwise).
    pub log_devices: LogDevices,
    /// The newest root (or several) does not verify: import at the newest intact one instead and
    /// discard the damaged txgs (`zpool import -F`). Without it such an import is refused.
    pub rewind: bool,
}

/// Opens log devices: files normally; the simulation passes crash-able in-memory devices so a
/// power cut, a torn write or a failing leg replays exactly from a seed.
#[derive(Clone)]
pub struct LogDevices(pub Arc<dyn fardisk_slog::DeviceProvider>);

impl Default for LogDevices {
    fn default() -> Self {
        LogDevices(Arc::new(fardisk_slog::FileProvider::default()))
    }
}

impl std::fmt::Debug for LogDevices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogDevices")
    }
}

impl LogDevices {
    /// False only when the device is absent; a device that exists but fails to open is the
    /// log's to report (it opens DEGRADED without that leg).
    fn exists(&self, path: &std::path::Path) -> bool {
        !matches!(self.0.open(path), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

fn holder(env: &Env, rng: &Rng, active: bool) -> Holder {
    Holder {
        hostname: hostname::get()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "unknown".into()),
        pid: std::process::id(),
        import_id: rng.next_u128(),
        since_ms: env.clock.wall_ms(),
        active,
    }
}

pub(super) fn wrap_store(
    store: DynStore,
    config: &PoolConfig,
    env: &Env,
) -> (DynStore, Arc<crate::objstore::StoreStats>) {
    let instrumented = Arc::new(InstrumentedStore::new(store, env.clock.clone()));
    let stats = instrumented.stats.clone();
    let retrying = RetryingStore::new(
        instrumented,
        config.retry.clone(),
        env.clock.clone(),
        env.seed ^ 0x5eed,
    );
    (Arc::new(retrying), stats)
}

pub fn check_pool_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c));
    if ok {
        Ok(())
    } else {
        Err(Error::BadInput(format!(
            "invalid name '{name}': use 1-64 letters, digits, '-', '_', '.', ':' starting with a letter"
        )))
    }
}

impl Pool {
    /// Writes txg 0 of a new pool. Refuses a store that already holds a pool or lacks conditional
    /// writes; nothing is written in either case.
    pub async fn create(
        store: DynStore,
        name: &str,
        opts: CreateOptions,
        env: &Env,
    ) -> Result<Root> {
        check_pool_name(name)?;
        for (k, v) in &opts.props {
            super::validate_prop(k, v)?;
        }
        let (store, _) = wrap_store(store, &PoolConfig::default(), env);
        let rng = Rng::new(env.seed);
        check_conditional_writes(store.as_ref(), rng.next_u128()).await?;
        if let Some(existing) = find_latest_root(store.as_ref()).await? {
            return Err(Error::BadInput(format!(
                "store {} already holds pool '{}' (txg {}); import it, or destroy it first",
                store.describe(),
                existing.pool_name,
                existing.txg
            )));
        }
        let root = Root {
            pool_guid: opts.pool_guid.unwrap_or_else(|| rng.next_u128()),
            pool_name: name.to_string(),
            txg: 0,
            epoch: 0,
            time_ms: env.clock.wall_ms(),
            put_id: rng.next_u128(),
            holder: holder(env, &rng, false),
            next_segment_counter: 1,
            next_volume_id: 1,
            space: TreeRef::empty(SPACE_TREE_ID, u64::MAX),
            totals: SpaceTotals::default(),
            space_carry: Vec::new(),
            props: opts.props,
            vdevs: opts.vdevs,
            volumes: Vec::new(),
            snapshots: Vec::new(),
        };
        publish_root(store.as_ref(), &root).await.map_err(|e| match e {
            Error::Fenced(_) => Error::BadInput(format!(
                "another process created a pool in {} at the same time",
                store.describe()
            )),
            other => other,
        })?;
        Ok(root)
    }

    /// Reads the newest root without importing (for `status` of an exported pool, recovery points).
    pub async fn peek(store: DynStore, env: &Env) -> Result<Root> {
        Self::peek_rewind(store, env, false).await
    }

    /// `peek`, where `rewind` returns the newest intact root even when newer ones are damaged.
    pub async fn peek_rewind(store: DynStore, env: &Env, rewind: bool) -> Result<Root> {
        let (store, _) = wrap_store(store, &PoolConfig::default(), env);
        if !rewind {
            return find_latest_root(store.as_ref()).await?.ok_or_else(|| no_pool(store.as_ref()));
        }
        scan_roots(store.as_ref()).await?.intact.ok_or_else(|| no_pool(store.as_ref()))
    }

    pub async fn import(
        store: DynStore,
        name: &str,
        opts: ImportOptions,
        env: Env,
        blocks: Arc<dyn BlockCache>,
    ) -> Result<Pool> {
        let (store, store_stats) = wrap_store(store, &opts.config, &env);
        let rng = Rng::new(env.seed);
        // Damaged newest roots are found before anything is written (the probe below included).
        let scan = scan_roots(store.as_ref()).await?;
        if !opts.rewind {
            if let Some(e) = scan.damaged_error(name) {
                return Err(e);
            }
        }
        check_conditional_writes(store.as_ref(), rng.next_u128()).await?;
        let latest = scan.intact.clone().ok_or_else(|| no_pool(store.as_ref()))?;
        let rewind = super::rewind::Rewind::plan(&scan, &latest);
        // Each import of one process (same env) draws new ids: the holder's import id and the
        // roots' put ids must not repeat those of an earlier import.
        let rng = Rng::new(env.seed ^ latest.txg.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        if latest.pool_name != name {
            return Err(Error::BadInput(format!(
                "store {} holds pool '{}', not '{name}'",
                store.describe(),
                latest.pool_name
            )));
        }
        if latest.holder.active && !opts.force && !holder_is_stale(&latest.holder) {
            let h = &latest.holder;
            return Err(Error::Unavailable(format!(
                "pool '{name}' is imported by host {} (pid {}) since txg {}; export it there, or use --force to take it over (the other writer will be fenced)",
                h.hostname, h.pid, latest.txg
            )));
        }
        let mut config = opts.config.clone();
        config.apply_props(&latest.props)?;
        let multihost = latest.props.get("multihost").map(String::as_str) == Some("on");
        if opts.force && !multihost && latest.holder.active {
            tracing::warn!(
                "--force with multihost=off: if the writer on host {} is alive it keeps acknowledging sync writes from its own intent log until its next commit finds it fenced, and those writes are lost; set multihost=on to make a takeover wait out the writer's lease instead",
                latest.holder.hostname
            );
        }
        // The log is opened before the pool is claimed: a refused import changes nothing.
        let log = open_log(&latest, &opts, &env)?;
        let me = holder(&env, &rng, true);
        let claim = Root {
            txg: rewind.claim_txg,
            epoch: rewind.claim_epoch,
            time_ms: env.clock.wall_ms(),
            put_id: rng.next_u128(),
            holder: me.clone(),
            next_segment_counter: 1,
            ..latest.clone()
        };
        // An ambiguous answer (a conflict with no root there yet, a lost response) is retried:
        // the next attempt finds our root (same put id) or creates it.
        let mut claimed = publish_root(store.as_ref(), &claim).await;
        for _ in 0..CLAIM_ATTEMPTS_MAX {
            match &claimed {
                Err(Error::Store(e)) if e.is_transient() => {
                    claimed = publish_root(store.as_ref(), &claim).await
                }
                _ => break,
            }
        }
        claimed.map_err(|e| match e {
            Error::Fenced(why) => Error::Unavailable(format!(
                "another importer claimed pool '{name}' at the same time: {why}"
            )),
            other => other,
        })?;
        let lease = if multihost {
            let lease_ms = latest
                .props
                .get("multihost_lease_ms")
                .and_then(|v| v.parse().ok())
                .unwrap_or(super::lease::LEASE_MS_DEFAULT);
            let me = super::lease::LeaseRecord {
                pool_guid: latest.pool_guid,
                import_id: me.import_id,
                epoch: rewind.claim_epoch,
                n: 0,
                lease_ms,
                time_ms: env.clock.wall_ms(),
                hostname: me.hostname.clone(),
                flags: 0,
            };
            let say = |line: String| tracing::warn!("{line}");
            Some(Arc::new(super::lease::Lease::acquire(store.as_ref(), &env, me, &say).await?))
        } else {
            None
        };
        if multihost || opts.force {
            tracing::warn!(
                "pool '{name}' starts from txg {}: writes the previous writer acknowledged from its own intent log after that txg are not in the store",
                latest.txg
            );
        }
        let log_devices = opts.log_devices.clone();
        let inner = new_inner(InnerParts {
            store,
            store_stats,
            rng,
            config: config.clone(),
            name,
            root: &claim,
            import_id: me.import_id,
            log,
            log_devices,
            env,
            blocks,
        });
        if let Some(lease) = lease {
            let _ = inner.lease.set(lease.clone());
        }
        let pool = Pool::from_inner(inner.clone());
        let replayed = super::intent::replay(&inner, &pool, latest.txg).await?;
        if replayed > 0 {
            tracing::info!(records = replayed, "intent log replayed");
        }
        rewind.report(&inner, replayed).await;
        super::gc::start_background(&pool, config.txg_timeout.is_some());
        if let Some(lease) = inner.lease.get().cloned() {
            pool.spawn(super::lease::renew_loop(inner.clone(), lease));
        }
        Ok(pool)
    }
}

/// What a new in-memory pool is made of (shared by import and read-only import).
pub(super) struct InnerParts<'a> {
    pub store: DynStore,
    pub store_stats: Arc<crate::objstore::StoreStats>,
    pub rng: Rng,
    pub config: PoolConfig,
    pub name: &'a str,
    pub root: &'a Root,
    pub import_id: u128,
    pub log: Option<Arc<fardisk_slog::IntentLog>>,
    pub log_devices: LogDevices,
    pub env: Env,
    pub blocks: Arc<dyn BlockCache>,
}

pub(super) fn new_inner(p: InnerParts<'_>) -> Arc<Inner> {
    let InnerParts {
        store,
        store_stats,
        rng,
        config,
        name,
        root: claim,
        import_id,
        log,
        log_devices,
        env,
        blocks,
    } = p;
    let volumes = claim.volumes.iter().map(|v| (v.id, v.clone())).collect();
    let snapshots = claim.snapshots.iter().map(|s| (s.id, s.clone())).collect();
    let (published, _) = tokio::sync::watch::channel(claim.txg);
    Arc::new(Inner {
        store,
        store_stats,
        rng,
        config: parking_lot::RwLock::new(config.clone()),
        name: name.to_string(),
        guid: claim.pool_guid,
        epoch: claim.epoch,
        import_id,
        cache: PageCache::new(config.map_cache_bytes),
        meta: parking_lot::RwLock::new(Meta {
            root: claim.clone(),
            volumes,
            snapshots,
            pending_deletes: BTreeMap::new(),
        }),
        pending: Default::default(),
        txg: parking_lot::Mutex::new(TxgState {
            open: DirtySet::default(),
            open_txg: claim.txg + 1,
            syncing: None,
        }),
        blocks,
        sync_lock: tokio::sync::Mutex::new(()),
        published,
        kick: Default::default(),
        dirty_freed: Default::default(),
        health: Default::default(),
        counters: Default::default(),
        readahead: Default::default(),
        intent: super::intent::Intent::new(log, log_devices),
        prefetching: Default::default(),
        hot: Default::default(),
        warmup: Default::default(),
        scrub: Default::default(),
        roots: Default::default(),
        lease: Default::default(),
        #[cfg(test)]
        pause_before_write_lock: Default::default(),
        env,
    })
}

pub(super) fn no_pool(store: &dyn crate::objstore::Store) -> Error {
    Error::Unavailable(format!(
        "no fardisk pool in {}; check the URL, or create one with 'fardisk create'",
        store.describe()
    ))
}

/// A holder on this host whose process is gone (a crash or SIGKILL): importing again needs no force.
fn holder_is_stale(h: &Holder) -> bool {
    let me = hostname::get().map(|x| x.to_string_lossy().into_owned()).unwrap_or_default();
    if h.hostname != me {
        return false;
    }
    if h.pid == std::process::id() {
        return false; // This very process holds it (a second import in one process is a conflict).
    }
    !process_is_live_fardisk(h.pid)
}

/// True when `pid` is a running (not zombie) fardisk process. A killed daemon whose parent never
/// reaps it stays a zombie, and a recycled pid may belong to anything else.
fn process_is_live_fardisk(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // The state is the first field after the parenthesised command name.
    let state =
        stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).unwrap_or("X");
    if state == "Z" || state == "X" {
        return false;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&cmdline).contains("fardisk")
}

/// The pool's log vdevs as the intent-log crate names them.
pub fn log_configs(root: &Root) -> Vec<fardisk_slog::VdevConfig> {
    root.vdevs
        .iter()
        .filter(|v| v.role == "log")
        .map(|v| fardisk_slog::VdevConfig {
            vdev_guid: v.guid,
            kind: if v.mirror {
                fardisk_slog::VdevKind::Mirror
            } else {
                fardisk_slog::VdevKind::Single
            },
            legs: v.paths.iter().map(std::path::PathBuf::from).collect(),
        })
        .collect()
}

fn open_log(
    root: &Root,
    opts: &ImportOptions,
    env: &Env,
) -> Result<Option<Arc<fardisk_slog::IntentLog>>> {
    let missing_ok = opts.missing_log;
    let configs = log_configs(root);
    if configs.is_empty() {
        return Ok(None);
    }
    // A mirror that lost some legs still holds every record on the others: it opens DEGRADED.
    // Only a vdev with no leg left means acknowledged writes are gone.
    let devices = &opts.log_devices;
    let whole_vdev_missing = configs.iter().any(|c| c.legs.iter().all(|p| !devices.exists(p)));
    let mut o = fardisk_slog::OpenOptions::new(devices.0.clone());
    o.clock = env.clock.clone();
    // After a clean export every acknowledged write is in the store: a missing log loses nothing.
    let clean_export = !root.holder.active;
    if whole_vdev_missing && clean_export {
        tracing::warn!(
            "a log device is missing, but the pool was exported cleanly: nothing is lost"
        );
    }
    o.missing = if missing_ok || !whole_vdev_missing || clean_export {
        fardisk_slog::MissingPolicy::Degrade
    } else {
        fardisk_slog::MissingPolicy::Refuse
    };
    o.writer_epoch = root.epoch + 1;
    match fardisk_slog::IntentLog::open(&root.pool_name, root.pool_guid, &configs, &o) {
        Ok(l) => Ok(Some(Arc::new(l))),
        Err(fardisk_slog::LogError::Missing { path, .. }) => {
            let now_ms = env.clock.wall_ms();
            let age_s = now_ms.saturating_sub(root.time_ms) / 1000;
            let loss = match opts.log_unpublished_hint {
                Some((bytes, seen_ms)) => format!(
                    "the log held {} of records not yet in the store when this host last looked, {} s ago",
                    human_bytes(bytes),
                    now_ms.saturating_sub(seen_ms) / 1000
                ),
                None => "how much is unknown without the device".to_string(),
            };
            Err(Error::Unavailable(format!(
                "log device {} is missing; without it the pool opens at its recovery point, txg {} (published {age_s} s ago), \
                 and writes acknowledged after that are lost ({loss}). \
                 Bring the device back, or import with --missing-log to accept that",
                path.display(),
                root.txg
            )))
        }
        Err(e) => Err(Error::Unavailable(format!("log devices: {e}"))),
    }
}

fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}
