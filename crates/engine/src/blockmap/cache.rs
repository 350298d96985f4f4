//! Page cache of the block map, bounded by bytes. Dirty and written-but-unpublished pages are
//! pinned: they are the only copy of the current map until the txg's root is published. Clean pages
//! are evicted by CLOCK (second chance), a bounded scan.

use super::page::{LeafHint, Slot, FANOUT, HINTED_PAGE_BYTES, PAGE_BYTES};
use crate::blkptr::BlockPtr;
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PageKey {
    pub tree_id: u32,
    pub level: u8,
    pub index: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageState {
    Clean,
    /// Modified in the syncing txg, not yet encoded.
    Dirty,
    /// Encoded into the syncing txg's segment; clean once that txg's root is published.
    Written,
}

#[derive(Debug)]
pub struct CachedPage {
    pub slots: RwLock<Vec<Slot>>,
    /// A level-1 page's leaf hints, one per slot (empty: none known yet). Set by the sync as it
    /// writes each leaf; read by a read whose leaf is not cached (pool/cold_read.rs).
    hints: RwLock<Vec<LeafHint>>,
    /// Where this version of the page lives in the store (HOLE for a page never written).
    pub location: Mutex<BlockPtr>,
    state: Mutex<PageState>,
    referenced: AtomicBool,
}

impl CachedPage {
    pub fn new(slots: Vec<Slot>, location: BlockPtr) -> CachedPage {
        debug_assert_eq!(slots.len(), FANOUT);
        CachedPage::with_hints(slots, Vec::new(), location)
    }
    pub fn with_hints(slots: Vec<Slot>, hints: Vec<LeafHint>, location: BlockPtr) -> CachedPage {
        debug_assert!(hints.is_empty() || hints.len() == FANOUT);
        CachedPage {
            slots: RwLock::new(slots),
            hints: RwLock::new(hints),
            location: Mutex::new(location),
            state: Mutex::new(PageState::Clean),
            referenced: AtomicBool::new(true),
        }
    }
    pub fn slot(&self, pos: usize) -> Slot {
        self.slots.read()[pos]
    }
    /// The hint for the leaf of slot `pos` (none when not known).
    pub fn hint(&self, pos: usize) -> LeafHint {
        self.hints.read().get(pos).copied().unwrap_or(LeafHint::NONE)
    }
    /// Sets the hint for the leaf of slot `pos` (the sync, as it writes that leaf).
    pub fn set_hint(&self, pos: usize, hint: LeafHint) {
        let mut hints = self.hints.write();
        if hints.is_empty() {
            if hint.is_none() {
                return;
            }
            hints.resize(FANOUT, LeafHint::NONE);
        }
        hints[pos] = hint;
    }
    /// Every hint, one per slot, or empty when none is known (for encoding the page).
    pub fn hints(&self) -> Vec<LeafHint> {
        self.hints.read().clone()
    }
    pub fn state(&self) -> PageState {
        *self.state.lock()
    }
}

#[derive(Debug, Default)]
struct Inner {
    pages: HashMap<PageKey, Arc<CachedPage>>,
    /// What `pages` count against `bytes_max` ([`page_bytes`]).
    bytes: usize,
    clock: VecDeque<PageKey>,
    dirty: BTreeSet<PageKey>,
    written: Vec<PageKey>,
}

#[derive(Debug)]
pub struct PageCache {
    inner: Mutex<Inner>,
    bytes_max: usize,
    /// Bumped whenever pages become clean (a txg published). A reader that walked the tree from an
    /// older root must not insert what it loaded: that page may already be superseded.
    generation: std::sync::atomic::AtomicU64,
}

/// What a cached page counts against the cache's bound: a level-1 page as one with leaf hints
/// (they may come with the next write of any of its leaves), every other page its slots.
pub fn page_bytes(key: &PageKey) -> usize {
    if key.level == 1 {
        HINTED_PAGE_BYTES
    } else {
        PAGE_BYTES
    }
}

impl Inner {
    fn add(&mut self, key: PageKey, page: Arc<CachedPage>) -> Option<Arc<CachedPage>> {
        let old = self.pages.insert(key, page);
        if old.is_none() {
            self.bytes += page_bytes(&key);
        }
        old
    }

    fn remove(&mut self, key: &PageKey) {
        if self.pages.remove(key).is_some() {
            self.bytes -= page_bytes(key);
        }
    }

    fn retain_pages(&mut self, keep: impl Fn(&PageKey) -> bool) {
        let mut freed = 0;
        self.pages.retain(|k, _| {
            let kept = keep(k);
            if !kept {
                freed += page_bytes(k);
            }
            kept
        });
        self.bytes -= freed;
    }
}

impl PageCache {
    pub fn new(bytes_max: usize) -> PageCache {
        PageCache {
            inner: Mutex::default(),
            bytes_max: bytes_max.max(64 * PAGE_BYTES),
            generation: Default::default(),
        }
    }

    pub fn get(&self, key: &PageKey) -> Option<Arc<CachedPage>> {
        let inner = self.inner.lock();
        let p = inner.pages.get(key)?.clone();
        p.referenced.store(true, Ordering::Relaxed);
        Some(p)
    }

    /// Inserts `page` unless a page is already cached under `key` (which then wins: it may be dirty
    /// and newer than what a concurrent reader loaded), and returns the cached one.
    /// `generation`: the value of [`PageCache::generation`] when the caller read the tree root it
    /// descended from; None for the sync, which always works on the current tree.
    pub fn insert_if_absent(
        &self,
        key: PageKey,
        page: CachedPage,
        generation: Option<u64>,
    ) -> Arc<CachedPage> {
        let mut inner = self.inner.lock();
        if let Some(p) = inner.pages.get(&key) {
            return p.clone();
        }
        if generation.is_some_and(|g| g != self.generation()) {
            return Arc::new(page);
        }
        let p = Arc::new(page);
        inner.add(key, p.clone());
        inner.clock.push_back(key);
        self.evict_locked(&mut inner);
        p
    }

    /// Marks a cached page dirty under the cache lock, so it cannot be evicted between the caller's
    /// lookup and its modification.
    pub fn mark_dirty(&self, key: PageKey, page: &Arc<CachedPage>) {
        let mut inner = self.inner.lock();
        // A concurrent reader's insertion may have evicted this clean page since the caller found
        // it; the caller's copy is current (only the sync mutates pages), so it goes back in.
        let present = inner.pages.get(&key).is_some_and(|p| Arc::ptr_eq(p, page));
        if !present && inner.add(key, page.clone()).is_none() {
            inner.clock.push_back(key);
        }
        let mut st = page.state.lock();
        if *st != PageState::Dirty {
            *st = PageState::Dirty;
            inner.dirty.insert(key);
        }
    }

    /// Dirty pages of one tree at one level, in index order (the sync encodes level by level).
    pub fn take_dirty(&self, tree_id: u32, level: u8) -> Vec<PageKey> {
        let mut inner = self.inner.lock();
        let lo = PageKey { tree_id, level, index: 0 };
        let hi = PageKey { tree_id, level, index: u64::MAX };
        let keys: Vec<PageKey> = inner.dirty.range(lo..=hi).copied().collect();
        for k in &keys {
            inner.dirty.remove(k);
            if let Some(p) = inner.pages.get(k) {
                *p.state.lock() = PageState::Written;
            }
            inner.written.push(*k);
        }
        keys
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    pub fn has_dirty(&self) -> bool {
        !self.inner.lock().dirty.is_empty()
    }

    /// After the root that references the written pages is published, they may be evicted.
    pub fn finish_txg(&self) {
        let mut inner = self.inner.lock();
        let written = std::mem::take(&mut inner.written);
        self.generation.fetch_add(1, Ordering::SeqCst);
        for k in written {
            if let Some(p) = inner.pages.get(&k) {
                let mut st = p.state.lock();
                if *st == PageState::Written {
                    *st = PageState::Clean;
                }
            }
        }
        self.evict_locked(&mut inner);
    }

    /// Drops every page of a tree (a destroyed volume).
    pub fn forget_tree(&self, tree_id: u32) {
        let mut inner = self.inner.lock();
        inner.retain_pages(|k| k.tree_id != tree_id);
        inner.dirty.retain(|k| k.tree_id != tree_id);
        inner.clock.retain(|k| k.tree_id != tree_id);
    }

    /// Drops every cached page of the subtrees rooted at `roots` (pages (level, index) of tree
    /// `tree_id`), cut off their tree by the sync (cut.rs). The generation moves first, under the
    /// same lock: a reader that read a parent pointer before the cut cannot cache the old subtree
    /// after it, where the sync would later find and reuse it (a trimmed block coming back).
    pub fn forget_subtrees(&self, tree_id: u32, roots: &[(u8, u64)]) {
        if roots.is_empty() {
            return;
        }
        let roots: std::collections::HashSet<(u8, u64)> = roots.iter().copied().collect();
        let under = |k: &PageKey| super::cut::under_any(k, tree_id, &roots);
        let mut inner = self.inner.lock();
        self.generation.fetch_add(1, Ordering::SeqCst);
        inner.retain_pages(|k| !under(k));
        inner.dirty.retain(|k| !under(k));
        inner.clock.retain(|k| !under(k));
    }

    pub fn bytes_used(&self) -> usize {
        self.inner.lock().bytes
    }

    fn evict_locked(&self, inner: &mut Inner) {
        // Bounded: each page gets at most two looks per call.
        let mut budget = inner.clock.len() * 2;
        while inner.bytes > self.bytes_max && budget > 0 {
            budget -= 1;
            let Some(key) = inner.clock.pop_front() else { break };
            let Some(page) = inner.pages.get(&key).cloned() else { continue };
            let pinned = *page.state.lock() != PageState::Clean;
            if pinned || page.referenced.swap(false, Ordering::Relaxed) {
                inner.clock.push_back(key);
            } else {
                inner.remove(&key);
            }
        }
    }
}
