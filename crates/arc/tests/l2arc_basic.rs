//! L2ARC write and read paths: ARC eviction to L2 and back, verification against the
//! caller's checksum, time-bounded flushing, striping, and the rate cap.

// Real time is the point here: the writer thread under test runs on the system clock.
#![allow(clippy::disallowed_methods)]

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::*;
use fardisk_arc::{
    AdaptiveCache, ArcConfig, DeviceState, EvictionFeed, FeedItem, InsertKind, L2Arc,
};

#[test]
fn evicted_blocks_come_back_from_l2_after_the_arc_is_gone() {
    let rig = Rig::new(config());
    rig.l2.add_device(&rig.path("cache0"), Some(device_bytes(64))).expect("add device");
    let mut arc_config = ArcConfig::new(0, 8 * 4096);
    arc_config.entry_overhead_bytes = 0;
    let arc = AdaptiveCache::new(arc_config);
    let blocks: Vec<_> = (0..40).map(|i| (key(i), payload(key(i), 0, 4096))).collect();
    for (k, data) in &blocks {
        arc.insert(*k, data.clone(), xxhash_rust::xxh3::xxh3_64(data), InsertKind::Demand);
    }
    let feed = arc.feed();
    assert_eq!(feed.len(), 32, "everything beyond 8 blocks was evicted to the feed");
    for _ in 0..10 {
        rig.clock.advance_ms(1000);
        rig.l2.write_tick(&feed);
    }
    rig.l2.flush();
    drop(arc);
    for (k, data) in &blocks[..32] {
        assert_eq!(rig.l2.get(k, len(data), checksum(data)).as_ref(), Some(data), "block {k:?}");
    }
    for (k, data) in &blocks[32..] {
        assert_eq!(rig.l2.get(k, len(data), checksum(data)), None, "never evicted, never written");
    }
    let stats = rig.l2.stats();
    assert_eq!((stats.hits, stats.misses), (32, 8));
    assert_eq!(stats.entries, 32);
    assert_eq!(stats.size_bytes, 32 * 4096);
    assert!(stats.bytes_written >= 32 * 4096);
    assert_eq!(stats.checksum_errors, 0);
}

#[test]
fn a_new_key_never_gets_the_old_bytes() {
    let rig = Rig::new(config());
    rig.l2.add_device(&rig.path("cache0"), Some(device_bytes(16))).expect("add device");
    // Block version 1 lives at key A; an overwrite writes version 2 to a new key B.
    let (a, b) = (key(1), key(2));
    let old = payload(a, 1, 4096);
    let new = payload(b, 2, 4096);
    rig.push(a, &old);
    rig.drain_and_flush();
    assert_eq!(rig.l2.get(&b, len(&new), checksum(&new)), None, "B was never cached");
    rig.push(b, &new);
    rig.drain_and_flush();
    assert_eq!(rig.l2.get(&b, len(&new), checksum(&new)), Some(new.clone()));
    assert_eq!(rig.l2.get(&a, len(&old), checksum(&old)), Some(old.clone()));
}

#[test]
fn wrong_expected_checksum_drops_the_entry_and_counts() {
    let rig = Rig::new(config());
    rig.l2.add_device(&rig.path("cache0"), Some(device_bytes(16))).expect("add device");
    let k = key(7);
    let cached = payload(k, 1, 4096);
    rig.push(k, &cached);
    rig.drain_and_flush();
    // The caller expects other bytes for this key (for example an id reused by mistake).
    let expected = payload(k, 2, 4096);
    assert_eq!(rig.l2.get(&k, len(&expected), checksum(&expected)), None);
    assert!(!rig.l2.contains(&k), "a mismatching entry is dropped");
    assert_eq!(rig.l2.get(&k, len(&cached), checksum(&cached)), None, "and stays dropped");
    let stats = rig.l2.stats();
    assert_eq!(stats.checksum_errors, 1);
    assert_eq!(stats.hits, 0);
}

#[test]
fn blocks_already_cached_are_not_written_twice() {
    let rig = Rig::new(config());
    rig.l2.add_device(&rig.path("cache0"), Some(device_bytes(16))).expect("add device");
    let k = key(3);
    let data = payload(k, 0, 1000);
    rig.push(k, &data);
    rig.push(k, &data);
    rig.drain_and_flush();
    rig.push(k, &data);
    rig.drain_and_flush();
    let stats = rig.l2.stats();
    assert_eq!(stats.feed_entries, 1);
    assert_eq!(stats.skipped_present, 2);
    assert_eq!(stats.entries, 1);
}

#[test]
fn partly_filled_block_is_written_after_the_time_bound_and_extended_in_place() {
    let rig = Rig::new(config());
    rig.l2.add_device(&rig.path("cache0"), Some(device_bytes(16))).expect("add device");
    let first = (key(1), payload(key(1), 0, 1000));
    rig.push(first.0, &first.1);
    rig.clock.advance_ms(10);
    let report = rig.l2.write_tick(&rig.feed);
    assert_eq!((report.entries, report.block_writes), (1, 0));
    assert!(!rig.l2.contains(&first.0), "not indexed before it is on the device");
    rig.clock.advance_ms(999);
    assert_eq!(rig.l2.write_tick(&rig.feed).block_writes, 0);
    rig.clock.advance_ms(1);
    assert_eq!(rig.l2.write_tick(&rig.feed).block_writes, 1, "flush_interval_ms reached");
    assert_eq!(rig.l2.get(&first.0, len(&first.1), checksum(&first.1)), Some(first.1.clone()));

    let second = (key(2), payload(key(2), 0, 1000));
    rig.push(second.0, &second.1);
    rig.clock.advance_ms(2000);
    rig.l2.write_tick(&rig.feed);
    rig.clock.advance_ms(2000);
    rig.l2.write_tick(&rig.feed);
    let stats = rig.l2.stats();
    assert_eq!(stats.devices[0].log_blocks_written, 2, "two write-outs of one block");
    assert_eq!(rig.l2.get(&first.0, len(&first.1), checksum(&first.1)), Some(first.1.clone()));
    assert_eq!(rig.l2.get(&second.0, len(&second.1), checksum(&second.1)), Some(second.1.clone()));
}

#[test]
fn log_blocks_are_striped_round_robin_and_devices_come_and_go() {
    let rig = Rig::new(config());
    let d0 = rig.l2.add_device(&rig.path("cache0"), Some(device_bytes(32))).expect("add 0");
    let d1 = rig.l2.add_device(&rig.path("cache1"), Some(device_bytes(32))).expect("add 1");
    assert!(
        rig.l2.add_device(&rig.path("cache1"), Some(device_bytes(32))).is_err(),
        "duplicate path"
    );
    let blocks: Vec<_> = (0..30).map(|i| (key(i), payload(key(i), 0, 4096))).collect();
    for (k, data) in &blocks {
        rig.push(*k, data);
    }
    rig.drain_and_flush();
    let stats = rig.l2.stats();
    let written: Vec<u64> = stats.devices.iter().map(|d| d.log_blocks_written).collect();
    assert!(written.iter().all(|w| *w >= 4), "both devices take log blocks: {written:?}");
    assert!(written[0].abs_diff(written[1]) <= 1, "round-robin: {written:?}");
    assert!(stats.devices.iter().all(|d| d.state == DeviceState::Online));

    rig.l2.remove_device(d0).expect("remove");
    let hits = blocks
        .iter()
        .filter(|(k, d)| rig.l2.get(k, len(d), checksum(d)).as_ref() == Some(d))
        .count();
    assert!(hits > 0 && hits < blocks.len(), "only the remaining device serves: {hits}");
    assert!(rig.l2.remove_device(d0).is_err());

    let d2 = rig.l2.add_device(&rig.path("cache2"), Some(device_bytes(32))).expect("add 2");
    let more: Vec<_> = (100..110).map(|i| (key(i), payload(key(i), 0, 4096))).collect();
    for (k, data) in &more {
        rig.push(*k, data);
    }
    rig.drain_and_flush();
    for (k, data) in &more {
        assert_eq!(rig.l2.get(k, len(data), checksum(data)).as_ref(), Some(data));
    }
    let ids: Vec<_> = rig.l2.stats().devices.iter().map(|d| d.id).collect();
    assert_eq!(ids, vec![d1, d2]);
}

#[test]
fn oversized_blocks_are_skipped() {
    let rig = Rig::new(config());
    rig.l2.add_device(&rig.path("cache0"), Some(device_bytes(8))).expect("add device");
    let big = Bytes::from(vec![1u8; BLOCK_BYTES as usize]);
    rig.push(key(1), &big);
    rig.drain_and_flush();
    let stats = rig.l2.stats();
    assert_eq!((stats.skipped_too_large, stats.entries), (1, 0));
}

#[test]
fn write_rate_is_capped_on_the_injected_clock() {
    let rate_bytes_per_s: u64 = 64 << 10;
    let mut cfg = config();
    cfg.write_max_bytes_per_s = rate_bytes_per_s;
    let rig = Rig::new(cfg);
    rig.l2.add_device(&rig.path("cache0"), Some(device_bytes(512))).expect("add device");
    let feed = EvictionFeed::new(10_000, 1 << 30);
    let entry_bytes = 4096u64;
    for i in 0..1000 {
        feed.push(FeedItem::new(key(i), payload(key(i), 0, entry_bytes as usize)));
    }
    let seconds = 10u64;
    let mut taken = 0u64;
    let mut throttled_rounds = 0;
    for _ in 0..seconds * 10 {
        rig.clock.advance_ms(100);
        let report = rig.l2.write_tick(&feed);
        taken += report.bytes + report.entries * ENTRY_BYTES;
        throttled_rounds += u32::from(report.throttled);
    }
    let earned = rate_bytes_per_s * seconds;
    assert!(
        taken <= earned + rate_bytes_per_s + entry_bytes + ENTRY_BYTES,
        "took {taken} of {earned}"
    );
    assert!(taken >= earned * 9 / 10, "took only {taken} of {earned}");
    assert!(throttled_rounds > 50);
    assert!(!feed.is_empty(), "the rest waits in the feed");
    // No clock movement: nothing more is taken.
    let report = rig.l2.write_tick(&feed);
    assert_eq!(report.entries, 0);
}

/// An L2ARC on the system clock with a 16-slot device in `dir`, flushing after 20 ms (for a
/// writer thread under test).
fn l2_for_a_writer(dir: &tempfile::TempDir) -> L2Arc {
    let mut cfg = config();
    cfg.flush_interval_ms = 20;
    let clock = Arc::new(fardisk_arc::SystemClock::new());
    let l2 = L2Arc::new(cfg, POOL_GUID, clock, 1).expect("l2arc");
    l2.add_device(&dir.path().join("cache0"), Some(device_bytes(16))).expect("add device");
    l2
}

#[test]
fn background_writer_fills_the_l2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l2 = l2_for_a_writer(&dir);
    let feed = Arc::new(EvictionFeed::new(100, 1 << 20));
    let data = payload(key(1), 0, 2000);
    feed.push(FeedItem::new(key(1), data.clone()));
    let writer = l2.spawn_writer(Arc::clone(&feed), std::time::Duration::from_millis(5));
    assert!(writer.is_running());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while l2.get(&key(1), len(&data), checksum(&data)).is_none() {
        assert!(std::time::Instant::now() < deadline, "writer never wrote the block");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    writer.stop();
}

#[test]
fn log_blocks_fill_almost_every_unit() {
    // 1 MiB log blocks: 254 data units each. More 4 KiB blocks than the 16-slot ring holds, so it
    // wraps: the 15 closed slots it keeps are what the placement (two candidate buckets per
    // block, the spill for the rest) managed to fill.
    let cfg = fardisk_arc::L2ArcConfig { log_block_bytes: 1 << 20, ..config() };
    let rig = Rig::new(cfg);
    let slots = 16u64;
    rig.l2.add_device(&rig.path("cache0"), Some(8192 + slots * (1 << 20))).expect("add device");
    for i in 0..6000u64 {
        rig.push(key(i), &payload(key(i), 0, 4096));
    }
    rig.drain_and_flush();
    let stats = rig.l2.stats();
    let closed_units = (slots - 1) * 254;
    eprintln!("{} entries for {} units of closed slots", stats.entries, closed_units);
    assert!(stats.entries * 100 >= closed_units * 97, "{} entries", stats.entries);
    assert_eq!(stats.devices[0].index_full_drops, 0);
    assert_eq!(stats.checksum_errors, 0);
}

/// Random reads from the L2ARC put their blocks in the ARC and evict others the device holds
/// already. Queued for the writer again, those pushed the evicted blocks the device did not hold
/// yet out of the bounded feed, and the next read of one of them went to the store:
/// `cache-reads` read 52-55k blocks/s with 3,700-3,900 store GETs in 20 s, 74k with 992 once
/// they were no longer queued (bench/notes/cache-reads.md, 2026-12-08). While a writer runs,
/// its feed does not queue what the device holds; a block new to it still gets there.
#[test]
fn a_running_writers_feed_does_not_queue_blocks_the_device_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l2 = l2_for_a_writer(&dir);
    // A feed of 8 entries, as full as an ARC's under random reads from the device.
    let feed = Arc::new(EvictionFeed::new(8, 1 << 20));
    let held: Vec<_> = (0..8).map(|i| (key(i), payload(key(i), 0, 4096))).collect();
    for (k, data) in &held {
        feed.push(FeedItem::new(*k, data.clone()));
    }
    let writer = l2.spawn_writer(Arc::clone(&feed), std::time::Duration::from_millis(5));
    let on_device = |k| l2.contains(&k);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !held.iter().all(|(k, _)| on_device(*k)) {
        assert!(std::time::Instant::now() < deadline, "writer never wrote the first blocks");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // One block the device does not hold, then the held ones evicted again and again.
    let fresh = payload(key(100), 0, 4096);
    feed.push(FeedItem::new(key(100), fresh.clone()));
    let dropped_before = feed.dropped();
    for _ in 0..100 {
        for (k, data) in &held {
            feed.push(FeedItem::new(*k, data.clone()));
        }
    }
    assert_eq!(feed.dropped(), dropped_before, "held blocks pushed others out of the feed");
    assert_eq!(feed.skipped_held(), 800);
    while l2.get(&key(100), len(&fresh), checksum(&fresh)).is_none() {
        assert!(std::time::Instant::now() < deadline, "the new block never reached the device");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // A stopped writer's feed queues every block again (nothing filters for a writer gone).
    writer.stop();
    feed.push(FeedItem::new(key(0), held[0].1.clone()));
    assert_eq!(feed.skipped_held(), 800);
}
