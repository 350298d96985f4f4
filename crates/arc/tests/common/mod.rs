//! Helpers shared by the L2ARC integration tests.
#![allow(dead_code)]
// Real time is the point here: the rig waits for real writer and rebuild threads.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fardisk_arc::{BlockKey, EvictionFeed, FeedItem, L2Arc, L2ArcConfig, L2Stats, ManualClock};

pub const POOL_GUID: u128 = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;
pub const BLOCK_BYTES: u32 = 16 << 10;
pub const RING_OFFSET_BYTES: u64 = 8192;
pub const HEADER_BYTES: u64 = 64;
/// Cached blocks take whole 4 KiB units; a 16 KiB log block has one unit of metadata.
pub const UNIT_BYTES: u64 = 4096;
pub const ENTRY_BYTES: u64 = 32;

pub fn key(i: u64) -> BlockKey {
    BlockKey::new(1000 + i / 8, (i % 8) as u32 * 65536)
}

/// Deterministic bytes unique to (key, version).
pub fn payload(k: BlockKey, version: u8, len: usize) -> Bytes {
    let seed = k.segment_id.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ u64::from(k.offset_bytes)
        ^ u64::from(version) << 56;
    let mut bytes = vec![0u8; len];
    fardisk_common::rng::Rng::new(seed).fill(&mut bytes);
    Bytes::from(bytes)
}

/// The length the engine would pass with a lookup (from the block pointer).
pub fn len(data: &[u8]) -> u32 {
    data.len() as u32
}

pub fn checksum(data: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(data)
}

pub fn config() -> L2ArcConfig {
    L2ArcConfig {
        log_block_bytes: BLOCK_BYTES,
        write_max_bytes_per_s: 1 << 30,
        flush_interval_ms: 1000,
        health_check_interval_ms: 1000,
    }
}

pub fn device_bytes(slots: u64) -> u64 {
    RING_OFFSET_BYTES + slots * u64::from(BLOCK_BYTES)
}

pub struct Rig {
    pub dir: tempfile::TempDir,
    pub clock: Arc<ManualClock>,
    pub l2: L2Arc,
    pub feed: EvictionFeed,
}

impl Rig {
    pub fn new(config: L2ArcConfig) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = Arc::new(ManualClock::starting_at(std::time::Duration::from_millis(1_000_000)));
        let l2 = L2Arc::new(config, POOL_GUID, clock.clone(), 42).expect("l2arc");
        Self { dir, clock, l2, feed: EvictionFeed::new(1 << 20, 1 << 30) }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A fresh L2ARC on the same clock and directory (a restart).
    pub fn restart(&mut self, config: L2ArcConfig) {
        self.l2 = L2Arc::new(config, POOL_GUID, self.clock.clone(), 43).expect("l2arc");
    }

    pub fn push(&self, k: BlockKey, data: &Bytes) {
        self.feed.push(FeedItem::new(k, data.clone()));
    }

    /// Ticks with one second of clock per round until the feed is empty, then writes out the
    /// open block.
    pub fn drain_and_flush(&self) {
        for _ in 0..10_000 {
            if self.feed.is_empty() {
                break;
            }
            self.clock.advance_ms(1000);
            self.l2.write_tick(&self.feed);
        }
        assert!(self.feed.is_empty(), "feed did not drain");
        self.l2.flush();
    }
}

/// Polls (bounded) until every device finished rebuilding.
pub fn wait_rebuilt(l2: &L2Arc) -> L2Stats {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stats = l2.stats();
        if stats.rebuild.done {
            return stats;
        }
        assert!(Instant::now() < deadline, "rebuild did not finish: {:?}", stats.rebuild);
        std::thread::sleep(Duration::from_millis(5));
    }
}

pub fn slot_offset(slot: u64) -> u64 {
    RING_OFFSET_BYTES + slot * u64::from(BLOCK_BYTES)
}

/// XORs `mask` into the byte at `offset` of the file.
pub fn flip_byte(path: &Path, offset: u64, mask: u8) {
    use std::os::unix::fs::FileExt;
    let file =
        std::fs::OpenOptions::new().read(true).write(true).open(path).expect("open device file");
    let mut b = [0u8; 1];
    file.read_exact_at(&mut b, offset).expect("read byte");
    b[0] ^= mask;
    file.write_all_at(&b, offset).expect("write byte");
}
