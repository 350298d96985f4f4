//! The bounded hand-off from ARC eviction to the L2ARC writer. When the writer falls behind
//! (it is rate capped on purpose), the oldest entries are dropped: the L2ARC is a cache and
//! must never hold memory or slow the ARC down. An evicted block the L2ARC holds already (it
//! came from there) is not queued at all: under random reads from the L2ARC most evictions are
//! such blocks, and queued they pushed out the blocks the device did not have yet, which the
//! next read of them then fetched from the store (bench/notes/cache-reads.md, 2026-12-08).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use crate::key::BlockKey;

/// One evicted block on its way to the L2ARC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedItem {
    pub key: BlockKey,
    pub data: Bytes,
    /// `xxh3_64(data)`, as verified when the block entered the ARC: the L2ARC writer records it
    /// without hashing the block again (every L2ARC read checks the bytes against the caller's
    /// checksum, so a wrong value here could only make a miss, never wrong bytes).
    pub checksum: u64,
}

impl FeedItem {
    /// An item whose checksum is computed here (for blocks that did not come from the ARC).
    pub fn new(key: BlockKey, data: Bytes) -> FeedItem {
        let checksum = xxhash_rust::xxh3::xxh3_64(&data);
        FeedItem { key, data, checksum }
    }
}

#[derive(Debug, Default)]
struct FeedQueue {
    items: VecDeque<FeedItem>,
    bytes: u64,
    pushed: u64,
    dropped: u64,
}

/// Whether the feed's reader holds a block already (the L2ARC's index, by key alone): set by
/// the L2ARC writer while it runs ([`EvictionFeed::set_held`]).
pub type HeldFilter = Arc<dyn Fn(&BlockKey) -> bool + Send + Sync>;

/// A bounded FIFO (entries and bytes); pushing past a bound drops the oldest entries.
pub struct EvictionFeed {
    queue: Mutex<FeedQueue>,
    entries_max: usize,
    bytes_max: u64,
    held: RwLock<Option<HeldFilter>>,
    skipped_held: AtomicU64,
}

impl std::fmt::Debug for EvictionFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvictionFeed")
            .field("entries_max", &self.entries_max)
            .field("bytes_max", &self.bytes_max)
            .field("filtered", &self.held.read().is_some())
            .finish_non_exhaustive()
    }
}

impl EvictionFeed {
    pub fn new(entries_max: usize, bytes_max: u64) -> Self {
        Self {
            queue: Mutex::new(FeedQueue::default()),
            entries_max: entries_max.max(1),
            bytes_max,
            held: RwLock::new(None),
            skipped_held: AtomicU64::new(0),
        }
    }

    /// From now on, blocks `held` says the reader has already are not queued (None: every
    /// block is). Only a filter: the writer still skips what it holds when it takes an item.
    pub fn set_held(&self, held: Option<HeldFilter>) {
        *self.held.write() = held;
    }

    /// Evicted blocks not queued because the reader held them already.
    pub fn skipped_held(&self) -> u64 {
        self.skipped_held.load(Ordering::Relaxed)
    }

    /// Queues an item, dropping the oldest ones to stay within the bounds. An item larger than
    /// the byte bound alone is dropped at once.
    pub fn push(&self, item: FeedItem) {
        self.push_many(vec![item]);
    }

    /// `push` of each item in order, under one lock. The items dropped (those beyond the bounds)
    /// are freed after the lock is released.
    pub fn push_many(&self, mut items: Vec<FeedItem>) {
        // Outside the queue's lock: the filter takes the L2ARC index's.
        let held = self.held.read().clone();
        if let Some(held) = held {
            let before = items.len();
            items.retain(|item| !held(&item.key));
            let skipped = (before - items.len()) as u64;
            self.skipped_held.fetch_add(skipped, Ordering::Relaxed);
        }
        if items.is_empty() {
            return;
        }
        let mut dropped = Vec::new();
        let mut q = self.queue.lock();
        for item in items {
            let item_bytes = item.data.len() as u64;
            q.pushed += 1;
            if item_bytes > self.bytes_max {
                q.dropped += 1;
                dropped.push(item);
                continue;
            }
            while q.items.len() >= self.entries_max || q.bytes + item_bytes > self.bytes_max {
                let Some(old) = q.items.pop_front() else {
                    break;
                };
                q.bytes -= old.data.len() as u64;
                q.dropped += 1;
                dropped.push(old);
            }
            q.bytes += item_bytes;
            q.items.push_back(item);
        }
        drop(q);
        drop(dropped);
    }

    pub fn pop(&self) -> Option<FeedItem> {
        let mut q = self.queue.lock();
        let item = q.items.pop_front()?;
        q.bytes -= item.data.len() as u64;
        Some(item)
    }

    pub fn len(&self) -> usize {
        self.queue.lock().items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.lock().items.is_empty()
    }

    pub fn bytes(&self) -> u64 {
        self.queue.lock().bytes
    }

    pub fn dropped(&self) -> u64 {
        self.queue.lock().dropped
    }

    pub fn pushed(&self) -> u64 {
        self.queue.lock().pushed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(i: u64, len: usize) -> FeedItem {
        FeedItem::new(BlockKey::new(i, 0), Bytes::from(vec![i as u8; len]))
    }

    #[test]
    fn drops_oldest_beyond_entry_bound() {
        let feed = EvictionFeed::new(3, 1 << 20);
        for i in 0..5 {
            feed.push(item(i, 10));
        }
        assert_eq!(feed.len(), 3);
        assert_eq!(feed.dropped(), 2);
        assert_eq!(feed.pop().map(|it| it.key.segment_id), Some(2));
    }

    #[test]
    fn drops_oldest_beyond_byte_bound_and_rejects_giants() {
        let feed = EvictionFeed::new(100, 100);
        feed.push(item(1, 60));
        feed.push(item(2, 60));
        assert_eq!(feed.len(), 1);
        assert_eq!(feed.bytes(), 60);
        feed.push(item(3, 101));
        assert_eq!(feed.len(), 1);
        assert_eq!(feed.dropped(), 2);
        assert_eq!(feed.pop().map(|it| it.key.segment_id), Some(2));
        assert!(feed.is_empty());
        assert_eq!(feed.bytes(), 0);
    }
}
