//! What a cold random 4 KiB read costs the store (issue #21's goal: one round trip when its map
//! page is not cached, not two in sequence). Counted, not timed: the GETs each read makes and
//! how many of them were under way at once. The interior map pages come into the page cache in
//! the background at import (pool/map_warm.rs), so a read whose leaf page is not cached asks for
//! the leaf, then, knowing where the block is, for the block: two GETs in sequence. Before the
//! warm-up, the first read into each 256 MiB asked for the page above its leaf first (3 GETs;
//! 4 for the first read after import). The goal's one round trip would need the block's place
//! known before its leaf arrives (bench/notes/engine-store.md, "A cold random read").

// Real time: the store is 5 ms away on the system clock, so each GET is seen under way.
#![allow(clippy::disallowed_methods)]

use crate::counting_store::CountingStore;
use crate::fresh_pool;
use bytes::Bytes;
use fardisk_engine::arc_cache::ArcBlockCache;
use fardisk_engine::clock::{Clock, SystemClock};
use fardisk_engine::objstore::{SimulateSpec, SimulatedStore, Store};
use fardisk_engine::{Env, Pool, PoolConfig};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const VOLUME_MIB: u64 = 512;

fn block_byte(mib: u64, block: u64) -> u8 {
    (mib * 7 + block * 3 + 1) as u8
}

fn mib_bytes(mib: u64) -> Vec<u8> {
    (0..256u64).flat_map(|b| std::iter::repeat_n(block_byte(mib, b), 4096)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_random_read_asks_for_its_leaf_then_its_block_and_nothing_more() {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
    let env = Env { clock: clock.clone(), seed: 13, blocking_inline: false };
    let config = PoolConfig { txg_timeout: None, ..PoolConfig::default() };
    let (pool, base) = fresh_pool::created("memory://cold-random-read", &config, &env).await;
    let vol = pool.volume_create("v", VOLUME_MIB << 20).expect("volume");
    for i in 0..VOLUME_MIB {
        pool.write(vol, i << 20, Bytes::from(mib_bytes(i))).await.expect("write");
        if (i + 1) % 32 == 0 {
            pool.sync_txg().await.expect("sync");
        }
    }
    pool.export().await.expect("export");

    let spec = SimulateSpec::parse("latency=5").expect("spec");
    let far: Arc<dyn Store> = Arc::new(SimulatedStore::new(base, spec, clock, 13));
    let counting = Arc::new(CountingStore::new(far));
    let cache = Arc::new(ArcBlockCache::new(64 << 20, None));
    let options = fresh_pool::options(&config);
    let pool = Pool::import(counting.clone(), "tank", options, env, cache).await.expect("import");
    let vol = pool.volume_id("v").expect("v");
    // Let the import's background work (root listing, space walk) finish first.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    // Reads in MiBs far apart: each needs a leaf page nothing has loaded yet.
    let rng = fardisk_engine::rng::Rng::new(17);
    let mut seen = std::collections::BTreeSet::new();
    let mut per_read = Vec::new();
    while per_read.len() < 12 {
        let mib = rng.next_u64() % VOLUME_MIB;
        if !seen.insert(mib / 4) {
            continue; // Bounded: 128 groups of 4 MiB, 12 wanted.
        }
        let block = rng.next_u64() % 256;
        counting.reset();
        let started = std::time::Instant::now();
        let got = pool.read(vol, (mib << 20) + block * 4096, 4096).await.expect("read");
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        assert!(got.iter().all(|b| *b == block_byte(mib, block)), "MiB {mib} block {block}");
        let gets = counting.gets.load(Ordering::SeqCst);
        let together = counting.in_flight_max.load(Ordering::SeqCst);
        println!(
            "cold 4 KiB read in MiB {mib}: {gets} GETs, at most {together} at once, {ms:.1} ms"
        );
        per_read.push((gets, together));
    }
    for (i, (gets, together)) in per_read.iter().enumerate() {
        assert!(*gets <= 2, "read {i}: {gets} GETs (a leaf and its block at most)");
        assert!(*together <= 1, "read {i}: {together} GETs at once");
    }
}
