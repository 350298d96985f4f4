//! The in-memory index of one cache device: for every cached block, which log block (slot)
//! holds it and where inside it, in 29 bits. Rebuilt from the log blocks' entry tables after a
//! restart, never written anywhere. Design and alternatives: docs/design/0005-l2arc-index.md.
//!
//! A bucketized cuckoo hash table (two candidate buckets of four entries per key) over a
//! [`PackedArray`]. An entry is `tag | slot | place`:
//! * `tag`: a few bits of the key's hash (never 0; 0 marks an empty entry). With the bucket the
//!   key hashes to, it tells keys apart well enough that a lookup rarely reads a wrong block;
//!   when it does, the block's checksum, which every read verifies against the caller's, fails
//!   and the next candidate is tried.
//! * `slot`: the log block.
//! * `place`: which of the key's two candidate buckets in that log block, and the unit within it
//!   (`geometry.rs`).
//!
//! The table is sized from the device when the device is opened, never grown: it holds every
//! block the device could hold at a load factor of at most 94 %, and costs `29 / 8 / 0.94`
//! bytes per data unit of the device (0.96 GiB per TiB). Counters per slot keep the entry count
//! and cached bytes exact when a whole slot is dropped.

use super::packed::PackedArray;
use crate::key::BlockKey;
use fardisk_common::rng::Rng;

/// Bits of one entry for devices of up to 2^21 slots; larger devices widen the slot field.
const ENTRY_BITS: u32 = 29;
/// Fewest tag bits; below this a lookup would often read a wrong block first.
const TAG_BITS_MIN: u32 = 4;
pub(crate) const PLACE_BITS: u32 = super::geometry::PLACE_BITS;
/// Entries per bucket, and the table's largest planned load (as a fraction 47/50 = 0.94).
const BUCKET_ENTRIES: usize = 4;
const LOAD_NUM: u64 = 47;
const LOAD_DEN: u64 = 50;
/// Displacements one insert may make before it gives up (and undoes them).
const KICKS_MAX: usize = 256;
/// Most slots a device may have: the slot field and a tag of [`TAG_BITS_MIN`] fit in 32 bits.
pub(crate) const SLOTS_MAX: u64 = 1 << (32 - TAG_BITS_MIN - PLACE_BITS);

/// One index entry's address: the slot and the place inside its log block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Addr {
    pub(crate) slot: u32,
    pub(crate) place: u8,
}

/// The entries a lookup found for a key (at most two buckets' worth), in probe order.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Candidates {
    addrs: [Option<Addr>; 2 * BUCKET_ENTRIES],
}

impl Candidates {
    fn push(&mut self, addr: Addr) {
        if let Some(free) = self.addrs.iter_mut().find(|a| a.is_none()) {
            *free = Some(addr);
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = Addr> + '_ {
        self.addrs.iter().map_while(|a| *a)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.addrs[0].is_none()
    }
}

/// The hash of a key the index uses: `xxh3_64(segment_id u64 LE ++ offset_bytes u32 LE)`.
fn key_hash(key: &BlockKey) -> u64 {
    let mut bytes = [0u8; 12];
    bytes[..8].copy_from_slice(&key.segment_id.to_le_bytes());
    bytes[8..].copy_from_slice(&key.offset_bytes.to_le_bytes());
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

#[derive(Debug)]
pub(crate) struct DeviceIndex {
    table: PackedArray,
    buckets: u64,
    slot_bits: u32,
    tag_bits: u32,
    slot_entries: Vec<u32>,
    slot_bytes: Vec<u64>,
    entries: u64,
    size_bytes: u64,
    /// Blocks written to the device that the full table could not index.
    full_drops: u64,
    /// Picks the entry to displace (seeded; deterministic, so the simulation replays).
    kick_rng: Rng,
}

fn bits_for(max_value: u64) -> u32 {
    (64 - max_value.leading_zeros()).max(1)
}

impl DeviceIndex {
    /// An empty index for a device of `slot_count` log blocks of `data_units` data units each.
    pub(crate) fn new(slot_count: u32, data_units: u32) -> Self {
        debug_assert!(u64::from(slot_count) <= SLOTS_MAX);
        let slot_bits = bits_for(u64::from(slot_count.max(1)) - 1);
        let tag_bits = ENTRY_BITS.saturating_sub(slot_bits + PLACE_BITS).max(TAG_BITS_MIN);
        let max_entries = u64::from(slot_count) * u64::from(data_units);
        let capacity = (max_entries * LOAD_DEN).div_ceil(LOAD_NUM).max(1);
        let buckets = capacity.div_ceil(BUCKET_ENTRIES as u64);
        let len = usize::try_from(buckets * BUCKET_ENTRIES as u64).expect("index fits in memory");
        Self {
            table: PackedArray::zeroed(len, tag_bits + slot_bits + PLACE_BITS),
            buckets,
            slot_bits,
            tag_bits,
            slot_entries: vec![0; slot_count as usize],
            slot_bytes: vec![0; slot_count as usize],
            entries: 0,
            size_bytes: 0,
            full_drops: 0,
            kick_rng: Rng::new(u64::from(slot_count) ^ 0x5eed),
        }
    }

    pub(crate) fn len(&self) -> u64 {
        self.entries
    }

    pub(crate) fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    pub(crate) fn full_drops(&self) -> u64 {
        self.full_drops
    }

    /// Bytes of memory the index holds (table and per-slot counters).
    pub(crate) fn memory_bytes(&self) -> u64 {
        self.table.memory_bytes() + self.slot_entries.len() as u64 * (4 + 8)
    }

    pub(crate) fn entry_bits(&self) -> u32 {
        self.table.width_bits()
    }

    pub(crate) fn slot_entries(&self, slot: u32) -> u32 {
        self.slot_entries[slot as usize]
    }

    /// Home bucket and tag of a key.
    fn home(&self, key: &BlockKey) -> (u64, u32) {
        let h = key_hash(key);
        let bucket = ((h & 0xffff_ffff) * self.buckets) >> 32;
        let tag = ((h >> 32) % ((1u64 << self.tag_bits) - 1)) as u32 + 1;
        (bucket, tag)
    }

    /// The other bucket of an entry in `bucket` with `tag`: `(c - bucket) mod buckets`, with
    /// `c` from the tag alone, so it can be computed for an entry whose key is not at hand.
    fn alternate(&self, bucket: u64, tag: u32) -> u64 {
        let c = (u64::from(tag).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % self.buckets;
        (c + self.buckets - bucket) % self.buckets
    }

    fn encode(&self, tag: u32, addr: Addr) -> u32 {
        (tag << (self.slot_bits + PLACE_BITS)) | (addr.slot << PLACE_BITS) | u32::from(addr.place)
    }

    fn tag_of(&self, value: u32) -> u32 {
        value >> (self.slot_bits + PLACE_BITS)
    }

    fn addr_of(&self, value: u32) -> Addr {
        let slot_mask = (1u32 << self.slot_bits) - 1;
        Addr { slot: (value >> PLACE_BITS) & slot_mask, place: (value & 0xf) as u8 }
    }

    fn positions(bucket: u64) -> std::ops::Range<usize> {
        let first = bucket as usize * BUCKET_ENTRIES;
        first..first + BUCKET_ENTRIES
    }

    fn both_buckets(&self, key: &BlockKey) -> ([u64; 2], u32) {
        let (b1, tag) = self.home(key);
        let b2 = self.alternate(b1, tag);
        ([b1, b2], tag)
    }

    /// Every entry whose tag matches `key` (a superset of the key's own entries).
    pub(crate) fn lookup(&self, key: &BlockKey) -> Candidates {
        let ([b1, b2], tag) = self.both_buckets(key);
        let mut found = Candidates::default();
        let second = if b2 == b1 { None } else { Some(b2) };
        for bucket in std::iter::once(b1).chain(second) {
            for i in Self::positions(bucket) {
                let value = self.table.get(i);
                if value != 0 && self.tag_of(value) == tag {
                    found.push(self.addr_of(value));
                }
            }
        }
        found
    }

    /// Indexes `key` at `addr` with `len_bytes` of data. False when the table is full (the
    /// block stays on the device unindexed and is counted in `full_drops`).
    pub(crate) fn insert(&mut self, key: &BlockKey, addr: Addr, len_bytes: u32) -> bool {
        let ([b1, b2], tag) = self.both_buckets(key);
        let value = self.encode(tag, addr);
        if !self.place_value(value, [b1, b2]) {
            self.full_drops += 1;
            return false;
        }
        self.entries += 1;
        self.size_bytes += u64::from(len_bytes);
        self.slot_entries[addr.slot as usize] += 1;
        self.slot_bytes[addr.slot as usize] += u64::from(len_bytes);
        true
    }

    fn free_position(&self, bucket: u64) -> Option<usize> {
        Self::positions(bucket).find(|&i| self.table.get(i) == 0)
    }

    /// Puts `value` into one of `buckets`, displacing entries to their other bucket (a random
    /// walk of at most [`KICKS_MAX`] steps). On failure every displacement is undone.
    fn place_value(&mut self, value: u32, buckets: [u64; 2]) -> bool {
        for bucket in buckets {
            if let Some(i) = self.free_position(bucket) {
                self.table.set(i, value);
                return true;
            }
        }
        let mut undo: Vec<(usize, u32)> = Vec::new();
        let mut moving = value;
        let mut bucket = buckets[(self.kick_rng.next_u64() & 1) as usize];
        for _ in 0..KICKS_MAX {
            let pick = self.kick_rng.below(BUCKET_ENTRIES as u64) as usize;
            let i = Self::positions(bucket).start + pick;
            let victim = self.table.get(i);
            undo.push((i, victim));
            self.table.set(i, moving);
            moving = victim;
            bucket = self.alternate(bucket, self.tag_of(moving));
            if let Some(free) = self.free_position(bucket) {
                self.table.set(free, moving);
                return true;
            }
        }
        for (i, old) in undo.into_iter().rev() {
            self.table.set(i, old);
        }
        false
    }

    /// Removes `key`'s entry at exactly `addr` (its `len_bytes` from the slot's counters).
    pub(crate) fn remove(&mut self, key: &BlockKey, addr: Addr, len_bytes: u32) -> bool {
        let ([b1, b2], tag) = self.both_buckets(key);
        let value = self.encode(tag, addr);
        let found =
            Self::positions(b1).chain(Self::positions(b2)).find(|&i| self.table.get(i) == value);
        let Some(i) = found else { return false };
        self.table.set(i, 0);
        self.entries -= 1;
        self.size_bytes = self.size_bytes.saturating_sub(u64::from(len_bytes));
        let slot = addr.slot as usize;
        self.slot_entries[slot] -= 1;
        self.slot_bytes[slot] = self.slot_bytes[slot].saturating_sub(u64::from(len_bytes));
        true
    }

    /// Drops every entry of `slot`, given the keys and places its log block lists (read from
    /// the device before the slot is reused). Entries the list misses (the table on the device
    /// was damaged after they were indexed) are found by scanning the whole table.
    pub(crate) fn drop_slot(&mut self, slot: u32, listed: &[(BlockKey, u8)]) -> u64 {
        let expected = u64::from(self.slot_entries[slot as usize]);
        if expected == 0 {
            return 0;
        }
        let mut removed = 0;
        for (key, place) in listed {
            let ([b1, b2], tag) = self.both_buckets(key);
            let value = self.encode(tag, Addr { slot, place: *place });
            let found = Self::positions(b1)
                .chain(Self::positions(b2))
                .find(|&i| self.table.get(i) == value);
            if let Some(i) = found {
                self.table.set(i, 0);
                removed += 1;
            }
        }
        if removed < expected {
            removed += self.scan_out(|addr| addr.slot == slot);
        }
        self.forget_slot(slot);
        removed
    }

    fn forget_slot(&mut self, slot: u32) {
        let slot = slot as usize;
        self.entries -= u64::from(self.slot_entries[slot]);
        self.size_bytes = self.size_bytes.saturating_sub(self.slot_bytes[slot]);
        self.slot_entries[slot] = 0;
        self.slot_bytes[slot] = 0;
    }

    /// Clears every entry whose address matches; returns how many. Walks the whole table.
    fn scan_out(&mut self, matches: impl Fn(Addr) -> bool) -> u64 {
        let mut removed = 0;
        for i in 0..self.table.len() {
            let value = self.table.get(i);
            if value != 0 && matches(self.addr_of(value)) {
                self.table.set(i, 0);
                removed += 1;
            }
        }
        removed
    }

    /// Forgets everything (the device faulted or left).
    pub(crate) fn clear(&mut self) -> u64 {
        let dropped = self.entries;
        self.table.clear();
        self.slot_entries.fill(0);
        self.slot_bytes.fill(0);
        self.entries = 0;
        self.size_bytes = 0;
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> BlockKey {
        BlockKey::new(i / 4, (i % 4) as u32 * 4096)
    }

    fn addr(i: u64, slots: u32) -> Addr {
        Addr { slot: (i % u64::from(slots)) as u32, place: (i % 16) as u8 }
    }

    #[test]
    fn every_inserted_key_is_found_at_its_address_up_to_full_load() {
        let (slots, units) = (64u32, 254u32);
        let mut idx = DeviceIndex::new(slots, units);
        let n = u64::from(slots) * u64::from(units);
        for i in 0..n {
            assert!(idx.insert(&key(i), addr(i, slots), 4096), "insert {i} of {n}");
        }
        assert_eq!(idx.len(), n);
        assert_eq!(idx.full_drops(), 0);
        let mut false_candidates = 0;
        for i in 0..n {
            let found: Vec<Addr> = idx.lookup(&key(i)).iter().collect();
            assert!(found.contains(&addr(i, slots)), "key {i} lost");
            false_candidates += found.len() - 1;
        }
        // 16-bit tags at this size: hardly any lookup sees a second candidate.
        assert!(false_candidates < (n / 1000) as usize, "{false_candidates} false candidates");
        assert_eq!(idx.entry_bits(), 29);
    }

    #[test]
    fn false_candidates_stay_rare_with_nine_tag_bits_at_full_load() {
        // 65,535 slots (a 1 TiB device of 16 MiB log blocks) leave 9 tag bits; 4 data units
        // per slot keep the table small. Full load: every unit of the device holds a block.
        let (slots, units) = (65_535u32, 4u32);
        let mut idx = DeviceIndex::new(slots, units);
        assert_eq!(idx.entry_bits(), 29);
        let n = u64::from(slots) * u64::from(units);
        for i in 0..n {
            assert!(idx.insert(&key(i), addr(i, slots), 4096), "insert {i} of {n}");
        }
        let probes = 100_000u64;
        let false_candidates: usize =
            (n..n + probes).map(|i| idx.lookup(&key(i)).iter().count()).sum();
        let rate = false_candidates as f64 / probes as f64;
        eprintln!("false candidates per lookup of an absent key: {rate:.4}");
        assert!(rate < 0.02, "{rate}");
    }

    #[test]
    fn remove_and_drop_slot_keep_the_counters_exact() {
        let mut idx = DeviceIndex::new(8, 3);
        for i in 0..24u64 {
            assert!(idx.insert(&key(i), Addr { slot: (i / 3) as u32, place: (i % 3) as u8 }, 100));
        }
        assert_eq!((idx.len(), idx.size_bytes()), (24, 2400));
        assert!(idx.remove(&key(4), Addr { slot: 1, place: 1 }, 100));
        assert!(!idx.remove(&key(4), Addr { slot: 1, place: 1 }, 100), "already gone");
        assert!(!idx.remove(&key(5), Addr { slot: 2, place: 2 }, 100), "not at that address");
        assert_eq!(idx.slot_entries(1), 2);
        // The listing of slot 2 misses one key: the scan finds it.
        let listed = [(key(6), 0u8), (key(7), 1u8)];
        assert_eq!(idx.drop_slot(2, &listed), 3);
        assert!(idx.lookup(&key(8)).is_empty());
        assert_eq!((idx.len(), idx.size_bytes()), (20, 2000));
        assert_eq!(idx.clear(), 20);
        assert_eq!((idx.len(), idx.size_bytes()), (0, 0));
        assert!(idx.lookup(&key(0)).is_empty());
    }

    #[test]
    fn a_full_table_refuses_and_undoes_its_displacements() {
        let mut idx = DeviceIndex::new(2, 1); // room for 2 planned entries, 4 in one bucket pair
        let mut stored = Vec::new();
        for i in 0..64u64 {
            let a = Addr { slot: (i % 2) as u32, place: (i % 16) as u8 };
            if idx.insert(&key(i), a, 1) {
                stored.push((i, a));
            }
        }
        assert!(idx.full_drops() > 0);
        assert_eq!(idx.len(), stored.len() as u64);
        for (i, a) in stored {
            assert!(idx.lookup(&key(i)).iter().any(|x| x == a), "key {i} lost by a failed insert");
        }
    }

    #[test]
    fn memory_is_under_a_gib_per_tib_of_device() {
        // 1 TiB of 16 MiB log blocks (the size `format` picks for such a device).
        let geometry = super::super::geometry::Geometry::new(16 << 20);
        let slots = ((1u64 << 40) - 8192) / (16 << 20);
        let idx = DeviceIndex::new(slots as u32, geometry.data_units);
        let gib = idx.memory_bytes() as f64 / f64::from(1u32 << 30);
        assert!(gib < 0.97, "{gib} GiB for 1 TiB");
        assert_eq!(idx.entry_bits(), 29);
    }
}
