//! Cold map reads (issue #21): the leaf pages a long read needs (one per MiB of volume) come in
//! one batch, coalesced into ranged GETs where they sit back to back, not one GET after the
//! other before any data; and a sequential reader's next leaf pages ride along in that GET, so
//! it asks for about one map GET per `map_readahead_pages_max` MiB, not one per MiB. With a block
//! cache, a cold sequential read asks for about one GET per segment it reads: map pages in
//! batches, and a segment whose blocks racing writers left out of volume order in one GET.
//! Counted on the store after a fresh import.

// Real time is the point here: the store is 10 ms away on the system clock so GETs overlap.
#![allow(clippy::disallowed_methods)]

use crate::counting_store::CountingStore;
use crate::fresh_pool;
use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::clock::{Clock, SystemClock};
use fardisk_engine::objstore::{SimulateSpec, SimulatedStore, Store};
use fardisk_engine::{Env, Pool, PoolConfig};
use std::sync::atomic::Ordering;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaf_pages_of_a_long_read_are_fetched_together_in_one_get() {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
    let env = Env { clock: clock.clone(), seed: 3, blocking_inline: false };
    let config = PoolConfig { txg_timeout: None, ..PoolConfig::default() };
    let options = || fresh_pool::options(&config);
    let (pool, base) = fresh_pool::created("memory://map-fetch", &config, &env).await;
    let vol = pool.volume_create("v", 64 << 20).expect("volume");
    for i in 0..16u64 {
        pool.write(vol, i << 20, Bytes::from(vec![i as u8 + 1; 1 << 20])).await.expect("write");
    }
    pool.export().await.expect("export");

    let far: Arc<dyn Store> = Arc::new(SimulatedStore::new(
        base,
        SimulateSpec::parse("latency=10").expect("spec"),
        clock,
        3,
    ));
    let counting = Arc::new(CountingStore::new(far));
    let pool = Pool::import(counting.clone(), "tank", options(), env, Arc::new(NoCache))
        .await
        .expect("import");
    let vol = pool.volume_id("v").expect("v");
    // Let the import's background work (root listing, space walk) finish first.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    counting.reset();
    // The map alone: 16 leaf pages below the root's top page.
    let runs = pool.extents(vol, 0, 16 << 20).await.expect("extents");
    assert_eq!(runs, vec![(16 << 20, true)]);
    let (gets, together) =
        (counting.gets.load(Ordering::SeqCst), counting.in_flight_max.load(Ordering::SeqCst));
    println!("16 MiB of map resolved cold: {gets} GETs, at most {together} at once");
    // The 16 leaves were written by one txg, back to back: one ranged GET (and the top page,
    // if the import's own work did not leave it cached). Before the batching: 16 GETs, at most
    // 15 at once; before that, one at a time.
    assert!(gets <= 2, "the leaf pages came in {gets} GETs, not one");
    // And the data reads back.
    for i in 0..16u64 {
        let got = pool.read(vol, i << 20, 1 << 20).await.expect("read");
        assert!(got.iter().all(|b| *b == i as u8 + 1), "MiB {i}");
    }
}

/// Writes `mib` MiB (one txg per `mib_per_txg` MiB), exports, and imports again through a
/// counting store with `config` and no block cache: every read goes to the store.
async fn cold_pool(
    mib: u64,
    mib_per_txg: u64,
    config: PoolConfig,
) -> (Pool, u32, Arc<CountingStore>) {
    let env = Env { clock: Arc::new(SystemClock::default()), seed: 5, blocking_inline: false };
    let url = format!("memory://map-ahead-{mib}-{mib_per_txg}-{}", config.map_readahead_pages_max);
    let options = || fresh_pool::options(&config);
    let (pool, base) = fresh_pool::created(&url, &config, &env).await;
    let vol = pool.volume_create("v", mib << 20).expect("volume");
    for i in 0..mib {
        pool.write(vol, i << 20, Bytes::from(vec![i as u8 + 1; 1 << 20])).await.expect("write");
        if (i + 1) % mib_per_txg == 0 {
            pool.sync_txg().await.expect("sync");
        }
    }
    pool.export().await.expect("export");
    let counting = Arc::new(CountingStore::new(base));
    let pool = Pool::import(counting.clone(), "tank", options(), env, Arc::new(NoCache))
        .await
        .expect("import");
    let vol = pool.volume_id("v").expect("v");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    counting.reset();
    (pool, vol, counting)
}

/// A sequential reader in 1 MiB reads: GETs for `mib` MiB, every byte checked.
async fn read_sequentially(pool: &Pool, vol: u32, mib: u64, counting: &CountingStore) -> u64 {
    for i in 0..mib {
        let got = pool.read(vol, i << 20, 1 << 20).await.expect("read");
        assert!(got.iter().all(|b| *b == i as u8 + 1), "MiB {i} reads back wrong bytes");
    }
    counting.gets.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequential_reader_asks_for_about_one_map_get_per_readahead_pages() {
    let config = PoolConfig { txg_timeout: None, ..PoolConfig::default() };
    assert_eq!(config.map_readahead_pages_max, 32);
    // 96 MiB over 3 txgs: three runs of leaf pages, each back to back in its own segment.
    let (pool, vol, counting) = cold_pool(96, 32, config.clone()).await;
    let gets = read_sequentially(&pool, vol, 96, &counting).await;
    println!("96 MiB read cold in 1 MiB reads: {gets} GETs");
    // One data GET per read; map GETs: one per batch of up to 33 leaves, at most one more per
    // txg boundary, and the top page. Before the ride-along: 96 + 96 + 1 = 193.
    assert!(gets <= 96 + 6 + 1, "{gets} GETs for 96 data GETs: the map costs more than 7");
    assert!(gets * 10 <= 96 * 11, "{gets} GETs is more than 1.1x the 96 the data needs");

    // With the ride-along off, each leaf page is a GET of its own again.
    let config = PoolConfig { map_readahead_pages_max: 0, ..config };
    let (pool, vol, counting) = cold_pool(96, 32, config).await;
    let gets = read_sequentially(&pool, vol, 96, &counting).await;
    println!("with map_readahead_pages_max=0: {gets} GETs");
    assert!(gets >= 96 + 96, "{gets} GETs with the ride-along off: fewer than one per leaf");
}

/// A pool at `url` with one volume, "v", written in `txgs` txgs of `txg_mib` MiB (`chunk(i)` at
/// MiB `i`), then exported: its store, the volume's id and the pool's guid.
async fn exported_in_txgs(
    url: &str,
    config: &PoolConfig,
    seed: u64,
    txgs: u64,
    txg_mib: u64,
) -> (Arc<dyn Store>, u32, u128) {
    let env = Env { clock: Arc::new(SystemClock::default()), seed, blocking_inline: false };
    let (pool, base) = fresh_pool::created(url, config, &env).await;
    let mib = txgs * txg_mib;
    let vol = pool.volume_create("v", mib << 20).expect("volume");
    for i in 0..mib {
        pool.write(vol, i << 20, Bytes::from(chunk(i))).await.expect("write");
        if (i + 1) % txg_mib == 0 {
            pool.sync_txg().await.expect("sync");
        }
    }
    let guid = u128::from_str_radix(&pool.status().guid, 16).expect("guid");
    pool.export().await.expect("export");
    (base, vol, guid)
}

/// Reads the first `mib` MiB of `vol` in order, 1 MiB at a time, each checked against `chunk`.
async fn read_back_in_order(pool: &Pool, vol: u32, mib: u64) {
    for i in 0..mib {
        let got = pool.read(vol, i << 20, 1 << 20).await.expect("read");
        assert!(got[..] == chunk(i)[..], "MiB {i} reads back wrong bytes");
    }
}

/// Chunk `i` of the racing-writers volume: 1 MiB of incompressible bytes of its own.
pub(crate) fn chunk(i: u64) -> Vec<u8> {
    let mut bytes = vec![0u8; 1 << 20];
    fardisk_engine::rng::Rng::new(i + 1).fill(&mut bytes);
    bytes
}

/// engine-store's cold read with an empty ARC, traced on MinIO (2026-11-29): of 120 GETs for a
/// GiB, 44 were leaf pages loaded one readahead step at a time (11 per txg's metadata segment),
/// and segments whose blocks writers racing at a txg's edge had left out of volume order came
/// in two or three GETs. Here five txgs of 48 MiB, each with its next-to-last MiB written in the
/// next txg (as a writer that lost the race), read back cold in 1 MiB reads through a 512 MiB
/// ARC, the store 5 ms away: about one GET per segment read, plus the ramp before readahead
/// reaches its distance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_sequential_read_asks_about_one_get_per_segment_it_reads() {
    const TXG_MIB: u64 = 48;
    const TXGS: u64 = 5;
    let env = Env { clock: Arc::new(SystemClock::default()), seed: 7, blocking_inline: false };
    let config = PoolConfig { txg_timeout: None, ..PoolConfig::default() };
    let (pool, base) =
        fresh_pool::created("memory://map-ahead-racing-writers", &config, &env).await;
    let mib = TXG_MIB * TXGS;
    let vol = pool.volume_create("v", mib << 20).expect("volume");
    let mut late = None;
    for t in 0..TXGS {
        let held = t * TXG_MIB + TXG_MIB - 2;
        let mut order: Vec<u64> = late.take().into_iter().collect();
        order.extend((t * TXG_MIB..(t + 1) * TXG_MIB).filter(|&i| i != held || t + 1 == TXGS));
        late = (t + 1 < TXGS).then_some(held);
        for i in order {
            pool.write(vol, i << 20, Bytes::from(chunk(i))).await.expect("write");
        }
        pool.sync_txg().await.expect("sync");
    }
    pool.export().await.expect("export");
    let (pool, vol, counting) = fresh_pool::far_import(base, &config, 7, 5, 512 << 20, 300).await;
    read_back_in_order(&pool, vol, mib).await;
    // Map pages (10 KiB each, a txg's batch well under a MiB) and data (the reader's 1 MiB
    // reads, readahead's longer ranges) told apart by size.
    let gets = counting.get_ranges.lock().expect("get ranges").clone();
    let (map, data): (Vec<_>, Vec<_>) = gets.iter().partition(|(_, r)| r.end - r.start < 1 << 20);
    let data_segments: std::collections::BTreeSet<&String> = data.iter().map(|(k, _)| k).collect();
    println!(
        "{mib} MiB read cold with an ARC: {} map GETs, {} data GETs of {} segments",
        map.len(),
        data.len(),
        data_segments.len()
    );
    for (key, r) in &gets {
        println!("  GET {key} {r:?} ({} KiB)", (r.end - r.start) >> 10);
    }
    // Before: 14 map GETs (leaf pages a step ahead at a time, a txg's pages in 2-4 GETs) and 30
    // data GETs of 16 segments, 22-25 after the first (those at a txg's edge in two or three);
    // then 8-9 map GETs, 20-23 data GETs, 15 after the first: a map batch per txg's pages, the
    // first read's leaves before readahead starts, and the edges of the batches inside a txg's
    // pages. Since a stream's batches ride along to the end of their run, passing over the late
    // MiB's leaf that sits in the next txg's pages (tree.rs `ride_along`; 8 map GETs without the
    // passing over): one map GET per txg's pages and the first read's own.
    assert!(map.len() as u64 <= TXGS + 1, "{} map GETs for {TXGS} txgs of pages", map.len());
    // The ramp (the first 1 MiB read, before readahead starts with the second, and demand
    // reads that overtake its first short steps) splits the first segment into a few GETs (2-3
    // seen; 3-4 when readahead started with the third read); after it, a segment is one GET,
    // two where a demand read overtook readahead on a loaded machine.
    let first = &data[0].0;
    let after_ramp = data.iter().filter(|(k, _)| k != first).count();
    assert!(
        after_ramp < data_segments.len() + 2,
        "{after_ramp} data GETs for the {} segments after the first",
        data_segments.len() - 1
    );
}

/// A stream's map batches ride along to the end of the run of leaves they end in
/// (pool/map_along.rs `load_map`), on across level-1 pages: about one map GET per txg's pages, not
/// one per batch and another at each txg's edge. Four txgs of 96 MiB, so the volume spans two
/// level-1 pages (256 MiB each); a 64 MiB ARC makes readahead's distance 8 MiB and a map batch
/// 64 leaves, fewer than a txg's 96. Before: 10 map GETs (every txg's pages in two or three);
/// now one per txg and the first read's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_asks_for_about_one_map_get_per_txg_of_pages() {
    const TXG_MIB: u64 = 96;
    const TXGS: u64 = 4;
    let config = PoolConfig { txg_timeout: None, ..PoolConfig::default() };
    let mib = TXG_MIB * TXGS;
    let (base, _, _) = exported_in_txgs("memory://map-ride-along", &config, 9, TXGS, TXG_MIB).await;
    // The level-1 pages come into the page cache in the background at import (map_warm.rs).
    let (pool, vol, counting) = fresh_pool::far_import(base, &config, 9, 5, 64 << 20, 300).await;
    read_back_in_order(&pool, vol, mib).await;
    // Map pages (about 4 KiB each, a txg's run well under a MiB) told apart from data by size.
    let gets = counting.get_ranges.lock().expect("get ranges").clone();
    let map: Vec<_> = gets.iter().filter(|(_, r)| r.end - r.start < 1 << 20).collect();
    for (key, r) in &map {
        println!("  map GET {key} {r:?} ({} KiB)", (r.end - r.start) >> 10);
    }
    println!(
        "{mib} MiB read cold with a 64 MiB ARC: {} GETs, {} of map pages",
        gets.len(),
        map.len()
    );
    assert!(
        map.len() as u64 <= TXGS + 1,
        "{} map GETs for {TXGS} txgs of pages (and the first read's own)",
        map.len()
    );
}

/// A txg stores its leaf pages after the data of its last segment, and a stream needs those
/// pages about a txg's length before that data: fetched apart, that segment cost two GETs, one
/// more per txg than the data needs (engine-store: 1.14x raw's GETs). Now the pages' GET starts
/// at the segment's first block and the blocks wait in the ARC (pool/map_along.rs). Five txgs
/// of 48 MiB read back cold through a 512 MiB ARC, the store 5 ms away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_gets_each_txgs_last_segment_with_its_map_pages() {
    const TXG_MIB: u64 = 48;
    const TXGS: u64 = 5;
    let config = PoolConfig { txg_timeout: None, ..PoolConfig::default() };
    let mib = TXG_MIB * TXGS;
    let (base, _, _) = exported_in_txgs("memory://map-along", &config, 11, TXGS, TXG_MIB).await;
    let (pool, vol, counting) = fresh_pool::far_import(base, &config, 11, 5, 512 << 20, 300).await;
    read_back_in_order(&pool, vol, mib).await;
    let gets = counting.get_ranges.lock().expect("get ranges").clone();
    let mut per_segment: std::collections::BTreeMap<&String, Vec<_>> = Default::default();
    for (key, r) in &gets {
        println!("  GET {key} {r:?} ({} KiB)", (r.end - r.start) >> 10);
        per_segment.entry(key).or_default().push(r.clone());
    }
    let split: Vec<_> = per_segment.iter().filter(|(_, rs)| rs.len() > 1).collect();
    println!(
        "{mib} MiB read cold: {} GETs of {} segments, split: {split:?}",
        gets.len(),
        per_segment.len()
    );
    // The first txg (its three segments, the first in id order) is left out: the reads before
    // readahead starts split its first segment, and its last one comes in two or three GETs
    // (the first read asks for its own leaves, not the stream, which reaches that segment while
    // the pages' GET may still be under way). After it, every segment is one GET, but one where
    // a demand read overtakes readahead on a loaded machine. Before: the last segment of every
    // txg in two, 4 of the 12.
    assert_eq!(per_segment.len() as u64, 3 * TXGS, "three segments per txg");
    let later_split =
        split.iter().filter(|(key, _)| per_segment.keys().position(|k| k == *key) >= Some(3));
    let later_split = later_split.count();
    assert!(
        later_split <= 1,
        "{later_split} segments after the first txg read in more than one GET"
    );
}

/// A block that comes along with a stream's map pages is checked against its leaf's pointer
/// before the ARC takes it (pool/map_along.rs): a damaged one is left out, and the read of it
/// fetches it and fails as any read of a damaged block (rule 3), never with wrong bytes; the
/// blocks around it read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_block_that_came_along_is_an_error_not_wrong_bytes() {
    const TXG_MIB: u64 = 48;
    let config = PoolConfig { txg_timeout: None, ..PoolConfig::default() };
    let mib = 2 * TXG_MIB;
    let url = "memory://map-along-damaged";
    let (base, vol, guid) = exported_in_txgs(url, &config, 13, 2, TXG_MIB).await;
    // A block near the end of the second txg: in its last segment, before its map pages.
    let damaged_mib = 2 * TXG_MIB - 3;
    let (seg, ptr) = crate::scrub::locate(&base, guid, vol, damaged_mib * 256 + 7).await;
    crate::scrub::flip_byte(&base, seg, ptr.range().start + 100).await;
    let (pool, vol, counting) = fresh_pool::far_import(base, &config, 13, 5, 512 << 20, 300).await;
    for i in 0..mib {
        let got = pool.read(vol, i << 20, 1 << 20).await;
        match (i == damaged_mib, got) {
            (true, Err(e)) => assert!(e.to_string().contains("checksum"), "MiB {i}: {e}"),
            (true, Ok(_)) => panic!("MiB {i} read back although a block of it is damaged"),
            (false, got) => assert!(got.expect("read")[..] == chunk(i)[..], "MiB {i}"),
        }
    }
    let gets = counting.get_ranges.lock().expect("get ranges").clone();
    let key = fardisk_engine::segment::segment_key(seg);
    let of_segment: Vec<_> = gets.iter().filter(|(k, _)| *k == key).map(|(_, r)| r).collect();
    println!("GETs of the damaged block's segment: {of_segment:?}");
    // The segment came along with the pages, from its first block; the damaged block was asked
    // for again by its read.
    assert!(of_segment[0].start == 64 && of_segment[0].end > ptr.range().end, "{of_segment:?}");
    assert!(of_segment.len() >= 2, "the damaged block was not fetched again: {of_segment:?}");
}
