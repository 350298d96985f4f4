//! Scan resistance: a sequential pass over four times the cache size must leave the MFU working
//! set resident. A plain LRU of the same size (implemented here as the control) loses it, which
//! shows the workload really is hostile.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use fardisk_arc::{AdaptiveCache, ArcConfig, BlockKey, InsertKind};

/// These tests are about the replacement policy: every block is inserted and read with one
/// checksum (the checksum check has its own test in policy_tests.rs).
const SUM: u64 = 0;

const BLOCK_BYTES: usize = 4096;
const CACHE_BLOCKS: u64 = 1000;
const SCAN_BLOCKS: u64 = 4 * CACHE_BLOCKS;
const SCAN_SEGMENT: u64 = 1 << 40;

/// The two caches under the same workload.
trait Cache {
    fn read(&mut self, key: BlockKey);
    fn prefetch(&mut self, key: BlockKey);
    fn resident(&self, key: &BlockKey) -> bool;
}

/// Least-recently-used by bytes; the control.
struct PlainLru {
    capacity_bytes: u64,
    size_bytes: u64,
    clock: u64,
    by_key: HashMap<BlockKey, u64>,
    by_age: BTreeMap<u64, BlockKey>,
}

impl PlainLru {
    fn new(capacity_bytes: u64) -> Self {
        Self {
            capacity_bytes,
            size_bytes: 0,
            clock: 0,
            by_key: HashMap::new(),
            by_age: BTreeMap::new(),
        }
    }

    fn touch(&mut self, key: BlockKey) {
        self.clock += 1;
        if let Some(old) = self.by_key.insert(key, self.clock) {
            self.by_age.remove(&old);
        } else {
            self.size_bytes += BLOCK_BYTES as u64;
        }
        self.by_age.insert(self.clock, key);
        while self.size_bytes > self.capacity_bytes {
            let (_, victim) = self.by_age.pop_first().expect("non-empty when over capacity");
            self.by_key.remove(&victim);
            self.size_bytes -= BLOCK_BYTES as u64;
        }
    }
}

impl Cache for PlainLru {
    fn read(&mut self, key: BlockKey) {
        self.touch(key);
    }
    fn prefetch(&mut self, key: BlockKey) {
        self.touch(key);
    }
    fn resident(&self, key: &BlockKey) -> bool {
        self.by_key.contains_key(key)
    }
}

impl Cache for AdaptiveCache {
    fn read(&mut self, key: BlockKey) {
        if self.get(&key, SUM).is_none() {
            self.insert(key, Bytes::from(vec![0u8; BLOCK_BYTES]), SUM, InsertKind::Demand);
        }
    }
    fn prefetch(&mut self, key: BlockKey) {
        if self.get_prefetch(&key, SUM).is_none() {
            self.insert(key, Bytes::from(vec![0u8; BLOCK_BYTES]), SUM, InsertKind::Prefetch);
        }
    }
    fn resident(&self, key: &BlockKey) -> bool {
        self.contains(key)
    }
}

fn arc() -> AdaptiveCache {
    let mut config = ArcConfig::new(0, CACHE_BLOCKS * BLOCK_BYTES as u64);
    config.entry_overhead_bytes = 0;
    AdaptiveCache::new(config)
}

fn lru() -> PlainLru {
    PlainLru::new(CACHE_BLOCKS * BLOCK_BYTES as u64)
}

fn hot_key(i: u64) -> BlockKey {
    BlockKey::new(i / 16, (i % 16) as u32 * BLOCK_BYTES as u32)
}

fn scan_key(i: u64) -> BlockKey {
    BlockKey::new(SCAN_SEGMENT + i / 256, (i % 256) as u32 * BLOCK_BYTES as u32)
}

fn warm_hot_set(cache: &mut impl Cache, hot_blocks: u64) {
    for _ in 0..3 {
        for i in 0..hot_blocks {
            cache.read(hot_key(i));
        }
    }
}

fn resident_fraction(cache: &impl Cache, hot_blocks: u64) -> f64 {
    let resident = (0..hot_blocks).filter(|i| cache.resident(&hot_key(*i))).count();
    resident as f64 / hot_blocks as f64
}

#[derive(Clone, Copy)]
enum Scan {
    /// Each scanned block read once on demand.
    OnceTouched,
    /// Each scanned block only prefetched, never read.
    PrefetchOnly,
    /// Read-ahead: block i+8 prefetched, then block i read on demand.
    ReadAhead,
}

/// Runs the scan; every `hot_every` scanned blocks one hot block is read (0: never).
fn scan(cache: &mut impl Cache, kind: Scan, hot_blocks: u64, hot_every: u64) {
    let mut next_hot = 0;
    for i in 0..SCAN_BLOCKS {
        match kind {
            Scan::OnceTouched => cache.read(scan_key(i)),
            Scan::PrefetchOnly => cache.prefetch(scan_key(i)),
            Scan::ReadAhead => {
                cache.prefetch(scan_key(i + 8));
                cache.read(scan_key(i));
            }
        }
        if hot_every > 0 && i % hot_every == 0 {
            cache.read(hot_key(next_hot % hot_blocks));
            next_hot += 1;
        }
    }
}

fn compare(kind: Scan, hot_blocks: u64, hot_every: u64) -> (f64, f64) {
    let mut a = arc();
    warm_hot_set(&mut a, hot_blocks);
    scan(&mut a, kind, hot_blocks, hot_every);
    a.check_invariants().expect("ARC invariants");
    let mut l = lru();
    warm_hot_set(&mut l, hot_blocks);
    scan(&mut l, kind, hot_blocks, hot_every);
    (resident_fraction(&a, hot_blocks), resident_fraction(&l, hot_blocks))
}

fn assert_resistant(kind: Scan, hot_blocks: u64, hot_every: u64) {
    let (arc_fraction, lru_fraction) = compare(kind, hot_blocks, hot_every);
    eprintln!("hot set of {hot_blocks}: ARC kept {arc_fraction:.3}, LRU kept {lru_fraction:.3}");
    assert!(arc_fraction >= 0.9, "ARC kept only {:.0}% of the hot set", arc_fraction * 100.0);
    assert!(
        lru_fraction < 0.5,
        "control LRU kept {:.0}%: workload not hostile",
        lru_fraction * 100.0
    );
}

#[test]
fn once_touched_scan_leaves_idle_hot_set_resident() {
    assert_resistant(Scan::OnceTouched, 300, 0);
}

#[test]
fn prefetch_only_scan_leaves_idle_hot_set_resident() {
    assert_resistant(Scan::PrefetchOnly, 300, 0);
}

#[test]
fn read_ahead_scan_leaves_idle_hot_set_resident() {
    assert_resistant(Scan::ReadAhead, 300, 0);
}

#[test]
fn prefetch_only_scan_cannot_evict_even_a_large_hot_set() {
    assert_resistant(Scan::PrefetchOnly, 800, 0);
}

#[test]
fn once_touched_scan_keeps_a_large_hot_set_in_use() {
    // The hot set is 60 % of the cache (more than c - p at start): ghost hits on it must
    // shift p towards the MFU side while the scan runs.
    assert_resistant(Scan::OnceTouched, 600, 4);
}

#[test]
fn read_ahead_scan_keeps_a_large_hot_set_in_use() {
    assert_resistant(Scan::ReadAhead, 600, 4);
}
