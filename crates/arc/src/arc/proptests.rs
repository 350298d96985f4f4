//! Property tests of the ARC against a reference model: whatever the sequence of operations,
//! the invariants hold, capacity is never exceeded, and a value returned is the value last
//! inserted for that key.

use std::collections::HashMap;

use bytes::Bytes;
use proptest::prelude::*;

use super::{AdaptiveCache, ArcConfig, InsertKind};
use crate::key::BlockKey;

/// These tests are about the replacement policy: every block is inserted and read with one
/// checksum (the checksum check has its own test in policy_tests.rs).
const SUM: u64 = 0;

#[derive(Clone, Debug)]
enum Op {
    Get(u64),
    GetPrefetch(u64),
    Insert { key: u64, len_bytes: usize, prefetch: bool },
    Remove(u64),
    LetGo(Vec<u64>),
    SetMax(u64),
    SetMin(u64),
    Shrink(u64),
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let key = 0u64..48;
    prop_oneof![
        6 => key.clone().prop_map(Op::Get),
        2 => key.clone().prop_map(Op::GetPrefetch),
        6 => (key.clone(), 16usize..400, any::<bool>())
            .prop_map(|(key, len_bytes, prefetch)| Op::Insert { key, len_bytes, prefetch }),
        1 => key.clone().prop_map(Op::Remove),
        1 => proptest::collection::vec(key, 1..6).prop_map(Op::LetGo),
        1 => (200u64..6000).prop_map(Op::SetMax),
        1 => (0u64..3000).prop_map(Op::SetMin),
        1 => (0u64..2000).prop_map(Op::Shrink),
    ]
}

fn block_key(i: u64) -> BlockKey {
    BlockKey::new(i / 4, (i % 4) as u32 * 8192)
}

/// A value that identifies its key and version, so a stale or foreign value is detectable.
fn value(key: u64, version: u64, len_bytes: usize) -> Bytes {
    let mut v = vec![0u8; len_bytes];
    v[..8].copy_from_slice(&key.to_le_bytes());
    v[8..16].copy_from_slice(&version.to_le_bytes());
    Bytes::from(v)
}

fn run(ops: &[Op], overhead_bytes: u64) -> Result<(), TestCaseError> {
    let mut config = ArcConfig::new(500, 4000);
    config.entry_overhead_bytes = overhead_bytes;
    config.ghost_entries_max = 30;
    let cache = AdaptiveCache::new(config);
    let mut model: HashMap<u64, Bytes> = HashMap::new();
    let mut gets = 0u64;
    for (version, op) in (0u64..).zip(ops) {
        match op {
            Op::Get(k) | Op::GetPrefetch(k) => {
                gets += 1;
                let got = match op {
                    Op::Get(_) => cache.get(&block_key(*k), SUM),
                    _ => cache.get_prefetch(&block_key(*k), SUM),
                };
                if let Some(got) = got {
                    prop_assert_eq!(Some(&got), model.get(k), "wrong value for key {}", k);
                }
            }
            Op::Insert { key, len_bytes, prefetch } => {
                let v = value(*key, version, *len_bytes);
                let kind = if *prefetch { InsertKind::Prefetch } else { InsertKind::Demand };
                cache.insert(block_key(*key), v.clone(), SUM, kind);
                model.insert(*key, v);
            }
            Op::Remove(k) => {
                cache.remove(&block_key(*k));
                model.remove(k);
            }
            Op::LetGo(ks) => {
                let keys: Vec<BlockKey> = ks.iter().map(|k| block_key(*k)).collect();
                cache.let_go_read_once(&keys);
                for k in ks {
                    if cache.contains(&block_key(*k)) {
                        continue;
                    }
                    model.remove(k); // Let go: a later get may only miss (checked above).
                }
            }
            Op::SetMax(b) => cache.set_max_bytes(*b),
            Op::SetMin(b) => cache.set_min_bytes(*b),
            Op::Shrink(b) => cache.shrink_target(*b),
        }
        cache.check_invariants().map_err(TestCaseError::fail)?;
        let stats = cache.stats();
        prop_assert!(stats.size_bytes <= stats.c_bytes);
        prop_assert!(stats.c_bytes <= stats.c_max_bytes);
        prop_assert!(stats.c_min_bytes <= stats.c_bytes);
        prop_assert_eq!(stats.hits + stats.misses, gets);
        prop_assert_eq!(stats.mru_bytes + stats.mfu_bytes, stats.size_bytes);
    }
    for key in cache.hot_set(100) {
        prop_assert!(cache.contains(&key), "hot-set key {:?} not resident", key);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arc_matches_reference_model(ops in prop::collection::vec(op_strategy(), 1..400)) {
        run(&ops, 0)?;
    }

    #[test]
    fn arc_matches_reference_model_with_overhead(ops in prop::collection::vec(op_strategy(), 1..400)) {
        run(&ops, 64)?;
    }
}

/// Runs of gets and inserts, each applied one at a time to one cache and as one batch call to
/// another: the batch calls take the lock per batch, and must change nothing else.
#[derive(Clone, Debug)]
enum Run {
    Gets { keys: Vec<u64>, prefetch: bool },
    Inserts { keys: Vec<(u64, usize)>, prefetch: bool },
}

fn run_strategy() -> impl Strategy<Value = Run> {
    // Up to 150 per run: past the 64 one lock acquisition serves.
    let keys = prop::collection::vec(0u64..400, 1..150);
    let sized = prop::collection::vec((0u64..400, 16usize..300), 1..150);
    prop_oneof![
        (keys, any::<bool>()).prop_map(|(keys, prefetch)| Run::Gets { keys, prefetch }),
        (sized, any::<bool>()).prop_map(|(keys, prefetch)| Run::Inserts { keys, prefetch }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn batch_calls_do_what_single_calls_do(runs in prop::collection::vec(run_strategy(), 1..30)) {
        let config = || {
            let mut c = ArcConfig::new(2_000, 20_000);
            c.ghost_entries_max = 100;
            c
        };
        let (one, batched) = (AdaptiveCache::new(config()), AdaptiveCache::new(config()));
        for (version, run) in (0u64..).zip(&runs) {
            match run {
                Run::Gets { keys, prefetch } => {
                    let singles: Vec<Option<Bytes>> = keys
                        .iter()
                        .map(|k| {
                            let k = block_key(*k);
                            if *prefetch { one.get_prefetch(&k, SUM) } else { one.get(&k, SUM) }
                        })
                        .collect();
                    let asked: Vec<(BlockKey, u64)> =
                        keys.iter().map(|k| (block_key(*k), SUM)).collect();
                    prop_assert_eq!(singles, batched.get_many(&asked, *prefetch));
                }
                Run::Inserts { keys, prefetch } => {
                    let kind = if *prefetch { InsertKind::Prefetch } else { InsertKind::Demand };
                    let items: Vec<(BlockKey, Bytes, u64)> = keys
                        .iter()
                        .map(|(k, len)| (block_key(*k), value(*k, version, *len), SUM))
                        .collect();
                    for (k, v, sum) in items.clone() {
                        one.insert(k, v, sum, kind);
                    }
                    batched.insert_many(items, kind);
                }
            }
            batched.check_invariants().map_err(TestCaseError::fail)?;
            prop_assert_eq!(one.stats(), batched.stats());
            let fed = |c: &AdaptiveCache| std::iter::from_fn(|| c.feed().pop()).collect::<Vec<_>>();
            prop_assert_eq!(fed(&one), fed(&batched));
        }
    }
}
