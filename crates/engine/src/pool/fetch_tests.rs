//! A block GET in flight is joined, not repeated: a second demand read of the same cold blocks,
//! and a prefetch of blocks a demand read is fetching, wait for (or skip) that GET. The CI run of
//! 77ae70a read 16 MiB sequentially with 18.9 MB fetched: under load, demand reads and
//! readahead windows fetched the same blocks at once, because only prefetches were claimed, and
//! only once their GET was polled.

use super::super::{CreateOptions, ImportOptions};
use super::{prefetch_sources, Source};
use crate::arc_cache::ArcBlockCache;
use crate::clock::ManualClock;
use crate::objstore::{open_store_url, Body, DynStore, PutMode, Store, StoreResult};
use crate::{Env, Pool, PoolConfig};
use bytes::Bytes;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A store whose ranged GETs of the volume's data wait at a gate while `gating` is on, and are
/// counted.
#[derive(Debug)]
struct GatedStore {
    inner: DynStore,
    gating: AtomicBool,
    gate: tokio::sync::Semaphore,
    /// Data GETs that arrived while gating.
    gated: AtomicUsize,
    range_gets: AtomicUsize,
    range_bytes: AtomicU64,
    /// Ranged GETs answered as bodies in chunks of this many bytes (as a network client
    /// delivers them, at no block boundary), counted in `chopped`.
    chunk_bytes: Option<usize>,
    chopped: AtomicUsize,
}

#[async_trait::async_trait]
impl Store for GatedStore {
    async fn put(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        self.inner.put(key, data, mode).await
    }
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        self.inner.get(key).await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        // Only the volume's data, which leads the pool's first segment: the map and space pages
        // behind it are read by background work too (the space accounting after import).
        if range.start >= DATA_END {
            return self.inner.get_range(key, range).await;
        }
        self.range_gets.fetch_add(1, Ordering::SeqCst);
        self.range_bytes.fetch_add(range.end - range.start, Ordering::SeqCst);
        if self.gating.load(Ordering::SeqCst) {
            self.gated.fetch_add(1, Ordering::SeqCst);
            self.gate.acquire().await.expect("gate").forget();
        }
        self.inner.get_range(key, range).await
    }
    async fn get_range_body(&self, key: &str, range: Range<u64>) -> StoreResult<Body> {
        let whole = self.get_range(key, range).await?;
        let Some(n) = self.chunk_bytes else { return Ok(Body::from(whole)) };
        self.chopped.fetch_add(1, Ordering::SeqCst);
        Ok(Body::from_chunks(
            (0..whole.len()).step_by(n).map(|at| whole.slice(at..(at + n).min(whole.len()))),
        ))
    }
    async fn head(&self, key: &str) -> StoreResult<u64> {
        self.inner.head(key).await
    }
    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.inner.delete(key).await
    }
    async fn list(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>> {
        self.inner.list(prefix).await
    }
    fn describe(&self) -> String {
        "gated".into()
    }
}

impl GatedStore {
    fn open(&self) {
        self.gating.store(false, Ordering::SeqCst);
        self.gate.add_permits(1 << 20);
    }
}

const DATA_BYTES: usize = 1 << 20;
/// Where the data ends in the pool's first segment (its header comes first).
const DATA_END: u64 = DATA_BYTES as u64 + 4096;

fn data() -> Vec<u8> {
    // Incompressible (xorshift), so bytes fetched count blocks.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..DATA_BYTES / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect()
}

/// A pool holding `data()` in volume "v", imported again behind a gated store with an empty ARC.
async fn cold_pool(name: &str) -> (Pool, Arc<GatedStore>) {
    cold_pool_with(name, true).await
}

/// `cold_pool`, with an ARC (`cached`) or with no block cache at all.
async fn cold_pool_with(name: &str, cached: bool) -> (Pool, Arc<GatedStore>) {
    cold_pool_chopped(name, cached, None).await
}

/// `cold_pool_with`, its store's bodies in chunks of `chunk_bytes`.
async fn cold_pool_chopped(
    name: &str,
    cached: bool,
    chunk_bytes: Option<usize>,
) -> (Pool, Arc<GatedStore>) {
    let store = open_store_url(&format!("memory://fetch-join-{name}"), true).expect("store");
    let env = Env { clock: Arc::new(ManualClock::default()), seed: 7, blocking_inline: false };
    let config = PoolConfig { txg_timeout: None, ..PoolConfig::default() };
    Pool::create(store.clone(), "tank", CreateOptions::default(), &env).await.expect("create");
    let import = |store: DynStore, cached: bool| {
        let (env, config) = (env.clone(), config.clone());
        async move {
            let options = ImportOptions { force: true, config, ..Default::default() };
            let cache: Arc<dyn crate::cache::BlockCache> = if cached {
                Arc::new(ArcBlockCache::new(256 << 20, None))
            } else {
                Arc::new(crate::cache::NoCache)
            };
            Pool::import(store, "tank", options, env, cache).await.expect("import")
        }
    };
    let pool = import(store.clone(), true).await;
    let vol = pool.volume_create("v", 4 << 20).expect("volume");
    pool.write(vol, 0, Bytes::from(data())).await.expect("write");
    pool.sync_txg().await.expect("sync");
    pool.export().await.expect("export");
    let gated = Arc::new(GatedStore {
        inner: store,
        gating: AtomicBool::new(false),
        gate: tokio::sync::Semaphore::new(0),
        gated: AtomicUsize::new(0),
        range_gets: AtomicUsize::new(0),
        range_bytes: AtomicU64::new(0),
        chunk_bytes,
        chopped: AtomicUsize::new(0),
    });
    let pool = import(gated.clone(), cached).await;
    (pool, gated)
}

/// The GETs A made at once (it makes them in parallel): the count at the gate once some have
/// arrived and none came for a while (bounded, real time).
async fn gated_settled(store: &GatedStore) -> usize {
    let mut n = gated_at_least(store, 1, Duration::from_secs(10)).await;
    loop {
        let more = gated_at_least(store, n + 1, Duration::from_millis(100)).await;
        if more == n {
            return n;
        }
        n = more;
    }
}

/// Waits (bounded, real time) until `gated` GETs have arrived at the gate; returns the count.
async fn gated_at_least(store: &GatedStore, gated: usize, wait: Duration) -> usize {
    let step = Duration::from_millis(2);
    for _ in 0..wait.as_millis() / step.as_millis() {
        if store.gated.load(Ordering::SeqCst) >= gated {
            break;
        }
        tokio::time::sleep(step).await;
    }
    store.gated.load(Ordering::SeqCst)
}

/// Reader A reads the data cold and its GETs wait at the gate; then B reads the same data, and
/// the gate is watched until `b_target(by_a)` GETs arrived or `wait` passed. Opens the gate and
/// checks both reads' bytes; returns (A's GETs, the GETs at the gate before it opened).
async fn two_cold_reads(
    pool: &Pool,
    store: &GatedStore,
    b_target: impl Fn(usize) -> usize,
    wait: Duration,
) -> (usize, usize) {
    let vol = pool.volume_id("v").expect("v");
    store.gating.store(true, Ordering::SeqCst);
    let read = |pool: Pool| tokio::spawn(async move { pool.read(vol, 0, DATA_BYTES as u32).await });
    let a = read(pool.clone());
    let by_a = gated_settled(store).await;
    let b = read(pool.clone());
    let gated = gated_at_least(store, b_target(by_a), wait).await;
    store.open();
    let (a, b) = (a.await.expect("A").expect("read A"), b.await.expect("B").expect("read B"));
    assert!(a[..] == data()[..] && b[..] == data()[..], "both reads return the data");
    (by_a, gated)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_reader_of_blocks_in_flight_joins_the_get() {
    // The GETs one cold read makes alone, on its own copy of the pool.
    let (alone, alone_store) = cold_pool("alone").await;
    let vol = alone.volume_id("v").expect("v");
    alone.read(vol, 0, DATA_BYTES as u32).await.expect("read alone");
    let alone_gets = alone_store.range_gets.load(Ordering::SeqCst);

    let (pool, store) = cold_pool("two").await;
    // B either joins A's GETs or makes its own; give it time to make its own.
    let (by_a, gated) =
        two_cold_reads(&pool, &store, |by_a| by_a + 1, Duration::from_millis(300)).await;
    assert_eq!(gated, by_a, "B asked the store again for what A was fetching");
    let gets = store.range_gets.load(Ordering::SeqCst);
    assert_eq!(gets, alone_gets, "two concurrent reads made {gets} GETs, one alone {alone_gets}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefetch_of_blocks_a_demand_read_is_fetching_does_not_get_them_again() {
    let (pool, store) = cold_pool("prefetch").await;
    let vol = pool.volume_id("v").expect("v");
    // The last block first: its map page is then cached, and A's first GET is its data.
    let last = DATA_BYTES as u64 - 4096;
    pool.read(vol, last, 4096).await.expect("map page");
    let tree = pool.inner.meta.read().volumes.get(&vol).map(|v| v.tree).expect("tree");
    let sources: Vec<Source> = pool.resolve(vol, tree, 0, 127).await.expect("resolve");
    let before = store.range_gets.load(Ordering::SeqCst);

    store.gating.store(true, Ordering::SeqCst);
    let a = tokio::spawn({
        let pool = pool.clone();
        async move { pool.read(vol, 0, 128 * 4096).await }
    });
    let by_a = gated_settled(&store).await;
    let prefetch = tokio::spawn({
        let pool = pool.clone();
        async move { prefetch_sources(&pool.inner, &sources).await }
    });
    let gated = gated_at_least(&store, by_a + 1, Duration::from_millis(300)).await;
    let prefetch_done_while_a_waits = prefetch.is_finished();
    store.open();
    let a = a.await.expect("A").expect("read A");
    prefetch.await.expect("prefetch").expect("prefetch ok");
    assert!(a[..] == data()[..128 * 4096], "A returns the data");
    assert_eq!(gated, by_a, "the prefetch asked the store again for what A was fetching");
    assert!(prefetch_done_while_a_waits, "the prefetch waited for blocks it had nothing to do for");
    let gets = store.range_gets.load(Ordering::SeqCst) - before;
    assert_eq!(gets, by_a, "A's GETs and nothing more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_cache_a_second_reader_fetches_beside_the_first_not_after_it() {
    // Nothing would keep the first GET's blocks for the second reader: joining it would only
    // make the second wait for the first and then fetch the blocks again.
    let (pool, store) = cold_pool_with("nocache", false).await;
    let (by_a, gated) =
        two_cold_reads(&pool, &store, |by_a| 2 * by_a, Duration::from_secs(10)).await;
    assert_eq!(gated, 2 * by_a, "B waited for A's GETs instead of making its own");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_are_cut_right_from_a_body_in_chunks_at_no_block_boundary() {
    // 1,000-byte chunks: most 4 KiB blocks span two or more, some lie inside one.
    for cached in [true, false] {
        let (pool, store) = cold_pool_chopped(&format!("chop-{cached}"), cached, Some(1000)).await;
        let vol = pool.volume_id("v").expect("v");
        let mut got = Vec::with_capacity(DATA_BYTES);
        for at in (0..DATA_BYTES as u64).step_by(64 << 10) {
            got.extend_from_slice(&pool.read(vol, at, 64 << 10).await.expect("read"));
        }
        assert!(got == data(), "the bytes read differ from those written (cached: {cached})");
        assert!(store.chopped.load(Ordering::SeqCst) > 0, "no body came in chunks");
        // Read again: from the cache now, or from the store again without one.
        let again = pool.read(vol, 4096 * 3 + 100, 50_000).await.expect("read again");
        assert!(again[..] == data()[4096 * 3 + 100..4096 * 3 + 100 + 50_000]);
    }
}
