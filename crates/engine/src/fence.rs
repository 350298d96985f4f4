//! One writer per pool (rule 6). Roots form a chain `roots/<txg>` written with create-only PUTs: the
//! writer that creates txg N+1 owns the pool from then on, and a writer whose create of N+1 finds
//! another writer's root there is fenced and stops. An ambiguous retried PUT is told apart from a
//! rival's by the random `put_id` each root carries.

use crate::error::{Error, Result};
use crate::objstore::{PutMode, Store, StoreErrorKind};
use crate::root::{decode_head, encode_head, root_key, Root, HEAD_KEY};
use bytes::Bytes;

/// How far past the head hint import probes before giving up (the hint is rewritten every txg, so
/// it lags by at most a few roots after a crash).
const PROBE_ROOTS_MAX: u64 = 100_000;

/// The newest published root, or None when the store holds no pool.
pub async fn find_latest_root(store: &dyn Store) -> Result<Option<Root>> {
    let start = match store.get(HEAD_KEY).await {
        Ok(b) if crate::objstore::is_encrypted_object(&b) => {
            return Err(Error::BadInput(format!(
                "the pool in {} is encrypted: give its key with --key-file PATH (or FARDISK_KEY_FILE)",
                store.describe()
            )))
        }
        Ok(b) => decode_head(&b)?,
        Err(e) if e.is_not_found() => match first_root_txg(store).await? {
            Some(t) => t,
            None => return Ok(None),
        },
        Err(e) => return Err(e.into()),
    };
    let mut latest = match read_root(store, start).await? {
        Some(r) => r,
        // The hint names a root that no longer exists: the hint is corrupt or roots were pruned.
        None => match first_root_txg(store).await? {
            Some(t) => read_root(store, t).await?.ok_or_else(|| Error::corrupt("pool", "roots vanished while importing"))?,
            None => return Ok(None),
        },
    };
    for _ in 0..PROBE_ROOTS_MAX {
        match read_root(store, latest.txg + 1).await? {
            Some(next) => latest = next,
            None => return Ok(Some(latest)),
        }
    }
    Err(Error::corrupt("pool", "root chain longer than the probe limit past the head hint"))
}

/// Without a head hint, the oldest retained root (listing `roots/` only; never data objects).
async fn first_root_txg(store: &dyn Store) -> Result<Option<u64>> {
    let keys = store.list("roots/").await?;
    let mut txgs: Vec<u64> = keys
        .iter()
        .filter_map(|(k, _)| k.strip_prefix("roots/").and_then(|h| u64::from_str_radix(h, 16).ok()))
        .collect();
    txgs.sort_unstable();
    Ok(txgs.last().copied())
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
                None => return Err(Error::Bug("create-only PUT conflicted but no root is there".into())),
            }
        }
        Err(e) => return Err(e.into()),
    }
    // The hint is advisory: losing it costs import one probe, never correctness.
    if let Err(e) = store.put(HEAD_KEY, Bytes::from(encode_head(root.txg)), PutMode::Overwrite).await {
        tracing::warn!(error = %e, "could not update the head hint");
    }
    Ok(())
}

/// Refuses stores that silently ignore create-only PUTs: without them fencing is impossible.
pub async fn check_conditional_writes(store: &dyn Store, probe_id: u128) -> Result<()> {
    let key = format!("probe/{probe_id:032x}");
    match store.put(&key, Bytes::from_static(b"fardisk probe 1"), PutMode::Create).await {
        // An earlier probe under this id whose delete failed: the store refusing to overwrite it
        // already shows conditional writes work (and a leftover must never wedge every import).
        Err(e) if e.kind == StoreErrorKind::AlreadyExists => {
            let _ = store.delete(&key).await;
            return Ok(());
        }
        other => other?,
    }
    let second = store.put(&key, Bytes::from_static(b"fardisk probe 2"), PutMode::Create).await;
    let _ = store.delete(&key).await;
    match second {
        Err(e) if e.kind == StoreErrorKind::AlreadyExists => Ok(()),
        Err(e) if e.kind == StoreErrorKind::Unsupported => Err(unsupported(store)),
        Err(e) => Err(e.into()),
        Ok(()) => Err(unsupported(store)),
    }
}

fn unsupported(store: &dyn Store) -> Error {
    Error::Unavailable(format!(
        "store {} does not support conditional writes (If-None-Match); fardisk needs them to keep \
         one writer per pool — use a store that does (AWS S3, MinIO, GCS, Azure, a local directory)",
        store.describe()
    ))
}
