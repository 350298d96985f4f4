//! `fardisk import`: finding the newest intact root without listing data, the holder check,
//! claiming the pool with a new epoch (which fences any previous writer; with `multihost=on`
//! after waiting out its lease), then replaying the intent log and starting the background work.

use super::holder::{holder, holder_is_stale};
use super::log::open_log;
use super::replay::replay;
use super::rewind::Rewind;
use super::{no_pool, wrap_store, ImportOptions};
use crate::cache::BlockCache;
use crate::error::{Error, Result};
use crate::fence::{data_txg, publish_root, scan_roots};
use crate::objstore::{DynStore, Store};
use crate::pool::lease::{self, Lease, LeaseRecord};
use crate::pool::{map_warm, syncer, Env, Inner, InnerParts, Pool};
use crate::rng::Rng;
use crate::root::{Holder, Root};
use std::sync::Arc;

/// Attempts at publishing the claim root when the store's answer is ambiguous.
const CLAIM_ATTEMPTS_MAX: usize = 4;

impl Pool {
    pub async fn import(
        store: DynStore,
        name: &str,
        opts: ImportOptions,
        env: Env,
        blocks: Arc<dyn BlockCache>,
    ) -> Result<Pool> {
        let (store, store_stats) = wrap_store(store, &opts.config, &env);
        let (latest, rewind) = importable_root(store.as_ref(), name, &opts, &env).await?;
        // Read before the claim: from our own claim on, the chain has one more claim root.
        let replay_after_txg = data_txg(store.as_ref(), &latest).await?;
        // Each import of one process (same env) draws new ids: the holder's import id and the
        // roots' put ids must not repeat those of an earlier import.
        let rng = Rng::new(env.seed ^ latest.txg.wrapping_mul(0x9e37_79b9_7f4a_7c15));
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
        let log = open_log(&latest, &opts, &env, config.log_leg_timeout_ms)?;
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
        publish_claim(store.as_ref(), name, &claim).await?;
        let lease = if multihost {
            Some(acquire_lease(store.as_ref(), &env, &latest, &me, claim.epoch).await?)
        } else {
            None
        };
        if multihost || opts.force {
            tracing::warn!(
                "pool '{name}' starts from txg {}: writes the previous writer acknowledged from its own intent log after that txg are not in the store",
                latest.txg
            );
        }
        let txg_timeout_set = config.txg_timeout.is_some();
        let inner = Inner::new(InnerParts {
            store,
            store_stats,
            rng,
            config,
            name,
            root: &claim,
            import_id: me.import_id,
            log,
            log_devices: opts.log_devices.clone(),
            env,
            blocks,
        });
        // The claim root's hint goes out with the first commit (or when idle): not on the
        // import's path, which a restarted engine's clients wait for.
        inner.txg.head_hint_due(claim.txg);
        if let Some(lease) = lease {
            let _ = inner.lease.set(lease);
        }
        start(inner, replay_after_txg, &rewind, txg_timeout_set).await
    }
}

/// The newest intact root, checked before anything but the conditional-write probe is written:
/// no damaged newer root (unless `--rewind`), conditional writes work, it is this pool, and no
/// other live writer holds it (unless `--force`).
async fn importable_root(
    store: &dyn Store,
    name: &str,
    opts: &ImportOptions,
    env: &Env,
) -> Result<(Root, Rewind)> {
    let rng = Rng::new(env.seed);
    // Damaged newest roots are found before anything is written (the probe below included).
    let scan = scan_roots(store).await?;
    if !opts.rewind {
        if let Some(e) = scan.damaged_error(name) {
            return Err(e);
        }
    }
    crate::objstore::check_store_capabilities(
        store,
        rng.next_u128(),
        crate::objstore::StoreUse::Import,
    )
    .await?;
    let latest = scan.intact.clone().ok_or_else(|| no_pool(store))?;
    let rewind = Rewind::plan(&scan, &latest);
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
    Ok((latest, rewind))
}

/// Publishes the claim root: from then on any other writer's next root PUT finds its key taken
/// and that writer is fenced. An ambiguous answer (a conflict with no root there yet, a lost
/// response) is retried: the next attempt finds our root (same put id) or creates it.
async fn publish_claim(store: &dyn Store, name: &str, claim: &Root) -> Result<()> {
    let mut claimed = publish_root(store, claim).await;
    for _ in 0..CLAIM_ATTEMPTS_MAX {
        match &claimed {
            Err(Error::Store(e)) if e.is_transient() => claimed = publish_root(store, claim).await,
            _ => break,
        }
    }
    claimed.map_err(|e| match e {
        Error::Fenced(why) => Error::Unavailable(format!(
            "another importer claimed pool '{name}' at the same time: {why}"
        )),
        other => other,
    })
}

/// `multihost=on`: waits out the previous writer's lease and takes the next one.
async fn acquire_lease(
    store: &dyn Store,
    env: &Env,
    latest: &Root,
    me: &Holder,
    epoch: u64,
) -> Result<Arc<Lease>> {
    let lease_ms = latest
        .props
        .get("multihost_lease_ms")
        .and_then(|v| v.parse().ok())
        .unwrap_or(lease::LEASE_MS_DEFAULT);
    let record = LeaseRecord {
        pool_guid: latest.pool_guid,
        import_id: me.import_id,
        epoch,
        n: 0,
        lease_ms,
        time_ms: env.clock.wall_ms(),
        hostname: me.hostname.clone(),
        flags: 0,
    };
    let say = |line: String| tracing::warn!("{line}");
    Ok(Arc::new(Lease::acquire(store, env, record, &say).await?))
}

/// The claimed pool goes live: the intent log replayed on top of the root it opened at, the
/// rewind (if any) reported, the background work and the lease renewal started.
async fn start(
    inner: Arc<Inner>,
    opened_at_txg: u64,
    rewind: &Rewind,
    txg_timeout_set: bool,
) -> Result<Pool> {
    let pool = Pool::from_inner(inner.clone());
    let replayed = replay(&inner, &pool, opened_at_txg).await?;
    if replayed > 0 {
        tracing::info!(records = replayed, "intent log replayed");
    }
    rewind.report(&inner, replayed).await;
    for task in syncer::background(&inner, txg_timeout_set) {
        pool.spawn(task);
    }
    if let Some(lease) = inner.lease.get().cloned() {
        pool.spawn(lease::renew_loop(inner.clone(), lease));
    }
    pool.spawn(map_warm::warm_map_interior(inner.clone()));
    Ok(pool)
}
