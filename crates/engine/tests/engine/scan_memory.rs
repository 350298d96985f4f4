//! A long sequential read does not fill the ARC with blocks it reads once (issue #21,
//! `arc_stream_bytes_max`): past what the ARC keeps of one stream, the blocks only the stream
//! used leave the ARC once read, so a scan of a volume much larger than the ARC holds about
//! that much plus its readahead, and reuses that memory for the blocks ahead of it. Blocks read
//! before the scan came (the hot set) stay cached through it.

// Real time: readahead runs on the runtime's clock, and nothing here waits on a simulated one.
#![allow(clippy::disallowed_methods)]

use crate::counting_store::CountingStore;
use crate::fresh_pool;
use bytes::Bytes;
use fardisk_engine::arc_cache::ArcBlockCache;
use fardisk_engine::clock::SystemClock;
use fardisk_engine::{Env, Pool, PoolConfig};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const VOLUME_MIB: u64 = 96;
const ARC_MIB: u64 = 32;
/// The MiB of the volume read twice before the scan: hot, in the ARC's MFU list.
const HOT_MIB: u64 = 40;

fn chunk(i: u64) -> Vec<u8> {
    let mut bytes = vec![0u8; 1 << 20];
    fardisk_engine::rng::Rng::new(i + 11).fill(&mut bytes);
    bytes
}

/// Writes the volume, exports, and imports again through a counting store with a `ARC_MIB`
/// ARC and `config`. Returns the pool, the volume, the cache and the store's counter.
async fn scanned_pool(
    name: &str,
    config: PoolConfig,
) -> (Pool, u32, Arc<ArcBlockCache>, Arc<CountingStore>) {
    let env = Env { clock: Arc::new(SystemClock::default()), seed: 9, blocking_inline: false };
    let url = format!("memory://scan-memory-{name}");
    let (pool, base) = fresh_pool::created(&url, &config, &env).await;
    let vol = pool.volume_create("v", VOLUME_MIB << 20).expect("volume");
    for i in 0..VOLUME_MIB {
        pool.write(vol, i << 20, Bytes::from(chunk(i))).await.expect("write");
    }
    pool.export().await.expect("export");
    let counting = Arc::new(CountingStore::new(base));
    let cache = Arc::new(ArcBlockCache::new(ARC_MIB << 20, None));
    let pool =
        Pool::import(counting.clone(), "tank", fresh_pool::options(&config), env, cache.clone())
            .await
            .expect("import");
    let vol = pool.volume_id("v").expect("v");
    (pool, vol, cache, counting)
}

/// Reads the hot MiB twice, then the whole volume in order in 1 MiB reads, checking every byte.
async fn hot_then_scan(pool: &Pool, vol: u32) {
    for _ in 0..2 {
        let got = pool.read(vol, HOT_MIB << 20, 1 << 20).await.expect("hot read");
        assert!(got[..] == chunk(HOT_MIB)[..], "the hot MiB reads back wrong bytes");
    }
    for i in 0..VOLUME_MIB {
        let got = pool.read(vol, i << 20, 1 << 20).await.expect("read");
        assert!(got[..] == chunk(i)[..], "MiB {i} reads back wrong bytes");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_much_larger_than_the_arc_holds_about_what_it_keeps_and_the_hot_set_stays() {
    let config = PoolConfig { txg_timeout: None, ..PoolConfig::default() };
    let (pool, vol, cache, counting) = scanned_pool("kept", config).await;
    hot_then_scan(&pool, vol).await;
    let stats = cache.arc().stats();
    let size_mib = stats.size_bytes as f64 / (1 << 20) as f64;
    println!(
        "after a {VOLUME_MIB} MiB scan: ARC {size_mib:.1} MiB of {ARC_MIB}, {} blocks let go",
        stats.stream_dropped
    );
    // Kept: a quarter of the ARC (8 MiB, below arc_stream_bytes_max's 256 MiB), the readahead
    // ahead of the reader (an eighth: 4 MiB) and the hot MiB. Before: the whole 32 MiB.
    assert!(size_mib <= 16.0, "the scan left {size_mib:.1} MiB in a {ARC_MIB} MiB ARC");
    let passed_blocks = (VOLUME_MIB - 16) * 256;
    assert!(stats.stream_dropped >= passed_blocks, "{} blocks let go", stats.stream_dropped);
    // The hot MiB was read before the scan came: still cached, read without a GET.
    let gets = counting.gets.load(Ordering::SeqCst);
    let got = pool.read(vol, HOT_MIB << 20, 1 << 20).await.expect("hot read");
    assert!(got[..] == chunk(HOT_MIB)[..]);
    assert_eq!(counting.gets.load(Ordering::SeqCst), gets, "the hot MiB came from the store");
    // And the scan's first blocks (kept, a quarter of the ARC) too.
    let got = pool.read(vol, 0, 1 << 20).await.expect("read");
    assert!(got[..] == chunk(0)[..]);
    assert_eq!(counting.gets.load(Ordering::SeqCst), gets, "the scan's first MiB was not kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_limit_a_scan_fills_the_arc_as_before() {
    let config = PoolConfig { txg_timeout: None, arc_stream_bytes_max: 0, ..PoolConfig::default() };
    let (pool, vol, cache, _) = scanned_pool("unlimited", config).await;
    hot_then_scan(&pool, vol).await;
    let stats = cache.arc().stats();
    let size_mib = stats.size_bytes as f64 / (1 << 20) as f64;
    println!("after a {VOLUME_MIB} MiB scan, no limit: ARC {size_mib:.1} MiB of {ARC_MIB}");
    assert_eq!(stats.stream_dropped, 0);
    assert!(size_mib >= 30.0, "the ARC holds {size_mib:.1} MiB");
}
