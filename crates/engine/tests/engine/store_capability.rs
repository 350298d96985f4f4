//! The store capability check (objstore/capability.rs) at create and import: a store that lacks a
//! capability is refused with one line naming it and is left as it was; a store whose answers are
//! ambiguous (lost responses, conflicts with our own attempts) passes and keeps nothing of the
//! probe. The defective stores here wrap the in-memory store to show each refusal's wording; the
//! refusal by a real server that ignores If-None-Match is tests/e2e/31_store_capability.sh.

use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::clock::ManualClock;
use fardisk_engine::objstore::{
    check_store_capabilities, open_store_url, FaultPlan, FaultyStore, PutMode, Store, StoreError,
    StoreErrorKind, StoreResult, StoreUse, REQUESTS_MAX,
};
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::{Env, Pool, PoolConfig};
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn env(seed: u64) -> Env {
    Env { clock: Arc::new(ManualClock::default()), seed, blocking_inline: false }
}

/// Which defect the wrapper shows.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Defect {
    /// Create-only PUTs become overwrites (If-None-Match ignored).
    IgnoresIfNoneMatch,
    /// Create-only PUTs check, then write after a pause: a race has many winners.
    CheckThenWrite,
    /// Ranged GETs return the object from its start.
    RangeIgnored,
    /// Listing returns nothing.
    ListsNothing,
    /// DELETE is refused.
    NoDelete,
}

#[derive(Debug)]
struct Defective {
    inner: Arc<dyn Store>,
    defect: Defect,
    requests: AtomicUsize,
}

impl Defective {
    fn new(inner: Arc<dyn Store>, defect: Defect) -> Self {
        Defective { inner, defect, requests: AtomicUsize::new(0) }
    }
    fn count(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }
}

#[async_trait::async_trait]
impl Store for Defective {
    async fn put(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        self.count();
        match (self.defect, mode) {
            (Defect::IgnoresIfNoneMatch, _) => self.inner.put(key, data, PutMode::Overwrite).await,
            (Defect::CheckThenWrite, PutMode::Create) => {
                if self.inner.head(key).await.is_ok() {
                    return Err(StoreError::new(StoreErrorKind::AlreadyExists, "PUT", key, "412"));
                }
                tokio::task::yield_now().await;
                self.inner.put(key, data, PutMode::Overwrite).await
            }
            _ => self.inner.put(key, data, mode).await,
        }
    }
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        self.count();
        self.inner.get(key).await
    }
    async fn get_range(&self, key: &str, r: Range<u64>) -> StoreResult<Bytes> {
        self.count();
        if self.defect == Defect::RangeIgnored {
            let len = r.end - r.start;
            return self.inner.get_range(key, 0..len).await;
        }
        self.inner.get_range(key, r).await
    }
    async fn head(&self, key: &str) -> StoreResult<u64> {
        self.count();
        self.inner.head(key).await
    }
    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.count();
        if self.defect == Defect::NoDelete {
            return Err(StoreError::new(StoreErrorKind::Permanent, "DELETE", key, "501"));
        }
        self.inner.delete(key).await
    }
    async fn list(&self, p: &str) -> StoreResult<Vec<(String, u64)>> {
        self.count();
        if self.defect == Defect::ListsNothing {
            return Ok(Vec::new());
        }
        self.inner.list(p).await
    }
    fn describe(&self) -> String {
        format!("defective://{:?}", self.defect)
    }
}

#[tokio::test]
async fn every_missing_capability_is_refused_by_name_at_create_and_nothing_stays() {
    let cases = [
        (Defect::IgnoresIfNoneMatch, "overwrite an existing object"),
        (
            Defect::CheckThenWrite,
            "of 8 racing create-only PUTs (If-None-Match: *) of one key were told they won",
        ),
        (Defect::RangeIgnored, "ranged GETs do not work"),
        (Defect::ListsNothing, "listing does not work"),
        (Defect::NoDelete, "DELETE does not work"),
    ];
    for (i, (defect, words)) in cases.into_iter().enumerate() {
        let inner = open_store_url(&format!("memory://cap-create-{i}"), true).expect("store");
        let store = Arc::new(Defective::new(inner.clone(), defect));
        let err = Pool::create(store.clone(), "tank", CreateOptions::default(), &env(1))
            .await
            .expect_err("a defective store is refused");
        let line = err.to_string();
        assert!(line.contains(words), "{defect:?}: {line}");
        assert!(line.contains("no pool was created") && !line.contains('\n'), "{line}");
        assert!(
            line.starts_with(&format!("store defective://{defect:?} cannot hold a fardisk pool")),
            "{line}"
        );
        let left = inner.list("").await.expect("list");
        if defect == Defect::NoDelete {
            assert!(left.iter().all(|(k, _)| k.starts_with("probe/")), "{left:?}");
        } else {
            assert!(left.is_empty(), "{defect:?}: nothing may stay in the store: {left:?}");
        }
        let asked = store.requests.load(Ordering::Relaxed);
        assert!(asked <= REQUESTS_MAX, "{defect:?}: {asked} requests, bound {REQUESTS_MAX}");
    }
}

#[tokio::test]
async fn a_defective_store_is_not_claimed_at_import() {
    let inner = open_store_url("memory://cap-import", true).expect("store");
    Pool::create(inner.clone(), "tank", CreateOptions::default(), &env(2)).await.expect("create");
    let before = inner.list("").await.expect("list");
    let store = Arc::new(Defective::new(inner.clone(), Defect::IgnoresIfNoneMatch));
    let err = Pool::import(
        store,
        "tank",
        ImportOptions { config: PoolConfig::default(), ..Default::default() },
        env(3),
        Arc::new(NoCache),
    )
    .await
    .map(|_| ())
    .expect_err("import refused");
    let line = err.to_string();
    assert!(line.contains("overwrite an existing object"), "{line}");
    assert!(line.contains("the pool was not claimed"), "{line}");
    assert_eq!(inner.list("").await.expect("list"), before, "the store is as it was");
    let root = Pool::peek(inner, &env(4)).await.expect("peek");
    assert!(!root.holder.active, "nobody holds the pool");
}

#[tokio::test]
async fn good_stores_pass_in_fifteen_requests_and_keep_nothing() {
    let dir = std::env::temp_dir().join(format!("fardisk-cap-{}", std::process::id()));
    for url in ["memory://cap-good".to_string(), format!("file://{}", dir.display())] {
        let inner = open_store_url(&url, true).expect("store");
        let plain = Counting(inner.clone(), AtomicUsize::new(0));
        check_store_capabilities(&plain, 7, StoreUse::Create).await.expect("passes");
        assert_eq!(plain.1.load(Ordering::Relaxed), 15, "{url}");
        assert!(inner.list("").await.expect("list").is_empty(), "{url}: nothing stays");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A pass-through that counts requests.
#[derive(Debug)]
struct Counting(Arc<dyn Store>, AtomicUsize);

#[async_trait::async_trait]
impl Store for Counting {
    async fn put(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        self.1.fetch_add(1, Ordering::Relaxed);
        self.0.put(key, data, mode).await
    }
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        self.1.fetch_add(1, Ordering::Relaxed);
        self.0.get(key).await
    }
    async fn get_range(&self, key: &str, r: Range<u64>) -> StoreResult<Bytes> {
        self.1.fetch_add(1, Ordering::Relaxed);
        self.0.get_range(key, r).await
    }
    async fn head(&self, key: &str) -> StoreResult<u64> {
        self.1.fetch_add(1, Ordering::Relaxed);
        self.0.head(key).await
    }
    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.1.fetch_add(1, Ordering::Relaxed);
        self.0.delete(key).await
    }
    async fn list(&self, p: &str) -> StoreResult<Vec<(String, u64)>> {
        self.1.fetch_add(1, Ordering::Relaxed);
        self.0.list(p).await
    }
    fn describe(&self) -> String {
        self.0.describe()
    }
}

/// Lost responses (the retry layer repeats an applied PUT and hears "already exists") and
/// conflicts (S3's 409 for a conditional write racing our own attempt) are not defects: the check
/// reads back and passes, on every seed, and leaves nothing behind.
#[tokio::test]
async fn ambiguous_answers_are_resolved_not_refused() {
    use fardisk_engine::objstore::{RetryPolicy, RetryingStore};
    for seed in 0..40u64 {
        let e = env(seed);
        let inner = open_store_url(&format!("memory://cap-faults-{seed}"), true).expect("store");
        let plan = FaultPlan {
            lost_response_rate: 0.3,
            conflict_rate: 0.2,
            error_rate: 0.1,
            ..FaultPlan::default()
        };
        let faulty: Arc<dyn Store> = Arc::new(FaultyStore::new(inner.clone(), plan, seed));
        let store = RetryingStore::new(faulty, RetryPolicy::default(), e.clock.clone(), seed);
        check_store_capabilities(&store, u128::from(seed) << 64 | 5, StoreUse::Import)
            .await
            .unwrap_or_else(|err| panic!("seed {seed}: {err}"));
        assert!(inner.list("").await.expect("list").is_empty(), "seed {seed}: nothing stays");
    }
}
