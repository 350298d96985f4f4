//! Unit tests of the ARC policy through the public cache type.

use bytes::Bytes;

use super::{AdaptiveCache, ArcConfig, InsertKind};
use crate::key::BlockKey;

/// Most tests here are about the replacement policy: every block is inserted and read with one
/// checksum (`a_read_naming_other_bytes_misses_and_drops_the_stale_copy` is about the check).
const SUM: u64 = 0;

const BLOCK_BYTES: usize = 100;

/// A cache holding exactly `blocks` blocks of `BLOCK_BYTES` (no per-entry overhead, so the
/// arithmetic in the tests is exact).
fn cache_of(blocks: u64) -> AdaptiveCache {
    let mut config = ArcConfig::new(0, blocks * BLOCK_BYTES as u64);
    config.entry_overhead_bytes = 0;
    AdaptiveCache::new(config)
}

fn key(i: u64) -> BlockKey {
    BlockKey::new(i, (i as u32).wrapping_mul(4096))
}

fn block(i: u64) -> Bytes {
    Bytes::from(vec![(i % 251) as u8; BLOCK_BYTES])
}

fn demand(cache: &AdaptiveCache, i: u64) {
    if cache.get(&key(i), SUM).is_none() {
        cache.insert(key(i), block(i), SUM, InsertKind::Demand);
    }
}

fn check(cache: &AdaptiveCache) {
    cache.check_invariants().expect("ARC invariants hold");
}

/// A hit is answered by comparing checksums, not by hashing the block: a read whose pointer
/// names other bytes at the same key (a stale copy) must miss, and the copy must go, so that
/// neither a later read nor the L2ARC feed can see it.
#[test]
fn a_read_naming_other_bytes_misses_and_drops_the_stale_copy() {
    let cache = cache_of(10);
    cache.insert(key(1), block(1), 111, InsertKind::Demand);
    cache.insert(key(2), block(2), 222, InsertKind::Prefetch);
    assert_eq!(cache.get(&key(1), 111), Some(block(1)));
    assert_eq!(cache.get(&key(1), 999), None, "another checksum: a miss");
    assert_eq!(cache.get(&key(1), 111), None, "the stale copy is gone");
    assert_eq!(cache.get_prefetch(&key(2), 999), None);
    assert!(!cache.contains(&key(2)));
    let stats = cache.stats();
    assert_eq!(stats.stale_dropped, 2);
    assert_eq!((stats.demand_hits, stats.demand_misses), (1, 2));
    // Re-inserted with the new checksum, it is a hit again, and eviction feeds that checksum.
    cache.insert(key(1), block(7), 999, InsertKind::Demand);
    assert_eq!(cache.get(&key(1), 999), Some(block(7)));
    cache.set_max_bytes(0);
    let fed: Vec<_> = std::iter::from_fn(|| cache.feed().pop()).collect();
    assert_eq!(fed.iter().map(|f| (f.key, f.checksum)).collect::<Vec<_>>(), vec![(key(1), 999)]);
    check(&cache);
}

#[test]
fn second_demand_read_promotes_to_mfu() {
    let cache = cache_of(10);
    cache.insert(key(1), block(1), SUM, InsertKind::Demand);
    assert_eq!(cache.stats().mru_bytes, 100);
    assert_eq!(cache.get(&key(1), SUM), Some(block(1)));
    let stats = cache.stats();
    assert_eq!((stats.mru_bytes, stats.mfu_bytes), (0, 100));
    assert_eq!((stats.demand_hits, stats.demand_misses), (1, 0));
    assert_eq!(cache.get(&key(2), SUM), None);
    assert_eq!(cache.stats().demand_misses, 1);
    check(&cache);
}

#[test]
fn first_demand_hit_on_prefetched_block_does_not_promote() {
    let cache = cache_of(10);
    cache.insert(key(1), block(1), SUM, InsertKind::Prefetch);
    assert_eq!(cache.stats().mru_prefetch_bytes, 100);
    assert_eq!(cache.get_prefetch(&key(1), SUM), Some(block(1)));
    assert_eq!(cache.get(&key(1), SUM), Some(block(1)));
    let stats = cache.stats();
    assert_eq!((stats.mru_bytes, stats.mru_prefetch_bytes, stats.mfu_bytes), (100, 0, 0));
    assert_eq!(stats.demand_hits_on_prefetched, 1);
    assert_eq!(stats.prefetch_hits, 1);
    assert_eq!(cache.get(&key(1), SUM), Some(block(1)));
    assert_eq!(cache.stats().mfu_bytes, 100);
    check(&cache);
}

#[test]
fn unread_prefetch_is_evicted_before_the_mfu_even_below_p() {
    let cache = cache_of(10);
    for i in 0..6 {
        demand(&cache, i);
        demand(&cache, i);
    }
    // MFU holds 6 blocks (more than c - p = 5): plain ARC would evict MFU once the MRU side
    // stays below p. Unread prefetches must go first instead.
    for i in 100..120 {
        cache.insert(key(i), block(i), SUM, InsertKind::Prefetch);
        check(&cache);
    }
    for i in 0..6 {
        assert!(cache.contains(&key(i)), "MFU block {i} evicted by unread prefetch");
    }
    assert!(cache.contains(&key(119)));
    assert!(!cache.contains(&key(100)));
}

#[test]
fn read_ahead_window_survives_a_full_cache() {
    let cache = cache_of(20);
    for i in 0..20 {
        demand(&cache, i);
        demand(&cache, i);
    }
    // Stream with a read-ahead window of 4: prefetch i+4, then read i on demand.
    // A stream starts with a demand read that triggers the read-ahead.
    demand(&cache, 999);
    let window = 4;
    for i in 1000..1000 + window {
        cache.insert(key(i), block(i), SUM, InsertKind::Prefetch);
    }
    let stream_len = 200;
    for i in 1000..1000 + stream_len {
        cache.insert(key(i + window), block(i + window), SUM, InsertKind::Prefetch);
        assert_eq!(cache.get(&key(i), SUM), Some(block(i)), "read-ahead block {i} was evicted");
        check(&cache);
    }
    assert_eq!(cache.stats().demand_hits_on_prefetched, stream_len);
}

#[test]
fn prefetched_never_read_blocks_are_not_fed_to_l2arc() {
    let cache = cache_of(4);
    for i in 0..4 {
        cache.insert(key(i), block(i), SUM, InsertKind::Prefetch);
    }
    for i in 10..14 {
        cache.insert(key(i), block(i), SUM, InsertKind::Demand);
    }
    assert_eq!(cache.stats().evictions, 4);
    assert!(cache.feed().is_empty());
    for i in 20..22 {
        cache.insert(key(i), block(i), SUM, InsertKind::Demand);
    }
    let feed = cache.feed();
    assert_eq!(feed.len(), 2);
    let first = feed.pop().expect("an evicted demand block");
    assert_eq!((first.key, first.data), (key(10), block(10)));
}

#[test]
fn ghost_hits_move_p_and_reenter_mfu() {
    let cache = cache_of(10);
    for i in 0..5 {
        demand(&cache, i);
        demand(&cache, i);
    }
    for i in 10..20 {
        demand(&cache, i);
    }
    // The MRU side is capped at c - MFU, so keys 10..14 went to the MRU ghost list.
    assert!(!cache.contains(&key(10)));
    let p_before = cache.stats().p_bytes;
    demand(&cache, 10);
    let stats = cache.stats();
    assert_eq!(stats.mru_ghost_hits, 1);
    assert!(stats.p_bytes > p_before, "MRU ghost hit must grow p");
    assert_eq!(cache.hot_set(1), vec![key(10)], "a ghost hit re-enters on the MFU side");
    // With p grown, the MFU side paid for the ghost hit: key 0 is now an MFU ghost.
    assert!(!cache.contains(&key(0)));
    assert!(cache.stats().mfu_ghost_bytes > 0);
    let p_before = cache.stats().p_bytes;
    demand(&cache, 0);
    let stats = cache.stats();
    assert_eq!(stats.mfu_ghost_hits, 1);
    assert!(stats.p_bytes < p_before, "MFU ghost hit must shrink p");
    check(&cache);
}

#[test]
fn demand_read_of_prefetch_evicted_unread_adapts_but_stays_mru() {
    let cache = cache_of(4);
    for i in 0..3 {
        demand(&cache, i);
        demand(&cache, i);
    }
    cache.insert(key(50), block(50), SUM, InsertKind::Prefetch);
    cache.insert(key(51), block(51), SUM, InsertKind::Prefetch);
    assert!(!cache.contains(&key(50)), "the older unread prefetch goes first");
    let p_before = cache.stats().p_bytes;
    demand(&cache, 50);
    let stats = cache.stats();
    assert_eq!(stats.mru_ghost_hits, 1);
    assert!(stats.p_bytes > p_before);
    assert!(!cache.hot_set(3).contains(&key(50)), "read once: not on the MFU side");
    check(&cache);
}

#[test]
fn shrinking_max_evicts_and_feeds_then_growth_is_gradual() {
    let cache = cache_of(10);
    for i in 0..10 {
        demand(&cache, i);
    }
    cache.set_max_bytes(500);
    let stats = cache.stats();
    assert_eq!((stats.size_bytes, stats.c_bytes, stats.c_max_bytes), (500, 500, 500));
    assert_eq!(cache.feed().len(), 5);
    check(&cache);

    cache.set_max_bytes(1000);
    assert_eq!(cache.stats().c_bytes, 500);
    for i in 20..30 {
        demand(&cache, i);
    }
    let stats = cache.stats();
    assert_eq!((stats.c_bytes, stats.size_bytes), (1000, 1000));
    check(&cache);
}

#[test]
fn shrink_target_stops_at_min() {
    let mut config = ArcConfig::new(300, 1000);
    config.entry_overhead_bytes = 0;
    let cache = AdaptiveCache::new(config);
    for i in 0..10 {
        demand(&cache, i);
    }
    cache.shrink_target(400);
    assert_eq!(cache.stats().c_bytes, 600);
    assert_eq!(cache.stats().size_bytes, 600);
    cache.shrink_target(10_000);
    assert_eq!(cache.stats().c_bytes, 300);
    assert_eq!(cache.stats().size_bytes, 300);
    check(&cache);
}

#[test]
fn oversized_insert_is_refused_and_forgets_the_old_copy() {
    let cache = cache_of(2);
    cache.insert(key(1), block(1), SUM, InsertKind::Demand);
    cache.insert(key(1), Bytes::from(vec![9u8; 201]), SUM, InsertKind::Demand);
    assert_eq!(cache.get(&key(1), SUM), None);
    assert_eq!(cache.stats().inserts_rejected, 1);
    check(&cache);
}

#[test]
fn reinsert_replaces_value_and_charge() {
    let cache = cache_of(10);
    cache.insert(key(1), block(1), SUM, InsertKind::Demand);
    let other = Bytes::from(vec![7u8; 40]);
    cache.insert(key(1), other.clone(), SUM, InsertKind::Demand);
    assert_eq!(cache.stats().size_bytes, 40);
    assert_eq!(cache.get(&key(1), SUM), Some(other));
    check(&cache);
}

#[test]
fn per_entry_overhead_is_charged() {
    let mut config = ArcConfig::new(0, 10_000);
    config.entry_overhead_bytes = 50;
    let cache = AdaptiveCache::new(config);
    for i in 0..1000 {
        cache.insert(key(i), Bytes::new(), SUM, InsertKind::Demand);
    }
    let stats = cache.stats();
    assert_eq!(stats.entries, 200, "empty values still cost their overhead");
    assert_eq!(stats.size_bytes, 10_000);
    check(&cache);
}

#[test]
fn hot_set_lists_mfu_then_mru_most_recent_first() {
    let cache = cache_of(10);
    for i in [1, 2, 3] {
        demand(&cache, i);
        demand(&cache, i);
    }
    for i in [4, 5] {
        demand(&cache, i);
    }
    cache.insert(key(6), block(6), SUM, InsertKind::Prefetch);
    let hot = cache.hot_set(10);
    assert_eq!(hot, vec![key(3), key(2), key(1), key(5), key(4)]);
    assert_eq!(cache.hot_set(2), vec![key(3), key(2)]);
}

#[test]
fn remove_forgets_resident_and_ghost_entries() {
    let cache = cache_of(4);
    for i in 0..2 {
        demand(&cache, i);
        demand(&cache, i);
    }
    for i in 2..5 {
        demand(&cache, i);
    }
    assert!(!cache.contains(&key(2)));
    assert!(cache.stats().mru_ghost_bytes > 0);
    assert!(cache.remove(&key(4)));
    assert!(!cache.remove(&key(2)), "key 2 was only a ghost");
    assert_eq!(cache.stats().mru_ghost_bytes, 0);
    demand(&cache, 2);
    assert_eq!(cache.stats().mru_ghost_hits, 0, "removed ghost must not be hit");
    check(&cache);
}

#[test]
fn ghost_entry_count_is_bounded() {
    let mut config = ArcConfig::new(0, 1_000_000);
    config.entry_overhead_bytes = 0;
    config.ghost_entries_max = 50;
    let cache = AdaptiveCache::new(config);
    for i in 0..20_000 {
        cache.insert(key(i), Bytes::from(vec![0u8; 100]), SUM, InsertKind::Demand);
    }
    assert!(cache.stats().ghost_entries <= 50);
    check(&cache);
}

#[test]
fn concurrent_readers_and_writers_keep_invariants() {
    let cache = std::sync::Arc::new(cache_of(64));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let cache = std::sync::Arc::clone(&cache);
            std::thread::spawn(move || {
                for n in 0..5_000u64 {
                    let i = (n * 7 + t * 13) % 200;
                    match cache.get(&key(i), SUM) {
                        Some(v) => assert_eq!(v, block(i)),
                        None => cache.insert(key(i), block(i), SUM, InsertKind::Demand),
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("worker thread");
    }
    check(&cache);
    let stats = cache.stats();
    assert_eq!(stats.demand_hits + stats.demand_misses, 20_000);
    assert!(stats.size_bytes <= 6400);
}

/// With feeding off (no cache device drains the feed), evictions are freed, not queued, and
/// turning it off empties what was queued; turning it on feeds again.
#[test]
fn evictions_reach_the_feed_only_while_feeding() {
    let cache = cache_of(4);
    for i in 0..8 {
        demand(&cache, i);
    }
    assert_eq!(cache.feed().len(), 4);
    cache.set_feeding(false);
    assert!(cache.feed().is_empty());
    for i in 8..16 {
        demand(&cache, i);
    }
    assert_eq!((cache.feed().len(), cache.feed().bytes()), (0, 0));
    cache.set_feeding(true);
    for i in 16..18 {
        demand(&cache, i);
    }
    assert_eq!(cache.feed().len(), 2);
    check(&cache);
}

/// A long stream's blocks that nothing but the stream has used leave the cache once read (fed
/// to the L2ARC, no ghost kept); a block read twice before the stream came stays in MFU, and a
/// block the stream's readahead brought in but it has not read yet stays too.
#[test]
fn a_stream_lets_go_of_what_it_alone_read_and_keeps_the_hot_blocks() {
    let cache = cache_of(10);
    demand(&cache, 1);
    demand(&cache, 1); // Read twice: MFU.
    demand(&cache, 2); // Read once by the stream's miss: MRU.
    cache.insert(key(3), block(3), SUM, InsertKind::Prefetch);
    assert!(cache.get(&key(3), SUM).is_some()); // The stream reads what its readahead brought.
    cache.insert(key(4), block(4), SUM, InsertKind::Prefetch); // Joined: never asked of the ARC.
    cache.insert(key(5), block(5), SUM, InsertKind::Prefetch); // Ahead of the reader.
    let n = cache.let_go_read_once(&[key(1), key(2), key(3), key(4), key(9)]);
    check(&cache);
    assert_eq!(n, 3);
    assert!(cache.contains(&key(1)), "the hot block stays");
    assert!(cache.contains(&key(5)), "the block ahead of the reader stays");
    for i in [2, 3, 4] {
        assert!(!cache.contains(&key(i)), "block {i} read once by the stream is gone");
    }
    let stats = cache.stats();
    assert_eq!((stats.stream_dropped, stats.ghost_entries, stats.entries), (3, 0, 2));
    assert_eq!(stats.size_bytes, 2 * BLOCK_BYTES as u64);
    let mut fed: Vec<u64> =
        std::iter::from_fn(|| cache.feed().pop()).map(|f| f.key.segment_id).collect();
    fed.sort_unstable();
    assert_eq!(fed, vec![2, 3, 4], "what was let go goes to the L2ARC feed");
    // Read again later, a let-go block is a plain miss, not a ghost hit promoting it to MFU.
    demand(&cache, 2);
    let stats = cache.stats();
    assert_eq!((stats.mru_ghost_hits, stats.mfu_bytes), (0, BLOCK_BYTES as u64));
}
