//! L2ARC persistence: the index is rebuilt from log-block headers after a restart, damaged log
//! blocks cost only their own entries, and the ring wraps without ever serving wrong bytes.

mod common;

use bytes::Bytes;
use common::*;
use fardisk_arc::{BlockKey, DeviceState, L2Error};

/// Three 4 KiB entries fill one 16 KiB log block, so block n holds keys 3n, 3n+1, 3n+2.
const PER_BLOCK: u64 = 3;

fn blocks(range: std::ops::Range<u64>) -> Vec<(BlockKey, Bytes)> {
    range.map(|i| (key(i), payload(key(i), 0, 4096))).collect()
}

fn write_all(rig: &Rig, items: &[(BlockKey, Bytes)]) {
    for (k, data) in items {
        rig.push(*k, data);
    }
    rig.drain_and_flush();
}

/// Every lookup returns the exact bytes or nothing. Returns the number of hits.
fn hits_all_correct(rig: &Rig, items: &[(BlockKey, Bytes)]) -> usize {
    items
        .iter()
        .filter(|(k, data)| match rig.l2.get(k, len(data), checksum(data)) {
            Some(got) => {
                assert_eq!(&got, data, "wrong bytes for {k:?}");
                true
            }
            None => false,
        })
        .count()
}

#[test]
fn reopen_rebuilds_the_index_and_writing_continues_after_the_newest_block() {
    let mut rig = Rig::new(config());
    let path = rig.path("cache0");
    rig.l2.add_device(&path, Some(device_bytes(32))).expect("add device");
    let first = blocks(0..20);
    write_all(&rig, &first);
    assert_eq!(rig.l2.sync().block_writes, 0, "nothing left unwritten after the flush");

    rig.restart(config());
    assert!(!rig.l2.contains(&first[0].0), "a new L2ARC starts empty");
    rig.l2.open_device(&path).expect("open device");
    let stats = wait_rebuilt(&rig.l2);
    assert_eq!(stats.rebuild.entries, 20);
    assert_eq!(stats.rebuild.bytes, 20 * 4096);
    assert_eq!(stats.rebuild.blocks_skipped, 0);
    assert_eq!(stats.rebuild.slots_scanned, 32);
    assert_eq!(stats.devices[0].state, DeviceState::Online);
    assert_eq!(hits_all_correct(&rig, &first), 20);

    // New writes must not land on the slots holding the restored entries.
    let second = blocks(100..115);
    write_all(&rig, &second);
    assert_eq!(hits_all_correct(&rig, &first), 20);
    assert_eq!(hits_all_correct(&rig, &second), 15);

    rig.restart(config());
    rig.l2.open_device(&path).expect("open device again");
    let stats = wait_rebuilt(&rig.l2);
    assert_eq!(stats.rebuild.entries, 35);
    assert_eq!(hits_all_correct(&rig, &first) + hits_all_correct(&rig, &second), 35);
}

#[test]
fn open_imports_the_good_devices_and_reports_the_rest() {
    let rig = Rig::new(config());
    let (good0, good1, missing) = (rig.path("cache0"), rig.path("cache1"), rig.path("gone"));
    rig.l2.add_device(&good0, Some(device_bytes(8))).expect("add 0");
    rig.l2.add_device(&good1, Some(device_bytes(8))).expect("add 1");
    let items = blocks(0..12);
    write_all(&rig, &items);
    let paths = vec![good0, missing.clone(), good1];
    let (l2, failures) =
        fardisk_arc::L2Arc::open(config(), POOL_GUID, rig.clock.clone(), 9, &paths).expect("open");
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].0, missing);
    let stats = wait_rebuilt(&l2);
    assert_eq!(stats.devices.len(), 2);
    assert_eq!(stats.rebuild.entries, 12);
    for (k, data) in &items {
        assert_eq!(l2.get(k, len(data), checksum(data)).as_ref(), Some(data));
    }
}

#[test]
fn a_device_of_another_pool_or_without_label_is_refused() {
    let mut rig = Rig::new(config());
    let path = rig.path("cache0");
    std::fs::write(&path, vec![0u8; device_bytes(8) as usize]).expect("blank file");
    assert!(matches!(rig.l2.open_device(&path), Err(L2Error::BadLabel { .. })));
    rig.l2.add_device(&path, None).expect("format");
    rig.restart(config());
    let clock = rig.clock.clone();
    let other = fardisk_arc::L2Arc::new(config(), POOL_GUID + 1, clock, 5).expect("l2arc");
    assert!(matches!(other.open_device(&path), Err(L2Error::ForeignPool { .. })));
    assert!(rig.l2.open_device(&path).is_ok());
}

#[test]
fn a_damaged_label_copy_is_survived() {
    let mut rig = Rig::new(config());
    let path = rig.path("cache0");
    rig.l2.add_device(&path, Some(device_bytes(8))).expect("add device");
    write_all(&rig, &blocks(0..3));
    flip_byte(&path, 20, 0xff);
    rig.restart(config());
    rig.l2.open_device(&path).expect("second label copy");
    assert_eq!(wait_rebuilt(&rig.l2).rebuild.entries, 3);
    flip_byte(&path, 4096 + 20, 0xff);
    rig.restart(config());
    assert!(matches!(rig.l2.open_device(&path), Err(L2Error::BadLabel { .. })));
}

#[test]
fn a_corrupt_log_block_header_loses_only_its_own_entries() {
    let mut rig = Rig::new(config());
    let path = rig.path("cache0");
    rig.l2.add_device(&path, Some(device_bytes(32))).expect("add device");
    let items = blocks(0..18); // six full log blocks in slots 0..6
    write_all(&rig, &items);
    // Damage block 2's entry table (its second entry's checksum field).
    flip_byte(&path, slot_offset(2) + HEADER_BYTES + ENTRY_BYTES + 16, 0x01);
    rig.restart(config());
    rig.l2.open_device(&path).expect("open device");
    let stats = wait_rebuilt(&rig.l2);
    assert_eq!(stats.rebuild.blocks_skipped, 1);
    assert_eq!(stats.rebuild.entries, 15);
    for (i, (k, data)) in items.iter().enumerate() {
        let in_damaged_block = i as u64 / PER_BLOCK == 2;
        let got = rig.l2.get(k, len(data), checksum(data));
        assert_eq!(got.is_some(), !in_damaged_block, "entry {i}");
        if let Some(got) = got {
            assert_eq!(&got, data);
        }
    }
}

#[test]
fn a_torn_header_write_loses_only_that_block() {
    let mut rig = Rig::new(config());
    let path = rig.path("cache0");
    rig.l2.add_device(&path, Some(device_bytes(32))).expect("add device");
    let items = blocks(0..12);
    write_all(&rig, &items);
    // A torn write: the first half of block 1's header is from an older write (zeros here).
    {
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new().write(true).open(&path).expect("open");
        file.write_all_at(&[0u8; 32][..], slot_offset(1) + 8).expect("tear");
    }
    rig.restart(config());
    rig.l2.open_device(&path).expect("open device");
    let stats = wait_rebuilt(&rig.l2);
    assert_eq!(stats.rebuild.entries, 9);
    assert_eq!(hits_all_correct(&rig, &items), 9);
}

#[test]
fn corrupt_data_is_caught_on_read_and_never_returned() {
    let mut rig = Rig::new(config());
    let path = rig.path("cache0");
    rig.l2.add_device(&path, Some(device_bytes(32))).expect("add device");
    let items = blocks(0..9);
    write_all(&rig, &items);
    // Data starts after the block's one metadata unit: the first entry of block 0 is its
    // second 4 KiB.
    flip_byte(&path, slot_offset(0) + UNIT_BYTES + 100, 0x40);
    assert_eq!(
        rig.l2.get(&items[0].0, len(&items[0].1), checksum(&items[0].1)),
        None,
        "live index"
    );
    assert_eq!(rig.l2.stats().checksum_errors, 1);

    // The same damage found after a restart.
    flip_byte(&path, slot_offset(1) + UNIT_BYTES + 100, 0x40);
    rig.restart(config());
    rig.l2.open_device(&path).expect("open device");
    wait_rebuilt(&rig.l2);
    assert_eq!(hits_all_correct(&rig, &items), 7, "the two damaged entries miss");
    assert_eq!(rig.l2.stats().checksum_errors, 2);
}

#[test]
fn wrapping_the_ring_drops_overwritten_entries_first() {
    let mut rig = Rig::new(config());
    let path = rig.path("cache0");
    let slots = 4;
    rig.l2.add_device(&path, Some(device_bytes(slots))).expect("add device");
    let items = blocks(0..30); // ten blocks through a four-slot ring
    for chunk in items.chunks(3) {
        write_all(&rig, chunk);
        let stats = rig.l2.stats();
        assert!(stats.entries <= slots * PER_BLOCK, "index larger than the ring");
        hits_all_correct(&rig, &items);
    }
    // The last four blocks survive (the open one included).
    let survivors = &items[18..];
    assert_eq!(hits_all_correct(&rig, survivors), 12);
    assert_eq!(hits_all_correct(&rig, &items[..18]), 0);
    assert_eq!(rig.l2.stats().checksum_errors, 0, "no stale entry was ever read");

    rig.restart(config());
    rig.l2.open_device(&path).expect("open device");
    let stats = wait_rebuilt(&rig.l2);
    assert_eq!(stats.rebuild.entries, 12);
    assert_eq!(hits_all_correct(&rig, &items), 12);
    // The writer resumes after the newest block: the oldest survivor's slot goes first.
    write_all(&rig, &blocks(100..103));
    assert_eq!(hits_all_correct(&rig, &items[18..21]), 0);
    assert_eq!(hits_all_correct(&rig, &items[21..]), 9);
}
