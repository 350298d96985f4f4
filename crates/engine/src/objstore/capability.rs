//! The store capability check run at every create and import, on every backend: before a pool is
//! created or claimed, the store must show that it does what fardisk's correctness rests on.
//!
//! - **Create-only PUT refuses an existing key** (`If-None-Match: *`; S3 and Versity answer 412,
//!   Azure 409, a local directory EEXIST). Roots and the import claim are create-only PUTs: on a
//!   store that ignores the header, two writers overwrite each other's roots and nothing fences
//!   either (some S3 implementations do exactly that, e.g. older s3proxy releases).
//! - **A race of create-only PUTs has exactly one winner**: two importers racing for the same root
//!   key must not both be told they won. `RACERS` PUTs of distinct bytes go out at once; at most
//!   one may succeed, and the object left must be the winner's.
//! - **Ranged GETs** return exactly the bytes asked for (every block read is one).
//! - **Listing** finds what was written, with its size (import's root scan, orphan collection).
//! - **DELETE** removes an object (freed segments, pruned roots); it is also the cleanup here.
//!
//! A store that fails is refused with one line naming what is missing; nothing else has been
//! written to it (the check runs before create's first root and before import's claim). The
//! check is bounded: a fixed number of requests (`REQUESTS_MAX`) under `probe/<id>/`, removed
//! again whatever the outcome. Ambiguous answers (a lost response that the retry layer repeats,
//! S3's 409 for a conditional write racing our own earlier attempt) are resolved by reading the
//! object back, never counted as a store defect.

use super::{PutMode, Store, StoreErrorKind};
use crate::error::{Error, Result};
use bytes::Bytes;
use std::ops::Range;

/// Concurrent create-only PUTs of one key in the race.
pub const RACERS: usize = 8;
/// Races run at most: a round in which no PUT landed (every answer ambiguous) is run again.
const RACE_ROUNDS_MAX: usize = 3;
/// Attempts at the first create-only PUT when its answer is ambiguous.
const CREATE_ATTEMPTS_MAX: usize = 3;
/// Every request the check can make (each one retried within the store's retry budget), for the
/// bound stated in docs/format.md: the create-only target (per attempt a PUT, a read-back and a
/// leftover delete; then the second PUT and the ranged GET), the race rounds (PUTs and a
/// read-back each), the listing, and at most two DELETEs of every key written. A store that
/// answers everything plainly takes 15: 10 PUTs, 2 GETs, 1 LIST and 2 DELETEs.
pub const REQUESTS_MAX: usize =
    CREATE_ATTEMPTS_MAX * 3 + 2 + RACE_ROUNDS_MAX * (RACERS + 1) + 1 + 2 * (1 + RACE_ROUNDS_MAX);
/// Size of the probe objects: big enough that a ranged GET from the middle means something.
const PROBE_BYTES: usize = 4096;
/// The range read back (an odd offset and length, as a block inside a segment would be).
const RANGE: Range<u64> = 1000..3071;

/// What the check is for, named in the refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreUse {
    Create,
    Import,
}

/// What a store failed to do; `Display` is the clause of the refusal that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MissingCapability {
    /// The second create-only PUT of a key was applied (If-None-Match ignored).
    CreateOnlyOverwrote,
    /// The store answered the second create-only PUT as refused but replaced the bytes anyway.
    CreateOnlyReplacedBytes,
    /// The store says it cannot do conditional writes (object_store's NotImplemented).
    CreateOnlyUnsupported(String),
    /// More than one of the racing create-only PUTs was told it won.
    RaceWinners(usize),
    /// One racer was told it won, but the object holds another racer's bytes.
    RaceWrongWinner,
    /// A ranged GET failed or returned other bytes.
    RangedGet(String),
    /// Listing failed or did not show what was written (or showed the wrong size).
    Listing(String),
    /// DELETE failed with an error retrying does not fix.
    Delete(String),
}

impl std::fmt::Display for MissingCapability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MissingCapability::CreateOnlyOverwrote => write!(
                f,
                "create-only PUTs (If-None-Match: *) overwrite an existing object instead of refusing it"
            ),
            MissingCapability::CreateOnlyReplacedBytes => write!(
                f,
                "a refused create-only PUT (If-None-Match: *) replaced the object's bytes anyway"
            ),
            MissingCapability::CreateOnlyUnsupported(why) => {
                write!(f, "create-only PUTs (If-None-Match: *) are not supported ({why})")
            }
            MissingCapability::RaceWinners(n) => write!(
                f,
                "{n} of {RACERS} racing create-only PUTs (If-None-Match: *) of one key were told they won"
            ),
            MissingCapability::RaceWrongWinner => write!(
                f,
                "of {RACERS} racing create-only PUTs (If-None-Match: *) one was told it won but another's bytes were kept"
            ),
            MissingCapability::RangedGet(why) => write!(f, "ranged GETs do not work ({why})"),
            MissingCapability::Listing(why) => write!(f, "listing does not work ({why})"),
            MissingCapability::Delete(why) => write!(f, "DELETE does not work ({why})"),
        }
    }
}

/// The refusal: one line naming the store, what it lacks and what fardisk needs it for.
pub fn refusal(store: &dyn Store, missing: &MissingCapability, purpose: StoreUse) -> Error {
    let nothing = match purpose {
        StoreUse::Create => "no pool was created",
        StoreUse::Import => "the pool was not claimed",
    };
    Error::Unavailable(format!(
        "store {} cannot hold a fardisk pool: {missing}; fardisk needs create-only PUTs, ranged GETs, \
         listing and DELETE to keep one writer per pool and its data whole ({nothing}) — use a store \
         that has them (AWS S3, MinIO, Versity, Azure Blob, a local directory)",
        store.describe()
    ))
}

/// Runs the check; `Ok` means the store has every capability, an `Unavailable` error names the
/// missing one, any other error is the store's own (unreachable, credentials) and says so.
pub async fn check_store_capabilities(
    store: &dyn Store,
    probe_id: u128,
    purpose: StoreUse,
) -> Result<()> {
    let dir = format!("probe/{probe_id:032x}/");
    let mut written = Vec::new();
    let result = probe(store, &dir, probe_id, &mut written).await;
    // Whatever happened, nothing of the probe stays (a failed delete leaves a key that `destroy`
    // removes with the pool's other prefixes).
    for key in written {
        let _ = store.delete(&key).await;
    }
    match result {
        Ok(()) => Ok(()),
        Err(Found::Missing(m)) => Err(refusal(store, &m, purpose)),
        Err(Found::Error(e)) => Err(e),
    }
}

/// The check's own outcome: a capability the store lacks, or an error that is not about that.
enum Found {
    Missing(MissingCapability),
    Error(Error),
}

impl From<super::StoreError> for Found {
    fn from(e: super::StoreError) -> Self {
        Found::Error(e.into())
    }
}

/// Deterministic probe bytes: `tag` tells the racers apart, `probe_id` tells probes apart.
fn probe_bytes(probe_id: u128, tag: u8) -> Bytes {
    let seed = (probe_id as u64) ^ ((probe_id >> 64) as u64) ^ u64::from(tag).wrapping_mul(0x9e37);
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(PROBE_BYTES);
    out.extend_from_slice(b"fardisk probe ");
    out.push(tag);
    while out.len() < PROBE_BYTES {
        // xorshift: any pattern that differs per tag and per offset will do.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(x as u8);
    }
    Bytes::from(out)
}

/// The checks in order; every key written is pushed on `written` until it is deleted again.
async fn probe(
    store: &dyn Store,
    dir: &str,
    probe_id: u128,
    written: &mut Vec<String>,
) -> std::result::Result<(), Found> {
    let key = format!("{dir}create");
    let first = probe_bytes(probe_id, 0);
    written.push(key.clone());
    create_first(store, &key, &first).await?;
    // The same key again, with other bytes: must be refused, and the bytes must stay.
    match store.put(&key, probe_bytes(probe_id, 1), PutMode::Create).await {
        Ok(()) => return Err(Found::Missing(MissingCapability::CreateOnlyOverwrote)),
        Err(e) if e.kind == StoreErrorKind::AlreadyExists => {}
        Err(e) if e.kind == StoreErrorKind::Unsupported => {
            return Err(Found::Missing(MissingCapability::CreateOnlyUnsupported(e.message)))
        }
        Err(e) => return Err(e.into()),
    }
    match store.get_range(&key, RANGE).await {
        Ok(b) if b[..] == first[RANGE.start as usize..RANGE.end as usize] => {}
        Ok(b) if b[..] == probe_bytes(probe_id, 1)[RANGE.start as usize..RANGE.end as usize] => {
            return Err(Found::Missing(MissingCapability::CreateOnlyReplacedBytes))
        }
        Ok(b) => {
            return Err(Found::Missing(MissingCapability::RangedGet(format!(
                "bytes {}..{} came back as {} other bytes",
                RANGE.start,
                RANGE.end,
                b.len()
            ))))
        }
        Err(e) if e.is_transient() => return Err(e.into()),
        Err(e) => return Err(Found::Missing(MissingCapability::RangedGet(e.message))),
    }
    let race_key = race(store, dir, probe_id, written).await?;
    let listed = match store.list(dir).await {
        Ok(l) => l,
        Err(e) if e.is_transient() => return Err(e.into()),
        Err(e) => return Err(Found::Missing(MissingCapability::Listing(e.message))),
    };
    for k in [&key, &race_key] {
        match listed.iter().find(|(name, _)| name == k) {
            // At least: an encrypted store lists a bound on the plaintext size.
            Some((_, size)) if *size >= PROBE_BYTES as u64 => {}
            Some((_, size)) => {
                return Err(Found::Missing(MissingCapability::Listing(format!(
                    "{k} listed with {size} bytes, {PROBE_BYTES} written"
                ))))
            }
            None => {
                return Err(Found::Missing(MissingCapability::Listing(format!(
                    "{k} was written but not listed under {dir}"
                ))))
            }
        }
    }
    for k in [key, race_key] {
        match store.delete(&k).await {
            Ok(()) => written.retain(|w| *w != k),
            Err(e) if e.is_transient() => return Err(e.into()),
            Err(e) => return Err(Found::Missing(MissingCapability::Delete(e.message))),
        }
    }
    Ok(())
}

/// The first create-only PUT of the target. "Already exists" is read back: our own bytes (a lost
/// response the retry layer repeated) count as created, nothing there (a conflict with our own
/// attempt in flight) is tried again, other bytes (a leftover of an earlier check with this id)
/// are deleted and tried again.
async fn create_first(
    store: &dyn Store,
    key: &str,
    bytes: &Bytes,
) -> std::result::Result<(), Found> {
    for _ in 0..CREATE_ATTEMPTS_MAX {
        match store.put(key, bytes.clone(), PutMode::Create).await {
            Ok(()) => return Ok(()),
            Err(e) if e.kind == StoreErrorKind::Unsupported => {
                return Err(Found::Missing(MissingCapability::CreateOnlyUnsupported(e.message)))
            }
            Err(e) if e.kind == StoreErrorKind::AlreadyExists => match store.get(key).await {
                Ok(b) if b == *bytes => return Ok(()),
                Ok(_) => store.delete(key).await?,
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            },
            Err(e) => return Err(e.into()),
        }
    }
    Err(Found::Error(Error::Unavailable(format!(
        "store {}: the capability probe's create-only PUT of {key} was answered 'already exists' \
         {CREATE_ATTEMPTS_MAX} times with nothing of ours there; try again",
        store.describe()
    ))))
}

/// `RACERS` create-only PUTs of one key at once. Returns the key that holds the winner.
async fn race(
    store: &dyn Store,
    dir: &str,
    probe_id: u128,
    written: &mut Vec<String>,
) -> std::result::Result<String, Found> {
    for round in 0..RACE_ROUNDS_MAX {
        let key = format!("{dir}race-{round}");
        written.push(key.clone());
        let payloads: Vec<Bytes> =
            (0..RACERS).map(|i| probe_bytes(probe_id, 16 * (round as u8 + 1) + i as u8)).collect();
        let answers = futures::future::join_all(
            payloads.iter().map(|b| store.put(&key, b.clone(), PutMode::Create)),
        )
        .await;
        let mut winners = Vec::new();
        for (i, a) in answers.into_iter().enumerate() {
            match a {
                Ok(()) => winners.push(i),
                Err(e) if e.kind == StoreErrorKind::AlreadyExists => {}
                Err(e) if e.kind == StoreErrorKind::Unsupported => {
                    return Err(Found::Missing(MissingCapability::CreateOnlyUnsupported(e.message)))
                }
                Err(e) => return Err(e.into()),
            }
        }
        if winners.len() > 1 {
            return Err(Found::Missing(MissingCapability::RaceWinners(winners.len())));
        }
        let kept = match store.get(&key).await {
            Ok(b) => b,
            // Every answer was "already exists" and nothing landed: ambiguous, run again.
            Err(e) if e.is_not_found() && winners.is_empty() => continue,
            Err(e) if e.is_not_found() => {
                return Err(Found::Missing(MissingCapability::Listing(format!(
                    "{key} was written but GET says it is not there"
                ))))
            }
            Err(e) => return Err(e.into()),
        };
        let holder = payloads.iter().position(|p| *p == kept);
        return match (winners.first(), holder) {
            (Some(w), Some(h)) if *w == h => Ok(key),
            // No racer was told it won (lost responses, repeated by the retry layer, answer
            // "already exists"): any one racer's bytes, whole, is a correct outcome.
            (None, Some(_)) => Ok(key),
            _ => Err(Found::Missing(MissingCapability::RaceWrongWinner)),
        };
    }
    Err(Found::Error(Error::Unavailable(format!(
        "store {}: {RACE_ROUNDS_MAX} rounds of racing create-only PUTs were all answered 'already exists' \
         with nothing there; try again",
        store.describe()
    ))))
}
