//! Transaction groups: the open txg that takes writes, the syncing txg being committed, the
//! newest published one, and the non-data work queued for the next commit; and the commit
//! protocol (commit.rs) that turns the syncing txg into segments, block-map and space-table
//! pages, and a published root.
//!
//! The txg layer reads blocks through fetch.rs and the maps through the page cache; it never
//! calls the syncer, reclaim or anything above them (the syncer calls it, and hands what a
//! commit freed to reclaim).

mod commit;
mod destroy_walk;
mod frees;
mod maps;
mod pack;
mod retry;
pub(super) mod snapshot_space;
mod space;
pub(super) mod unique_bytes;

pub(super) use commit::{build_and_publish, publish_export, write_due_head_hint};

use crate::blkptr::BlockPtr;
use crate::dirty::DirtySet;
use crate::root::VolumeEntry;
use bytes::Bytes;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::futures::Notified;
use tokio::sync::{watch, Notify};

/// The pool's transaction groups.
///
/// Lock order, outermost first: `sync_lock` (held across a whole commit, awaiting inside) ->
/// the pool's `meta` (pool/mod.rs) -> `pending` -> `state`. `state` guards in-memory work only
/// and is never held across an await; with it held, only the intent log's locks (intent/) and
/// `config` may still be taken.
#[derive(Debug)]
pub(crate) struct Txgs {
    /// One commit at a time, held for the whole commit; also taken by what must not interleave
    /// with one (installing vdev changes, the space audit, a snapshot's unique-bytes walk).
    pub sync_lock: tokio::sync::Mutex<()>,
    /// Work for the next commit that is not user data.
    pub pending: Mutex<PendingMeta>,
    /// The open txg (dirty data) and the syncing one.
    pub state: Mutex<TxgState>,
    /// Newest published txg.
    published: watch::Sender<u64>,
    /// Wakes the syncer early (dirty threshold, sync request, queued work).
    kick: Notify,
    /// Wakes writers stalled on the dirty limit when a commit frees dirty memory.
    dirty_freed: Notify,
    /// The newest root's free queue is not empty: txgs are due until it is (frees.rs), also on
    /// a pool without writes.
    frees_queued: AtomicBool,
    /// A published root whose `head` hint is not written yet (0: none). The hint goes out beside
    /// the next commit's last upload, or when the pool goes idle, or at export: never between a
    /// root and the acknowledgement of the sync requests it made durable.
    head_hint_due: AtomicU64,
}

/// The open and the syncing txg.
#[derive(Debug)]
pub(crate) struct TxgState {
    /// Writes land here.
    pub open: DirtySet,
    pub open_txg: u64,
    /// The txg being committed, readable until its root is published.
    pub syncing: Option<Arc<DirtySet>>,
}

/// Work queued for the next sync that is not user data.
#[derive(Debug, Default)]
pub(crate) struct PendingMeta {
    /// Volumes destroyed since the last sync: their trees are freed by the sync.
    pub destroyed: Vec<VolumeEntry>,
    /// Compaction (and scrub's repairs): blocks to move out of their segment.
    pub relocations: Vec<Relocation>,
    /// Compaction: map pages to rewrite.
    pub page_moves: Vec<PageMove>,
    /// Deleted segments whose space slots the next sync clears.
    pub deleted_segments: Vec<u64>,
    /// Snapshot creates, destroys, rollbacks and promotes, in request order.
    pub snapshot_ops: Vec<snapshot_space::SnapshotOp>,
    /// Set when only metadata changed (properties, volume create/resize) so a root is due.
    pub meta_changed: bool,
    /// Reclaim asks for a txg with no work of its own: on an idle pool, the roots that let the
    /// segments freed by the last txgs with work leave the retention window (reclaim/delete.rs).
    pub catch_up: bool,
}

/// A block to copy, as it is, into the next txg's segments: block `block` of volume `tree_id`,
/// if the map still points at `old` then.
#[derive(Debug, Clone)]
pub(crate) struct Relocation {
    pub tree_id: u32,
    pub block: u64,
    pub old: BlockPtr,
    /// The block's stored (compressed) bytes, verified against `old`'s checksum.
    pub physical: Bytes,
}

/// A map page to write again in the next txg: page (`level`, `index`) of tree `tree_id` (a
/// volume or the space table), if the tree still has it at `old` then.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PageMove {
    pub tree_id: u32,
    pub level: u8,
    pub index: u64,
    pub old: BlockPtr,
}

impl PendingMeta {
    /// Whether queued metadata work needs a txg of its own. Clearing the slots of deleted
    /// segments does not: it rides along with the next txg that has real work, or an idle pool
    /// would churn forever (each sync rewrites space pages, which frees and later deletes the
    /// previous meta segment).
    pub fn is_empty(&self) -> bool {
        !self.meta_changed
            && self.destroyed.is_empty()
            && self.relocations.is_empty()
            && self.page_moves.is_empty()
            && self.snapshot_ops.is_empty()
    }
}

/// A segment that txg `freed_txg` left without live bytes: reclaim deletes it once no retained
/// root can reference it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FreedSegment {
    pub segment_id: u64,
    pub freed_txg: u64,
}

/// What a published txg hands to reclaim.
#[derive(Debug)]
pub(crate) struct Published {
    /// The root's time (wall clock, ms).
    pub time_ms: u64,
    pub freed: Vec<FreedSegment>,
}

/// The txg a commit takes: the open txg's dirty data and the queued work, frozen.
pub(crate) struct Frozen {
    pub txg: u64,
    pub set: Arc<DirtySet>,
    pub pending: PendingMeta,
    /// The txg carries writes or queued work, not only a reclaim catch-up.
    pub work: bool,
}

impl Txgs {
    /// Txgs after root `published_txg`: the open txg is the next one; `frees_queued`: that root
    /// has a free queue to work down.
    pub fn new(published_txg: u64, frees_queued: bool) -> Txgs {
        Txgs {
            sync_lock: tokio::sync::Mutex::new(()),
            pending: Mutex::default(),
            state: Mutex::new(TxgState {
                open: DirtySet::default(),
                open_txg: published_txg + 1,
                syncing: None,
            }),
            published: watch::channel(published_txg).0,
            kick: Notify::new(),
            dirty_freed: Notify::new(),
            frees_queued: AtomicBool::new(frees_queued),
            head_hint_due: AtomicU64::new(0),
        }
    }

    /// Root `txg` is published and its hint not yet written.
    pub fn head_hint_due(&self, txg: u64) {
        self.head_hint_due.fetch_max(txg, Ordering::SeqCst);
    }

    /// The root whose hint is due, if any (taken: the caller writes it).
    pub fn take_head_hint(&self) -> Option<u64> {
        Some(self.head_hint_due.swap(0, Ordering::SeqCst)).filter(|t| *t != 0)
    }

    /// Nothing to commit or being committed but queued frees: export and `sync` need no txg for
    /// them, the queue waits in the root for the next ones. A txg being committed is waited for
    /// (by `sync_once` taking the sync lock), as before there was a queue.
    pub fn only_frees_left(&self) -> bool {
        let pending = self.pending.lock();
        let t = self.state.lock();
        t.open.is_empty() && t.syncing.is_none() && pending.is_empty() && !pending.catch_up
    }

    /// Whether the newest root has frees queued.
    pub fn frees_queued(&self) -> bool {
        self.frees_queued.load(Ordering::SeqCst)
    }

    /// The txg that writes issued now land in.
    pub fn open_txg(&self) -> u64 {
        self.state.lock().open_txg
    }

    /// The newest published txg.
    pub fn published_txg(&self) -> u64 {
        *self.published.borrow()
    }

    /// Dirty data of the open and the syncing txg.
    pub fn dirty_bytes(&self) -> u64 {
        let t = self.state.lock();
        t.open.bytes + t.syncing.as_ref().map(|s| s.bytes).unwrap_or(0)
    }

    /// The txg that holds everything written or queued before the call: the open txg if it has
    /// anything (or, with `with_pending`, if work is queued), else the syncing one; None when
    /// that is already published.
    pub fn txg_holding_all(&self, with_pending: bool) -> Option<u64> {
        let pending = with_pending.then(|| self.pending.lock());
        let t = self.state.lock();
        if !t.open.is_empty() || pending.as_ref().is_some_and(|p| !p.is_empty()) {
            Some(t.open_txg)
        } else if t.syncing.is_some() {
            Some(t.open_txg - 1)
        } else {
            None
        }
    }

    /// Something changed that only a root records (a property, a volume, a vdev): a txg is due.
    pub fn queue_meta_change(&self) {
        self.pending.lock().meta_changed = true;
    }

    /// Reclaim needs one more root on an idle pool: the next sync publishes a txg even with
    /// nothing else to commit.
    pub fn queue_catch_up(&self) {
        self.pending.lock().catch_up = true;
    }

    /// Wakes the syncer now.
    pub fn kick(&self) {
        self.kick.notify_one();
    }

    /// Resolves when something kicks the syncer.
    pub fn kicked(&self) -> Notified<'_> {
        self.kick.notified()
    }

    /// Resolves when a commit ends and frees dirty memory.
    pub fn dirty_freed(&self) -> Notified<'_> {
        self.dirty_freed.notified()
    }

    /// Freezes the open txg for a commit (call with `sync_lock` held): it becomes the syncing
    /// txg and a new open txg takes writes. None when there is nothing to commit.
    pub fn freeze(&self) -> Option<Frozen> {
        let mut pending = self.pending.lock();
        let mut t = self.state.lock();
        let work = !t.open.is_empty() || !pending.is_empty() || self.frees_queued();
        if !work && !pending.catch_up {
            return None;
        }
        let set = Arc::new(std::mem::take(&mut t.open));
        t.syncing = Some(set.clone());
        let txg = t.open_txg;
        t.open_txg += 1;
        Some(Frozen { txg, set, pending: std::mem::take(&mut *pending), work })
    }

    /// The commit of the syncing txg ended (published or failed): its dirty memory is freed.
    pub fn end_sync(&self) {
        self.state.lock().syncing = None;
        self.dirty_freed.notify_waiters();
    }

    /// Txg `txg` is published, with `frees_queued` frees left in its root.
    pub fn publish_with_frees(&self, txg: u64, frees_queued: bool) {
        self.frees_queued.store(frees_queued, Ordering::SeqCst);
        self.publish(txg);
    }

    /// Txg `txg` is published.
    pub fn publish(&self, txg: u64) {
        let _ = self.published.send_replace(txg);
    }
}
