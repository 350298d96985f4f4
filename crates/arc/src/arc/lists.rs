//! The five ARC lists in one arena: every known key (resident or ghost) is one node, linked into
//! exactly one list, found through one hash map. All operations are O(1).

use std::collections::HashMap;

use bytes::Bytes;

use crate::key::{BlockKey, LocationHash};

/// Which list a node is on. Heads are most recently used, tails least recently used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ListId {
    /// MRU entries that were prefetched and not yet read on demand: evicted first.
    MruPrefetch = 0,
    /// MRU entries read on demand once.
    Mru = 1,
    /// MFU entries read on demand at least twice.
    Mfu = 2,
    /// Keys recently evicted from the MRU side (no data).
    MruGhost = 3,
    /// Keys recently evicted from the MFU side (no data).
    MfuGhost = 4,
}

pub(crate) const LIST_COUNT: usize = 5;
pub(crate) const ALL_LISTS: [ListId; LIST_COUNT] =
    [ListId::MruPrefetch, ListId::Mru, ListId::Mfu, ListId::MruGhost, ListId::MfuGhost];

impl ListId {
    pub(crate) fn is_ghost(self) -> bool {
        matches!(self, ListId::MruGhost | ListId::MfuGhost)
    }
}

const NIL: u32 = u32::MAX;

#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) key: BlockKey,
    /// `Some` for resident lists, `None` for ghosts.
    pub(crate) value: Option<Bytes>,
    /// The checksum `value` was verified against when it was inserted (0 for ghosts): a read
    /// asks with its pointer's checksum and gets the bytes only when the two are equal.
    pub(crate) checksum: u64,
    /// Bytes charged against the cache (value length plus per-entry overhead).
    pub(crate) charge_bytes: u64,
    /// The entry was brought in by prefetch and never read on demand (kept on ghosts too).
    pub(crate) prefetch: bool,
    pub(crate) list: ListId,
    /// Logical time of the last insert or demand access; orders the two MRU lists.
    pub(crate) tick: u64,
    prev: u32,
    next: u32,
}

#[derive(Clone, Copy, Debug, Default)]
struct ListHead {
    head: u32,
    tail: u32,
    len: u64,
    bytes: u64,
}

impl ListHead {
    const EMPTY: ListHead = ListHead { head: NIL, tail: NIL, len: 0, bytes: 0 };
}

/// Arena of nodes plus the list heads and the key index.
#[derive(Debug)]
pub(crate) struct Lists {
    nodes: Vec<Option<Node>>,
    free: Vec<u32>,
    heads: [ListHead; LIST_COUNT],
    index: HashMap<BlockKey, u32, LocationHash>,
}

impl Lists {
    pub(crate) fn new() -> Self {
        Self {
            nodes: Vec::new(),
            free: Vec::new(),
            heads: [ListHead::EMPTY; LIST_COUNT],
            index: HashMap::default(),
        }
    }

    pub(crate) fn find(&self, key: &BlockKey) -> Option<u32> {
        self.index.get(key).copied()
    }

    pub(crate) fn node(&self, id: u32) -> &Node {
        self.nodes[id as usize].as_ref().expect("live node id")
    }

    pub(crate) fn node_mut(&mut self, id: u32) -> &mut Node {
        self.nodes[id as usize].as_mut().expect("live node id")
    }

    pub(crate) fn bytes(&self, list: ListId) -> u64 {
        self.heads[list as usize].bytes
    }

    pub(crate) fn len(&self, list: ListId) -> u64 {
        self.heads[list as usize].len
    }

    pub(crate) fn tail(&self, list: ListId) -> Option<u32> {
        let tail = self.heads[list as usize].tail;
        (tail != NIL).then_some(tail)
    }

    /// The node just before `id` (towards the head) on its list.
    pub(crate) fn prev_of(&self, id: u32) -> Option<u32> {
        let prev = self.node(id).prev;
        (prev != NIL).then_some(prev)
    }

    /// Allocates a node for a key that is not yet known and links it at the head of `list`.
    pub(crate) fn insert_front(
        &mut self,
        key: BlockKey,
        value: Option<Bytes>,
        checksum: u64,
        charge_bytes: u64,
        prefetch: bool,
        list: ListId,
    ) -> u32 {
        debug_assert!(!self.index.contains_key(&key), "key already present");
        debug_assert_eq!(value.is_none(), list.is_ghost());
        let node = Node {
            key,
            value,
            checksum,
            charge_bytes,
            prefetch,
            list,
            tick: 0,
            prev: NIL,
            next: NIL,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.nodes[id as usize] = Some(node);
                id
            }
            None => {
                let id = u32::try_from(self.nodes.len()).expect("fewer than 4 billion entries");
                self.nodes.push(Some(node));
                id
            }
        };
        self.index.insert(key, id);
        self.link_front(id, list);
        id
    }

    /// Moves a node to the head of `list` (which may be its current list).
    pub(crate) fn move_front(&mut self, id: u32, list: ListId) {
        self.unlink(id);
        self.link_front(id, list);
    }

    /// Unlinks and frees a node, returning it.
    pub(crate) fn remove(&mut self, id: u32) -> Node {
        self.unlink(id);
        let node = self.nodes[id as usize].take().expect("live node id");
        self.index.remove(&node.key);
        self.free.push(id);
        node
    }

    /// Changes a node's charge, keeping its list's byte total right.
    pub(crate) fn set_charge(&mut self, id: u32, charge_bytes: u64) {
        let list = self.node(id).list;
        let old = self.node(id).charge_bytes;
        let head = &mut self.heads[list as usize];
        head.bytes = head.bytes - old + charge_bytes;
        self.node_mut(id).charge_bytes = charge_bytes;
    }

    /// Node ids of `list` from head (most recent) to tail, at most `max_count` of them.
    pub(crate) fn iter_from_head(&self, list: ListId, max_count: usize) -> Vec<u32> {
        let mut out = Vec::new();
        let mut cursor = self.heads[list as usize].head;
        while cursor != NIL && out.len() < max_count {
            out.push(cursor);
            cursor = self.node(cursor).next;
        }
        out
    }

    fn link_front(&mut self, id: u32, list: ListId) {
        let old_head = self.heads[list as usize].head;
        let charge = {
            let node = self.node_mut(id);
            node.list = list;
            node.prev = NIL;
            node.next = old_head;
            node.charge_bytes
        };
        if old_head != NIL {
            self.node_mut(old_head).prev = id;
        }
        let head = &mut self.heads[list as usize];
        head.head = id;
        if head.tail == NIL {
            head.tail = id;
        }
        head.len += 1;
        head.bytes += charge;
    }

    fn unlink(&mut self, id: u32) {
        let (list, prev, next, charge) = {
            let n = self.node(id);
            (n.list, n.prev, n.next, n.charge_bytes)
        };
        if prev != NIL {
            self.node_mut(prev).next = next;
        }
        if next != NIL {
            self.node_mut(next).prev = prev;
        }
        let head = &mut self.heads[list as usize];
        if head.head == id {
            head.head = next;
        }
        if head.tail == id {
            head.tail = prev;
        }
        head.len -= 1;
        head.bytes -= charge;
        let node = self.node_mut(id);
        node.prev = NIL;
        node.next = NIL;
    }

    /// Walks every list and the index and checks that links, counts and byte totals agree.
    /// Bounded by the number of nodes; used by tests and debug assertions.
    pub(crate) fn check_consistency(&self) -> Result<(), String> {
        let mut seen = 0u64;
        for list in ALL_LISTS {
            let head = self.heads[list as usize];
            let (mut len, mut bytes, mut prev, mut cursor) = (0u64, 0u64, NIL, head.head);
            while cursor != NIL {
                let node = self.node(cursor);
                if node.list != list || node.prev != prev {
                    return Err(format!("bad links at node {cursor} on {list:?}"));
                }
                if self.index.get(&node.key) != Some(&cursor) {
                    return Err(format!("index disagrees for {:?}", node.key));
                }
                if node.value.is_none() != list.is_ghost() {
                    return Err(format!("value presence wrong on {list:?}"));
                }
                len += 1;
                bytes += node.charge_bytes;
                prev = cursor;
                cursor = node.next;
                if len > self.nodes.len() as u64 {
                    return Err(format!("cycle on {list:?}"));
                }
            }
            if prev != head.tail || len != head.len || bytes != head.bytes {
                return Err(format!("head of {list:?} disagrees with its nodes"));
            }
            seen += len;
        }
        if seen != self.index.len() as u64 {
            return Err(format!("{seen} linked nodes but {} indexed", self.index.len()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> BlockKey {
        BlockKey::new(i, 0)
    }

    #[test]
    fn insert_move_remove_keep_totals() {
        let mut lists = Lists::new();
        let a =
            lists.insert_front(key(1), Some(Bytes::from_static(b"a")), 0, 10, false, ListId::Mru);
        let b =
            lists.insert_front(key(2), Some(Bytes::from_static(b"b")), 0, 20, false, ListId::Mru);
        assert_eq!(lists.bytes(ListId::Mru), 30);
        assert_eq!(lists.tail(ListId::Mru), Some(a));
        lists.move_front(a, ListId::Mfu);
        assert_eq!(lists.bytes(ListId::Mru), 20);
        assert_eq!(lists.bytes(ListId::Mfu), 10);
        assert_eq!(lists.tail(ListId::Mru), Some(b));
        lists.set_charge(b, 5);
        assert_eq!(lists.bytes(ListId::Mru), 5);
        let removed = lists.remove(b);
        assert_eq!(removed.key, key(2));
        assert_eq!(lists.len(ListId::Mru), 0);
        assert_eq!(lists.tail(ListId::Mru), None);
        assert_eq!(lists.find(&key(2)), None);
        lists.check_consistency().expect("consistent");
    }

    #[test]
    fn freed_slots_are_reused() {
        let mut lists = Lists::new();
        let a = lists.insert_front(key(1), None, 0, 1, false, ListId::MruGhost);
        lists.remove(a);
        let b = lists.insert_front(key(2), None, 0, 1, false, ListId::MfuGhost);
        assert_eq!(a, b);
        assert_eq!(lists.iter_from_head(ListId::MfuGhost, 10), vec![b]);
        lists.check_consistency().expect("consistent");
    }
}
