//! Randomized L2ARC runs: writes, restarts, byte flips anywhere in the device file, and keys
//! re-cached with different bytes. Property: a lookup returns exactly the bytes the caller
//! expects, or nothing.

mod common;

use std::collections::HashMap;

use common::*;
use fardisk_arc::BlockKey;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    /// Evict a block into the feed: key index, version (other bytes for the same key), length.
    Push {
        key: u64,
        version: u8,
        len_bytes: usize,
    },
    /// Advance the clock and run the writer.
    Tick {
        advance_ms: u64,
    },
    Flush,
    Restart,
    /// XOR a byte of the device file at a fraction of its length (labels included).
    Flip {
        position: u16,
        mask: u8,
    },
    Get {
        key: u64,
    },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u64..40, 0u8..3, 1usize..6000)
            .prop_map(|(key, version, len_bytes)| Op::Push { key, version, len_bytes }),
        3 => (0u64..3000).prop_map(|advance_ms| Op::Tick { advance_ms }),
        1 => Just(Op::Flush),
        1 => Just(Op::Restart),
        1 => (any::<u16>(), 1u8..=255).prop_map(|(position, mask)| Op::Flip { position, mask }),
        6 => (0u64..40).prop_map(|key| Op::Get { key }),
    ]
}

const SLOTS: u64 = 6;

fn open_or_format(rig: &Rig) {
    let path = rig.path("cache0");
    if rig.l2.open_device(&path).is_err() {
        rig.l2.add_device(&path, Some(device_bytes(SLOTS))).expect("format");
    }
    wait_rebuilt(&rig.l2);
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let mut rig = Rig::new(config());
    rig.l2.add_device(&rig.path("cache0"), Some(device_bytes(SLOTS))).expect("add device");
    // What the engine would expect for each key: the bytes last evicted for it.
    let mut expected: HashMap<u64, bytes::Bytes> = HashMap::new();
    let mut hits = 0u64;
    for op in ops {
        match op {
            Op::Push { key: i, version, len_bytes } => {
                let data = payload(key(*i), *version, *len_bytes);
                rig.push(key(*i), &data);
                expected.insert(*i, data);
            }
            Op::Tick { advance_ms } => {
                rig.clock.advance_ms(*advance_ms);
                rig.l2.write_tick(&rig.feed);
            }
            Op::Flush => {
                rig.l2.flush();
            }
            Op::Restart => {
                rig.restart(config());
                open_or_format(&rig);
            }
            Op::Flip { position, mask } => {
                let len = device_bytes(SLOTS);
                flip_byte(&rig.path("cache0"), u64::from(*position) * len / 65536, *mask);
            }
            Op::Get { key: i } => {
                let k: BlockKey = key(*i);
                let Some(want) = expected.get(i) else {
                    continue;
                };
                if let Some(got) = rig.l2.get(&k, len(want), checksum(want)) {
                    prop_assert_eq!(&got, want, "wrong bytes for key {}", i);
                    hits += 1;
                }
            }
        }
    }
    let stats = rig.l2.stats();
    prop_assert!(stats.entries * 32 <= SLOTS * u64::from(BLOCK_BYTES));
    prop_assert!(stats.hits <= hits);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn l2arc_returns_expected_bytes_or_nothing(ops in prop::collection::vec(op_strategy(), 1..120)) {
        run(&ops)?;
    }
}
