//! What a cold random 4 KiB read costs the store (issue #21's goal: one round trip when its map
//! page is not cached, not two in sequence). Counted, not timed: the GETs each read makes and
//! how many of them were under way at once. The interior map pages come into the page cache in
//! the background at import (pool/map_warm.rs), and a level-1 page keeps, per leaf, a hint of
//! where that leaf's blocks were written (docs/format.md, "Map page"): a read whose leaf page is
//! not cached asks for the leaf and for the hinted range together (pool/cold_read.rs). Before
//! the hints it asked for the leaf, then, knowing where the block is, for the block: two GETs in
//! sequence, as it still does with `cold_read_bytes_max=0`.

// Real time: the store is 5 ms away on the system clock, so each GET is seen under way.
#![allow(clippy::disallowed_methods)]

use crate::counting_store::CountingStore;
use crate::fresh_pool;
use bytes::Bytes;
use fardisk_engine::clock::{Clock, SystemClock};
use fardisk_engine::{Env, Pool, PoolConfig};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const VOLUME_MIB: u64 = 512;
/// Blocks rewritten after the volume was written, so their leaves' hints name another segment.
const MOVED_MIBS: [u64; 2] = [100, 300];

fn block_byte(mib: u64, block: u64) -> u8 {
    (mib * 7 + block * 3 + 1) as u8
}

fn moved_byte(mib: u64, block: u64) -> u8 {
    block_byte(mib, block) ^ 0xa5
}

fn mib_bytes(mib: u64) -> Vec<u8> {
    (0..256u64).flat_map(|b| std::iter::repeat_n(block_byte(mib, b), 4096)).collect()
}

/// A pool with the volume written in 16 txgs and, in a 17th, blocks 0..8 of `MOVED_MIBS`
/// rewritten (their other blocks stay where the first txgs put them); imported again through a
/// store 5 ms away, counted.
async fn far_pool(name: &str, config: PoolConfig) -> (Pool, u32, Arc<CountingStore>) {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
    let env = Env { clock: clock.clone(), seed: 13, blocking_inline: false };
    let config = PoolConfig { txg_timeout: None, ..config };
    let (pool, base) = fresh_pool::created(&format!("memory://{name}"), &config, &env).await;
    let vol = pool.volume_create("v", VOLUME_MIB << 20).expect("volume");
    for i in 0..VOLUME_MIB {
        pool.write(vol, i << 20, Bytes::from(mib_bytes(i))).await.expect("write");
        if (i + 1) % 32 == 0 {
            pool.sync_txg().await.expect("sync");
        }
    }
    for mib in MOVED_MIBS {
        let moved: Vec<u8> =
            (0..8u64).flat_map(|b| std::iter::repeat_n(moved_byte(mib, b), 4096)).collect();
        pool.write(vol, mib << 20, Bytes::from(moved)).await.expect("rewrite");
    }
    pool.sync_txg().await.expect("sync");
    pool.export().await.expect("export");
    // The import's background work (root listing, space walk, interior pages) finishes first.
    fresh_pool::far_import(base, &config, 13, 5, 64 << 20, 500).await
}

/// One 4 KiB read at (`mib`, `block`), checked against `expected`: (GETs, most at once).
async fn counted_read(
    pool: &Pool,
    vol: u32,
    counting: &CountingStore,
    mib: u64,
    block: u64,
    expected: u8,
) -> (u64, u64) {
    counting.reset();
    let started = std::time::Instant::now();
    let got = pool.read(vol, (mib << 20) + block * 4096, 4096).await.expect("read");
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    assert!(got.iter().all(|b| *b == expected), "MiB {mib} block {block}: wrong bytes");
    let gets = counting.gets.load(Ordering::SeqCst);
    let together = counting.in_flight_max.load(Ordering::SeqCst);
    println!(
        "cold 4 KiB read in MiB {mib} block {block}: {gets} GETs, at most {together} at once, \
         {ms:.1} ms"
    );
    (gets, together)
}

/// Twelve reads in MiBs far apart (each needs a leaf page nothing has loaded yet, none of the
/// moved MiBs): (MiB, block, GETs, most at once) of each.
async fn cold_reads(pool: &Pool, vol: u32, counting: &CountingStore) -> Vec<(u64, u64, u64, u64)> {
    let rng = fardisk_engine::rng::Rng::new(17);
    let mut seen: std::collections::BTreeSet<u64> = MOVED_MIBS.iter().map(|m| m / 4).collect();
    let mut per_read = Vec::new();
    while per_read.len() < 12 {
        let mib = rng.next_u64() % VOLUME_MIB;
        if !seen.insert(mib / 4) {
            continue; // Bounded: 128 groups of 4 MiB, 12 wanted.
        }
        let block = rng.next_u64() % 256;
        let (gets, together) =
            counted_read(pool, vol, counting, mib, block, block_byte(mib, block)).await;
        per_read.push((mib, block, gets, together));
    }
    per_read
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_random_read_asks_for_its_leaf_and_its_block_at_once() {
    let (pool, vol, counting) = far_pool("cold-random-read", PoolConfig::default()).await;
    let per_read = cold_reads(&pool, vol, &counting).await;
    for (i, &(_, _, gets, together)) in per_read.iter().enumerate() {
        assert!(gets <= 2, "read {i}: {gets} GETs (a leaf and its block at most)");
        assert_eq!(together, gets, "read {i}: {gets} GETs, {together} at once: not one round trip");
    }
    let asked_leaf: Vec<_> = per_read.iter().filter(|r| r.2 == 2).collect();
    assert!(!asked_leaf.is_empty(), "some read had to ask for its leaf");
    // The guess's other blocks of the same leaf came along, verified, into the ARC: a read next
    // to a cold one costs nothing more.
    for &&(mib, block, _, _) in &asked_leaf {
        let next = block ^ 1; // In the same window of 32 blocks.
        let (gets, _) = counted_read(&pool, vol, &counting, mib, next, block_byte(mib, next)).await;
        assert_eq!(gets, 0, "MiB {mib} block {next}: the guess for block {block} brought it");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_moved_since_its_leaf_was_hinted_is_read_right() {
    let (pool, vol, counting) = far_pool("cold-moved", PoolConfig::default()).await;
    // MiB 100 through block 9, which the guess holds (blocks 0..8 moved, 9..31 not).
    let [first, second] = MOVED_MIBS;
    let (gets, together) =
        counted_read(&pool, vol, &counting, first, 9, block_byte(first, 9)).await;
    assert_eq!((gets, together), (2, 2), "MiB {first} block 9: leaf and guess at once");
    let (gets, _) = counted_read(&pool, vol, &counting, first, 3, moved_byte(first, 3)).await;
    assert_eq!(gets, 1, "MiB {first} block 3: its leaf is cached, its block elsewhere");
    // MiB 300 through block 3: the leaf's hint names the first txgs' segment (248 of its 256
    // blocks), block 3 lives in the last txg's: the guess's bytes do not hold it, and it is
    // fetched after the leaf.
    let (gets, _) = counted_read(&pool, vol, &counting, second, 3, moved_byte(second, 3)).await;
    assert!(gets <= 3, "MiB {second} block 3: {gets} GETs (leaf, guess, block)");
    for block in [20, 200] {
        let expected = block_byte(second, block);
        let (gets, _) = counted_read(&pool, vol, &counting, second, block, expected).await;
        assert!(gets <= 1, "MiB {second} block {block}: {gets} GETs (its leaf is cached)");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_guesses_a_cold_read_asks_for_its_leaf_then_its_block() {
    let config = PoolConfig { cold_read_bytes_max: 0, ..PoolConfig::default() };
    let (pool, vol, counting) = far_pool("cold-no-guess", config).await;
    let per_read = cold_reads(&pool, vol, &counting).await;
    for (i, &(_, _, gets, together)) in per_read.iter().enumerate() {
        assert!(gets <= 2 && together <= 1, "read {i}: {gets} GETs, {together} at once");
    }
    assert!(per_read.iter().any(|r| r.2 == 2), "some read had to find its leaf first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_read_of_blocks_still_dirty_asks_the_store_for_nothing() {
    let (pool, vol, counting) = far_pool("cold-dirty", PoolConfig::default()).await;
    // Written after the import and not synced: the blocks are in the open txg, and their leaf
    // page (MiB 200's, and MiB 201's for the read across two blocks of the second) is not
    // cached, while the level-1 page above holds its hint. The read is answered from memory:
    // neither the leaf nor the hinted range is needed, and a guess would be a GET for nothing.
    for (mib, block) in [(200u64, 5u64), (201, 9), (201, 10)] {
        let data = vec![moved_byte(mib, block); 4096];
        pool.write(vol, (mib << 20) + block * 4096, Bytes::from(data)).await.expect("write");
    }
    let (gets, _) = counted_read(&pool, vol, &counting, 200, 5, moved_byte(200, 5)).await;
    assert_eq!(gets, 0, "MiB 200 block 5 is dirty: nothing to ask the store");
    counting.reset();
    let got = pool.read(vol, (201 << 20) + 9 * 4096, 8192).await.expect("read");
    assert!(got[..4096].iter().all(|b| *b == moved_byte(201, 9)), "MiB 201 block 9");
    assert!(got[4096..].iter().all(|b| *b == moved_byte(201, 10)), "MiB 201 block 10");
    assert_eq!(counting.gets.load(Ordering::SeqCst), 0, "MiB 201 blocks 9-10 are dirty");
    // A block beside them that is not dirty still reads from the store, with its guess.
    let (gets, together) = counted_read(&pool, vol, &counting, 200, 6, block_byte(200, 6)).await;
    assert_eq!((gets, together), (2, 2), "MiB 200 block 6: its leaf and its guess at once");
}
