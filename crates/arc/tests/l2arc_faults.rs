//! L2ARC device failures: a device that vanishes, shrinks or fails I/O is FAULTED, its
//! lookups miss and nothing panics; a device whose label comes back is reopened. Concurrent
//! readers during ring reuse never see wrong bytes.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use common::*;
use fardisk_arc::{BlockKey, DeviceState};

fn blocks(range: std::ops::Range<u64>) -> Vec<(BlockKey, Bytes)> {
    range.map(|i| (key(i), payload(key(i), 0, 4096))).collect()
}

fn fill(rig: &Rig, items: &[(BlockKey, Bytes)]) {
    for (k, data) in items {
        rig.push(*k, data);
    }
    rig.drain_and_flush();
}

#[test]
fn a_deleted_device_is_faulted_and_lookups_miss() {
    let rig = Rig::new(config());
    let path = rig.path("cache0");
    rig.l2.add_device(&path, Some(device_bytes(16))).expect("add device");
    let items = blocks(0..9);
    fill(&rig, &items);
    std::fs::remove_file(&path).expect("delete device file");
    rig.l2.check_devices();
    let stats = rig.l2.stats();
    assert_eq!(stats.devices[0].state, DeviceState::Faulted);
    assert!(stats.devices[0].fault_reason.is_some());
    assert_eq!(stats.entries, 0, "a faulted device's entries leave the index");
    for (k, data) in &items {
        assert_eq!(rig.l2.get(k, len(data), checksum(data)), None);
    }
    // With no device in service the writer leaves the feed alone.
    rig.push(key(50), &payload(key(50), 0, 100));
    rig.clock.advance_ms(1000);
    assert_eq!(rig.l2.write_tick(&rig.feed).entries, 0);
    assert_eq!(rig.feed.len(), 1);
}

#[test]
fn the_writer_notices_a_vanished_device_by_itself() {
    let rig = Rig::new(config());
    let path = rig.path("cache0");
    rig.l2.add_device(&path, Some(device_bytes(16))).expect("add device");
    fill(&rig, &blocks(0..3));
    std::fs::remove_file(&path).expect("delete device file");
    rig.clock.advance_ms(1000); // health_check_interval_ms
    rig.l2.write_tick(&rig.feed);
    assert_eq!(rig.l2.stats().devices[0].state, DeviceState::Faulted);
}

#[test]
fn a_truncated_device_faults_on_read() {
    let rig = Rig::new(config());
    let path = rig.path("cache0");
    rig.l2.add_device(&path, Some(device_bytes(16))).expect("add device");
    let items = blocks(0..9);
    fill(&rig, &items);
    let file = std::fs::OpenOptions::new().write(true).open(&path).expect("open");
    file.set_len(8192).expect("truncate");
    let (k, data) = &items[0];
    assert_eq!(rig.l2.get(k, len(data), checksum(data)), None);
    let stats = rig.l2.stats();
    assert_eq!(stats.devices[0].state, DeviceState::Faulted);
    assert_eq!(stats.io_errors, 1);
    assert_eq!(stats.checksum_errors, 0);
    for (k, data) in &items {
        assert_eq!(rig.l2.get(k, len(data), checksum(data)), None);
    }
    // The label survived the truncation but the ring did not: it stays faulted.
    rig.l2.check_devices();
    assert_eq!(rig.l2.stats().devices[0].state, DeviceState::Faulted);
}

#[test]
fn a_truncated_device_is_found_by_the_health_check() {
    let rig = Rig::new(config());
    let path = rig.path("cache0");
    rig.l2.add_device(&path, Some(device_bytes(16))).expect("add device");
    fill(&rig, &blocks(0..3));
    let file = std::fs::OpenOptions::new().write(true).open(&path).expect("open");
    file.set_len(device_bytes(8)).expect("shrink");
    rig.l2.check_devices();
    let stats = rig.l2.stats();
    assert_eq!(stats.devices[0].state, DeviceState::Faulted);
    assert!(stats.devices[0].fault_reason.as_deref().is_some_and(|r| r.contains("truncated")));
}

#[test]
fn a_device_that_comes_back_is_reopened_and_rebuilt() {
    let rig = Rig::new(config());
    let path = rig.path("cache0");
    let away = rig.path("cache0.away");
    rig.l2.add_device(&path, Some(device_bytes(16))).expect("add device");
    let items = blocks(0..9);
    fill(&rig, &items);
    std::fs::rename(&path, &away).expect("move away");
    rig.l2.check_devices();
    assert_eq!(rig.l2.stats().devices[0].state, DeviceState::Faulted);
    std::fs::rename(&away, &path).expect("move back");
    rig.l2.check_devices();
    let stats = wait_rebuilt(&rig.l2);
    assert_eq!(stats.devices[0].state, DeviceState::Online);
    assert_eq!(stats.rebuild.entries, 9);
    for (k, data) in &items {
        assert_eq!(rig.l2.get(k, len(data), checksum(data)).as_ref(), Some(data));
    }
}

#[test]
fn readers_racing_ring_reuse_never_see_wrong_bytes() {
    let rig = Arc::new(Rig::new(config()));
    rig.l2.add_device(&rig.path("cache0"), Some(device_bytes(4))).expect("add device");
    let items: Arc<Vec<(BlockKey, Bytes)>> = Arc::new(blocks(0..600));
    let stop = Arc::new(AtomicBool::new(false));
    let hits = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..3u64)
        .map(|t| {
            let (rig, items, stop, hits) = (rig.clone(), items.clone(), stop.clone(), hits.clone());
            std::thread::spawn(move || {
                let mut i = t;
                // Bounded: the writer below finishes in a bounded number of rounds.
                while !stop.load(Ordering::Relaxed) {
                    let (k, data) = &items[(i % items.len() as u64) as usize];
                    if let Some(got) = rig.l2.get(k, len(data), checksum(data)) {
                        assert_eq!(&got, data, "wrong bytes for {k:?}");
                        hits.fetch_add(1, Ordering::Relaxed);
                    }
                    i = i.wrapping_add(7);
                }
            })
        })
        .collect();
    for chunk in items.chunks(3) {
        fill(&rig, chunk);
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("reader thread");
    }
    let stats = rig.l2.stats();
    assert_eq!(stats.checksum_errors, 0, "slot reuse must not look like damage");
    assert_eq!(stats.io_errors, 0);
    assert!(stats.devices[0].log_blocks_written >= 200, "the ring wrapped many times");
    eprintln!("concurrent hits: {}", hits.load(Ordering::Relaxed));
}
