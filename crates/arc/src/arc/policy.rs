//! The adaptive replacement policy (Megiddo & Modha, with the byte weighting and prefetch
//! handling of OpenZFS `arc.c`), single-threaded; [`super::AdaptiveCache`] puts it behind a lock.
//!
//! Lists: MRU (split into prefetched-unread and demand-read-once), MFU, and the two ghost lists
//! that remember recently evicted keys. `c` is the size target, `p` the part of it the MRU side
//! may keep before eviction prefers it. A demand insert of a key found on the MRU ghost list means
//! the MRU side was too small: `p` grows. One found on the MFU ghost list: `p` shrinks.
//!
//! Scan resistance follows from three rules: data read once stays on the MRU side; while the
//! MRU side holds more than `p`, eviction takes from it and never from the MFU; prefetched data
//! that reaches the old end of the MRU side unread is evicted before anything else, whatever `p`.

use bytes::Bytes;

use super::config::ArcConfig;
use super::feed::FeedItem;
use super::lists::{ListId, Lists};
use super::stats::{ArcStats, Counters};
use crate::key::BlockKey;

/// The adaptation step is the hit's charge times the ghost lists' size ratio, capped like
/// OpenZFS so that one hit cannot swing `p` across the whole cache.
const ADAPT_MULTIPLIER_MAX: u64 = 10;

/// How a block enters the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertKind {
    /// Read because a caller asked for it.
    Demand,
    /// Read ahead of need; enters MRU flagged prefetch.
    Prefetch,
}

pub(crate) struct ArcState {
    lists: Lists,
    c_bytes: u64,
    p_bytes: u64,
    c_min_bytes: u64,
    c_max_bytes: u64,
    entry_overhead_bytes: u64,
    ghost_entries_max: u64,
    feed_prefetched: bool,
    tick: u64,
    counters: Counters,
}

impl ArcState {
    pub(crate) fn new(config: &ArcConfig) -> Self {
        let c_max_bytes = config.arc_max_bytes;
        Self {
            lists: Lists::new(),
            c_bytes: c_max_bytes,
            p_bytes: c_max_bytes / 2,
            c_min_bytes: config.arc_min_bytes.min(c_max_bytes),
            c_max_bytes,
            entry_overhead_bytes: config.entry_overhead_bytes,
            ghost_entries_max: config.ghost_entries_max,
            feed_prefetched: config.feed_prefetched,
            tick: 0,
            counters: Counters::default(),
        }
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    fn resident_bytes(&self) -> u64 {
        self.mru_side_bytes() + self.lists.bytes(ListId::Mfu)
    }

    fn mru_side_bytes(&self) -> u64 {
        self.lists.bytes(ListId::MruPrefetch) + self.lists.bytes(ListId::Mru)
    }

    fn resident_id(&self, key: &BlockKey) -> Option<u32> {
        self.lists.find(key).filter(|id| !self.lists.node(*id).list.is_ghost())
    }

    /// The resident entry of `key` if it holds the bytes `checksum` names. One that holds other
    /// bytes (a stale copy: the caller's pointer names different contents at this key) is
    /// dropped, so it can neither be returned nor fed to the L2ARC.
    fn resident_with(&mut self, key: &BlockKey, checksum: u64) -> Option<u32> {
        let id = self.resident_id(key)?;
        if self.lists.node(id).checksum == checksum {
            return Some(id);
        }
        self.counters.stale_dropped += 1;
        self.remove(key);
        None
    }

    /// A demand read: counts, and promotes as ARC does (MRU -> MFU on the second read; a
    /// prefetched block's first demand read only clears its prefetch flag).
    pub(crate) fn get_demand(&mut self, key: &BlockKey, checksum: u64) -> Option<Bytes> {
        let Some(id) = self.resident_with(key, checksum) else {
            self.counters.demand_misses += 1;
            return None;
        };
        self.counters.demand_hits += 1;
        let tick = self.next_tick();
        let target = match self.lists.node(id).list {
            ListId::MruPrefetch => {
                self.counters.demand_hits_on_prefetched += 1;
                self.lists.node_mut(id).prefetch = false;
                ListId::Mru
            }
            _ => ListId::Mfu,
        };
        self.lists.move_front(id, target);
        let node = self.lists.node_mut(id);
        node.tick = tick;
        node.value.clone()
    }

    /// A prefetch probe: counts but never changes recency or promotes, so read-ahead cannot
    /// make data look hot.
    pub(crate) fn get_prefetch(&mut self, key: &BlockKey, checksum: u64) -> Option<Bytes> {
        match self.resident_with(key, checksum) {
            Some(id) => {
                self.counters.prefetch_hits += 1;
                self.lists.node(id).value.clone()
            }
            None => {
                self.counters.prefetch_misses += 1;
                None
            }
        }
    }

    pub(crate) fn contains(&self, key: &BlockKey) -> bool {
        self.resident_id(key).is_some()
    }

    pub(crate) fn insert(
        &mut self,
        key: BlockKey,
        value: Bytes,
        checksum: u64,
        kind: InsertKind,
        evicted: &mut Vec<FeedItem>,
    ) {
        let charge_bytes = value.len() as u64 + self.entry_overhead_bytes;
        self.counters.inserts += 1;
        if charge_bytes > self.c_bytes {
            // It cannot fit; forget any older copy so a later get cannot return it.
            self.counters.inserts_rejected += 1;
            self.remove(&key);
            return;
        }
        let existing = self.lists.find(&key);
        if let Some(id) = existing.filter(|id| !self.lists.node(*id).list.is_ghost()) {
            self.replace_value(id, value, checksum, charge_bytes, evicted);
            return;
        }
        let target = match existing {
            Some(ghost_id) => self.take_ghost_hit(ghost_id, charge_bytes, kind),
            None if kind == InsertKind::Prefetch => ListId::MruPrefetch,
            None => ListId::Mru,
        };
        self.grow_target(charge_bytes);
        let prefetch = kind == InsertKind::Prefetch;
        let id =
            self.lists.insert_front(key, Some(value), checksum, charge_bytes, prefetch, target);
        self.lists.node_mut(id).tick = self.next_tick();
        self.evict_to_target(Some(id), evicted);
        self.trim_ghosts();
    }

    /// The same key inserted again (two readers raced on a miss): keep the position, take the
    /// newest value so that what is returned is what was last inserted.
    fn replace_value(
        &mut self,
        id: u32,
        value: Bytes,
        checksum: u64,
        charge_bytes: u64,
        out: &mut Vec<FeedItem>,
    ) {
        self.lists.set_charge(id, charge_bytes);
        let node = self.lists.node_mut(id);
        node.value = Some(value);
        node.checksum = checksum;
        self.evict_to_target(Some(id), out);
        self.trim_ghosts();
    }

    /// Removes a ghost that a new insert found, adapts `p` for demand inserts, and returns the
    /// list the block re-enters.
    fn take_ghost_hit(&mut self, ghost_id: u32, charge_bytes: u64, kind: InsertKind) -> ListId {
        let (ghost_list, was_prefetch) = {
            let node = self.lists.node(ghost_id);
            (node.list, node.prefetch)
        };
        if kind == InsertKind::Prefetch {
            // Read-ahead is speculation: it neither adapts `p` nor counts as a ghost hit.
            self.lists.remove(ghost_id);
            return ListId::MruPrefetch;
        }
        self.adapt(ghost_list, charge_bytes);
        self.lists.remove(ghost_id);
        match ghost_list {
            ListId::MruGhost if was_prefetch => ListId::Mru,
            _ => ListId::Mfu,
        }
    }

    fn adapt(&mut self, ghost_list: ListId, charge_bytes: u64) {
        let mru_ghost = self.lists.bytes(ListId::MruGhost).max(1);
        let mfu_ghost = self.lists.bytes(ListId::MfuGhost).max(1);
        if ghost_list == ListId::MruGhost {
            self.counters.mru_ghost_hits += 1;
            let mult = (mfu_ghost / mru_ghost).clamp(1, ADAPT_MULTIPLIER_MAX);
            let delta = (charge_bytes * mult).min(self.c_bytes - self.p_bytes);
            self.p_bytes += delta;
        } else {
            self.counters.mfu_ghost_hits += 1;
            let mult = (mru_ghost / mfu_ghost).clamp(1, ADAPT_MULTIPLIER_MAX);
            let delta = (charge_bytes * mult).min(self.p_bytes);
            self.p_bytes -= delta;
        }
    }

    /// After a shrink, `c` grows back by what is inserted while the cache is full, as OpenZFS
    /// does while there is no memory pressure.
    fn grow_target(&mut self, charge_bytes: u64) {
        if self.resident_bytes() + charge_bytes > self.c_bytes && self.c_bytes < self.c_max_bytes {
            self.c_bytes = (self.c_bytes + charge_bytes).min(self.c_max_bytes);
        }
    }

    /// Evicts until the resident charge fits `c`. `protect` (the entry just inserted) is never
    /// the victim; it fits alone because inserts larger than `c` are refused.
    fn evict_to_target(&mut self, protect: Option<u32>, out: &mut Vec<FeedItem>) {
        // Each round evicts one entry, so the number of resident entries bounds the loop.
        let mut rounds_left = self.lists.len(ListId::MruPrefetch)
            + self.lists.len(ListId::Mru)
            + self.lists.len(ListId::Mfu);
        while self.resident_bytes() > self.c_bytes && rounds_left > 0 {
            rounds_left -= 1;
            let Some(victim) = self.choose_victim(protect) else {
                break;
            };
            self.evict(victim, out);
        }
    }

    fn choose_victim(&self, protect: Option<u32>) -> Option<u32> {
        // The oldest entry of a list other than `protect` (which may itself be the tail).
        let tail = |list: ListId| {
            let tail = self.lists.tail(list)?;
            if Some(tail) == protect {
                self.lists.prev_of(tail)
            } else {
                Some(tail)
            }
        };
        let stale_prefetch = tail(ListId::MruPrefetch).filter(|pf| match tail(ListId::Mru) {
            Some(mru) => self.lists.node(*pf).tick < self.lists.node(mru).tick,
            None => true,
        });
        if stale_prefetch.is_some() {
            return stale_prefetch;
        }
        let mru_first = self.mru_side_bytes() > self.p_bytes;
        let order = if mru_first {
            [ListId::Mru, ListId::MruPrefetch, ListId::Mfu]
        } else {
            [ListId::Mfu, ListId::Mru, ListId::MruPrefetch]
        };
        order.into_iter().find_map(tail)
    }

    /// Moves a resident entry to its ghost list, handing its data to the L2ARC feed.
    fn evict(&mut self, id: u32, out: &mut Vec<FeedItem>) {
        let ghost_list = match self.lists.node(id).list {
            ListId::Mfu => ListId::MfuGhost,
            _ => ListId::MruGhost,
        };
        let node = self.lists.node_mut(id);
        let value = node.value.take().expect("resident node has a value");
        let (key, checksum) = (node.key, node.checksum);
        let prefetch = node.prefetch;
        self.counters.evictions += 1;
        self.counters.evicted_bytes += self.lists.node(id).charge_bytes;
        self.lists.move_front(id, ghost_list);
        if !prefetch || self.feed_prefetched {
            out.push(FeedItem { key, data: value, checksum });
        }
    }

    /// Keeps the ghost lists within the classic ARC bounds (MRU side plus its ghosts within
    /// `c`, everything within `2c`) and within `ghost_entries_max`.
    fn trim_ghosts(&mut self) {
        while self.mru_side_bytes() + self.lists.bytes(ListId::MruGhost) > self.c_bytes {
            let Some(id) = self.lists.tail(ListId::MruGhost) else {
                break;
            };
            self.lists.remove(id);
        }
        let ghosts = |s: &Self| s.lists.bytes(ListId::MruGhost) + s.lists.bytes(ListId::MfuGhost);
        while self.resident_bytes() + ghosts(self) > 2 * self.c_bytes {
            let Some(id) = self.lists.tail(ListId::MfuGhost) else {
                break;
            };
            self.lists.remove(id);
        }
        while self.ghost_entries() > self.ghost_entries_max {
            let longer = if self.lists.len(ListId::MruGhost) >= self.lists.len(ListId::MfuGhost) {
                ListId::MruGhost
            } else {
                ListId::MfuGhost
            };
            let Some(id) = self.lists.tail(longer) else {
                break;
            };
            self.lists.remove(id);
        }
    }

    fn ghost_entries(&self) -> u64 {
        self.lists.len(ListId::MruGhost) + self.lists.len(ListId::MfuGhost)
    }

    /// A long sequential stream has read `key`: if nothing but that read has used the block (it
    /// is on an MRU list: brought in by the stream's readahead or its miss, read once), it
    /// leaves the cache now, handed to the L2ARC feed as an eviction would (it was read, so it
    /// is fed even when prefetched blocks are not). No ghost is kept: a stream read again must
    /// not look like reuse and promote a whole scan to MFU. A block read before the stream
    /// came (MFU) stays. Returns whether it was let go.
    pub(crate) fn let_go_read_once(&mut self, key: &BlockKey, out: &mut Vec<FeedItem>) -> bool {
        let Some(id) = self.resident_id(key) else {
            return false;
        };
        if !matches!(self.lists.node(id).list, ListId::Mru | ListId::MruPrefetch) {
            return false;
        }
        let node = self.lists.remove(id);
        let value = node.value.expect("resident node has a value");
        self.counters.stream_dropped += 1;
        out.push(FeedItem { key: node.key, data: value, checksum: node.checksum });
        true
    }

    /// Forgets a key entirely (resident or ghost). Not fed to the L2ARC: the caller removes
    /// blocks that are no longer referenced.
    pub(crate) fn remove(&mut self, key: &BlockKey) -> bool {
        match self.lists.find(key) {
            Some(id) => !self.lists.remove(id).list.is_ghost(),
            None => false,
        }
    }

    pub(crate) fn set_max_bytes(&mut self, c_max_bytes: u64, out: &mut Vec<FeedItem>) {
        self.c_max_bytes = c_max_bytes;
        self.c_min_bytes = self.c_min_bytes.min(c_max_bytes);
        self.set_target(self.c_bytes.min(c_max_bytes), out);
    }

    pub(crate) fn set_min_bytes(&mut self, c_min_bytes: u64, out: &mut Vec<FeedItem>) {
        self.c_min_bytes = c_min_bytes.min(self.c_max_bytes);
        self.set_target(self.c_bytes.max(self.c_min_bytes), out);
    }

    /// Memory pressure: lowers `c` by `bytes` (not below the minimum) and evicts.
    pub(crate) fn shrink_target(&mut self, bytes: u64, out: &mut Vec<FeedItem>) {
        let c_bytes = self.c_bytes.saturating_sub(bytes).max(self.c_min_bytes);
        self.set_target(c_bytes, out);
    }

    fn set_target(&mut self, c_bytes: u64, out: &mut Vec<FeedItem>) {
        self.c_bytes = c_bytes.clamp(self.c_min_bytes, self.c_max_bytes);
        self.p_bytes = self.p_bytes.min(self.c_bytes);
        self.evict_to_target(None, out);
        self.trim_ghosts();
    }

    /// Keys worth prefetching after a restart: MFU first, then blocks read once on demand,
    /// each most recent first.
    pub(crate) fn hot_set(&self, max_entries: usize) -> Vec<BlockKey> {
        let mut ids = self.lists.iter_from_head(ListId::Mfu, max_entries);
        let rest = max_entries - ids.len();
        ids.extend(self.lists.iter_from_head(ListId::Mru, rest));
        ids.into_iter().map(|id| self.lists.node(id).key).collect()
    }

    pub(crate) fn stats(&self) -> ArcStats {
        let c = &self.counters;
        ArcStats {
            hits: c.demand_hits + c.prefetch_hits,
            misses: c.demand_misses + c.prefetch_misses,
            demand_hits: c.demand_hits,
            demand_misses: c.demand_misses,
            prefetch_hits: c.prefetch_hits,
            prefetch_misses: c.prefetch_misses,
            demand_hits_on_prefetched: c.demand_hits_on_prefetched,
            mru_ghost_hits: c.mru_ghost_hits,
            mfu_ghost_hits: c.mfu_ghost_hits,
            mru_bytes: self.mru_side_bytes(),
            mru_prefetch_bytes: self.lists.bytes(ListId::MruPrefetch),
            mfu_bytes: self.lists.bytes(ListId::Mfu),
            mru_ghost_bytes: self.lists.bytes(ListId::MruGhost),
            mfu_ghost_bytes: self.lists.bytes(ListId::MfuGhost),
            p_bytes: self.p_bytes,
            c_bytes: self.c_bytes,
            c_min_bytes: self.c_min_bytes,
            c_max_bytes: self.c_max_bytes,
            size_bytes: self.resident_bytes(),
            entries: self.lists.len(ListId::MruPrefetch)
                + self.lists.len(ListId::Mru)
                + self.lists.len(ListId::Mfu),
            ghost_entries: self.ghost_entries(),
            inserts: c.inserts,
            inserts_rejected: c.inserts_rejected,
            evictions: c.evictions,
            evicted_bytes: c.evicted_bytes,
            stale_dropped: c.stale_dropped,
            stream_dropped: c.stream_dropped,
            feed_dropped: 0,
            feed_skipped_held: 0,
            feed_bytes: 0,
        }
    }

    /// Checks every structural invariant; tests call it after each operation.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        self.lists.check_consistency()?;
        let (c, p) = (self.c_bytes, self.p_bytes);
        if !(self.c_min_bytes <= c && c <= self.c_max_bytes && p <= c) {
            return Err(format!(
                "bounds broken: min {} c {c} max {} p {p}",
                self.c_min_bytes, self.c_max_bytes
            ));
        }
        if self.resident_bytes() > c {
            return Err(format!("resident {} exceeds c {c}", self.resident_bytes()));
        }
        if self.mru_side_bytes() + self.lists.bytes(ListId::MruGhost) > c {
            return Err("MRU side plus its ghosts exceed c".to_string());
        }
        let ghosts = self.lists.bytes(ListId::MruGhost) + self.lists.bytes(ListId::MfuGhost);
        if self.resident_bytes() + ghosts > 2 * c {
            return Err("lists exceed 2c".to_string());
        }
        if self.ghost_entries() > self.ghost_entries_max {
            return Err("too many ghost entries".to_string());
        }
        Ok(())
    }
}
