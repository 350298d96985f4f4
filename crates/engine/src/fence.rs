//! One writer per pool (rule 6, docs/design/0000-rules.md). Roots form a chain `roots/<txg>`
//! written with create-only PUTs: the writer that creates txg N+1 owns the pool from then on, and
//! a writer whose create of N+1 finds another writer's root there is fenced and stops. An
//! ambiguous retried PUT is told apart from a rival's by the random `put_id` each root carries.

use crate::error::{Error, Result};
use crate::objstore::{PutMode, Store, StoreError, StoreErrorKind};
use crate::root::{decode_head, encode_head, root_key, Root, HEAD_KEY};
use bytes::Bytes;

/// How far past the head hint import probes before giving up (the hint is rewritten every txg, so
/// it lags by at most a few roots after a crash).
const PROBE_ROOTS_MAX: u64 = 100_000;

/// What the store's `roots/` hold: the newest root that decodes and verifies, and the keys of any
/// newer roots that do not (a torn PUT on a store that lost power, bit rot).
#[derive(Debug, Clone)]
pub struct RootScan {
    /// The newest intact root (None: no intact root at all).
    pub intact: Option<Root>,
    /// Txgs of damaged roots newer than `intact`, ascending.
    pub damaged: Vec<u64>,
    /// The newest root key in the store, intact or not: a new claim must come after it.
    pub newest_key_txg: u64,
}

impl RootScan {
    /// The error an import without `--rewind` gives when the newest root is damaged: one line
    /// naming the damaged txg, the newest intact root and the command that goes back to it.
    pub fn damaged_error(&self, pool: &str) -> Option<Error> {
        let newest_damaged = *self.damaged.last()?;
        let first_damaged = self.damaged[0];
        let range = if first_damaged == newest_damaged {
            format!("txg {newest_damaged}")
        } else {
            format!("txgs {first_damaged}-{newest_damaged}")
        };
        Some(match &self.intact {
            Some(root) => Error::corrupt(
                root_key(newest_damaged),
                format!(
                    "the newest root of pool '{pool}' does not verify ({range} damaged); the newest intact root is txg {}: \
                     `fardisk import {pool} --rewind` imports there and discards the damaged {range} (nothing changes until you do)",
                    root.txg
                ),
            ),
            None => Error::corrupt(root_key(newest_damaged), format!("no root of pool '{pool}' verifies ({range} damaged): the pool cannot be imported")),
        })
    }
}

/// The newest published root, or None when the store holds no pool. A damaged `head` hint is
/// skipped (it is advisory); a damaged newest root is an error that names the way out
/// ([`RootScan::damaged_error`], `import --rewind`).
pub async fn find_latest_root(store: &dyn Store) -> Result<Option<Root>> {
    let scan = scan_roots(store).await?;
    let name = scan.intact.as_ref().map(|r| r.pool_name.clone()).unwrap_or_else(|| "POOL".into());
    if let Some(e) = scan.damaged_error(&name) {
        return Err(e);
    }
    Ok(scan.intact)
}

/// Finds the newest root: from the `head` hint (or, without a usable one, the newest key under
/// `roots/`), probing `roots/<txg+1>...` until a key is missing. Store errors are returned; bytes
/// that do not verify are recorded as damaged, never returned as a root.
pub async fn scan_roots(store: &dyn Store) -> Result<RootScan> {
    let hint = match store.get(HEAD_KEY).await {
        Ok(b) if crate::objstore::is_encrypted_object(&b) => {
            return Err(Error::BadInput(format!(
            "the pool in {} is encrypted: give its key with --key-file PATH (or FARDISK_KEY_FILE)",
            store.describe()
        )))
        }
        Ok(b) => match decode_head(&b) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!(error = %e, "the head hint is damaged; finding the newest root by listing roots/");
                None
            }
        },
        Err(e) if e.is_not_found() => None,
        Err(e) if e.kind == StoreErrorKind::Corrupt => {
            tracing::warn!(error = %e, "the head hint does not open; finding the newest root by listing roots/");
            None
        }
        Err(e) => return Err(e.into()),
    };
    let start = match hint {
        Some(t) if store_has_root(store, t).await? => t,
        // No hint, a damaged one, or one naming a root that is gone (pruned, or the hint is stale).
        _ => match list_root_txgs(store).await?.last() {
            Some(t) => *t,
            None => return Ok(RootScan { intact: None, damaged: Vec::new(), newest_key_txg: 0 }),
        },
    };
    let mut scan = RootScan { intact: None, damaged: Vec::new(), newest_key_txg: start };
    let mut txg = start;
    for _ in 0..PROBE_ROOTS_MAX {
        match read_root_checked(store, txg).await? {
            RootRead::Missing => break,
            RootRead::Intact(root) => {
                scan.intact = Some(*root);
                scan.damaged.clear();
            }
            RootRead::Damaged(why) => {
                tracing::warn!(txg, why = %why, "root does not verify");
                scan.damaged.push(txg);
            }
        }
        scan.newest_key_txg = txg;
        txg += 1;
    }
    if txg - start >= PROBE_ROOTS_MAX {
        return Err(Error::corrupt(
            "pool",
            "root chain longer than the probe limit past the head hint",
        ));
    }
    if scan.intact.is_none() {
        // Every key from the start on is damaged: the newest intact root is below it.
        let older: Vec<u64> =
            list_root_txgs(store).await?.into_iter().filter(|t| *t < start).collect();
        for t in older.into_iter().rev() {
            match read_root_checked(store, t).await? {
                RootRead::Intact(root) => {
                    scan.intact = Some(*root);
                    break;
                }
                RootRead::Damaged(_) => scan.damaged.insert(0, t),
                RootRead::Missing => {}
            }
        }
    }
    Ok(scan)
}

async fn store_has_root(store: &dyn Store, txg: u64) -> Result<bool> {
    match store.head(&root_key(txg)).await {
        Ok(_) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Every root txg in the store, oldest first (a listing of `roots/` only; never data objects).
pub async fn list_root_txgs(store: &dyn Store) -> Result<Vec<u64>> {
    let keys = store.list("roots/").await?;
    let mut txgs: Vec<u64> = keys
        .iter()
        .filter_map(|(k, _)| k.strip_prefix("roots/").and_then(|h| u64::from_str_radix(h, 16).ok()))
        .collect();
    txgs.sort_unstable();
    Ok(txgs)
}

/// Older roots looked at (missing or damaged ones skipped) to find a root's predecessor.
const PREDECESSOR_PROBES_MAX: u64 = 64;
/// Claim roots in a row followed back to the data they carry (each import that died between
/// its claim and its replay's publish adds one).
const CLAIM_CHAIN_MAX: usize = 1024;

/// The txg whose data `latest` carries: its own, unless it is a claim root. An import claims
/// the pool with a root that copies its predecessor's data under the next txg number and a new
/// epoch (`pool/open/import.rs`), *before* it replays the intent log. The previous writer
/// tagged its unpublished log records with its open txg, which is that same number; if the
/// import dies before its replay is published, the claim root is the newest one, and replaying
/// only records newer than its txg would skip those records: acknowledged writes lost. So a
/// root that starts an epoch (its predecessor's epoch differs; only claims change the epoch)
/// is followed back to its predecessor, through any chain of such claims, and the log is
/// replayed from the txg of the newest root that is not a claim.
pub async fn data_txg(store: &dyn Store, latest: &Root) -> Result<u64> {
    let (mut txg, mut epoch) = (latest.txg, latest.epoch);
    for _ in 0..CLAIM_CHAIN_MAX {
        let Some(previous) = predecessor(store, txg).await? else { return Ok(txg) };
        if previous.epoch == epoch {
            return Ok(txg);
        }
        (txg, epoch) = (previous.txg, previous.epoch);
    }
    Err(Error::corrupt(
        "pool",
        format!("more than {CLAIM_CHAIN_MAX} claim roots in a row before txg {}", latest.txg),
    ))
}

/// The newest intact root older than `txg` within [`PREDECESSOR_PROBES_MAX`] txgs (roots a
/// `--rewind` discarded or retention pruned are skipped), or None.
async fn predecessor(store: &dyn Store, txg: u64) -> Result<Option<Root>> {
    for back in 1..=PREDECESSOR_PROBES_MAX.min(txg) {
        if let RootRead::Intact(root) = read_root_checked(store, txg - back).await? {
            return Ok(Some(*root));
        }
    }
    Ok(None)
}

enum RootRead {
    Missing,
    Intact(Box<Root>),
    Damaged(String),
}

async fn read_root_checked(store: &dyn Store, txg: u64) -> Result<RootRead> {
    match read_root(store, txg).await {
        Ok(Some(root)) => Ok(RootRead::Intact(Box::new(root))),
        Ok(None) => Ok(RootRead::Missing),
        Err(e @ (Error::Corrupt { .. } | Error::Checksum { .. })) => {
            Ok(RootRead::Damaged(e.to_string()))
        }
        Err(Error::Store(e)) if e.kind == StoreErrorKind::Corrupt => {
            Ok(RootRead::Damaged(e.to_string()))
        }
        Err(e) => Err(e),
    }
}

pub async fn read_root(store: &dyn Store, txg: u64) -> Result<Option<Root>> {
    match store.get(&root_key(txg)).await {
        Ok(bytes) => {
            let root = Root::decode(&bytes)?;
            if root.txg != txg {
                return Err(Error::corrupt(root_key(txg), format!("holds txg {}", root.txg)));
            }
            Ok(Some(root))
        }
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Publishes `root` as txg `root.txg`. Err(Fenced) when another writer's root is already there.
pub async fn publish_root(store: &dyn Store, root: &Root) -> Result<()> {
    let bytes = Bytes::from(root.encode_verified()?);
    match store.put(&root_key(root.txg), bytes, PutMode::Create).await {
        Ok(()) => {}
        Err(e) if e.kind == StoreErrorKind::AlreadyExists => {
            let theirs = read_root(store, root.txg).await?;
            match theirs {
                Some(t) if t.put_id == root.put_id => {} // Our own earlier attempt landed.
                Some(t) => {
                    return Err(Error::Fenced(format!(
                        "txg {} was published by {} (pid {}, import {:032x}); this writer stops",
                        root.txg, t.holder.hostname, t.holder.pid, t.holder.import_id
                    )))
                }
                // S3 answers 409 ConditionalRequestConflict (AlreadyExists to us) when the PUT races
                // an earlier attempt of ours still in flight, which may land later or never:
                // ambiguous, so the caller retries (and the next attempt tells which).
                None => {
                    return Err(Error::Store(StoreError::new(
                        StoreErrorKind::Transient,
                        "PUT",
                        &root_key(root.txg),
                        "create-only PUT conflicted but no root is there (an earlier attempt still in flight?); retrying",
                    )))
                }
            }
        }
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// Points the `head` hint at root `txg`. The hint is advisory: a stale or lost one costs import
/// a probe per root past it (`find_latest_root`), never correctness, so it is written off the
/// commit's path (txg/commit.rs) and a failure is only logged.
pub async fn write_head_hint(store: &dyn Store, txg: u64) {
    if let Err(e) = store.put(HEAD_KEY, Bytes::from(encode_head(txg)), PutMode::Overwrite).await {
        tracing::warn!(error = %e, txg, "could not update the head hint");
    }
}
