//! Scrub: reads every block the pool references back from the store, bypassing every cache,
//! and checks it against its pointer's checksum, as `zpool scrub` does.
//!
//! What it walks: each volume's block map (its pages and every non-hole block pointer) and the
//! space table's pages, in chunks of `CHUNK_SLOTS` map slots so memory stays bounded whatever
//! the volume size. Blocks of one chunk are sorted by segment and read with coalesced ranged GETs.
//!
//! Only blocks born in a published txg are examined: pages in memory may already point at a
//! segment the syncing txg is still uploading. A block whose store copy is bad is reported only if
//! the map still points at that copy when the scrub looks again (it may have been overwritten or
//! moved by compaction meanwhile, and its old segment deleted: no damage).
//!
//! Repair: a data block whose store copy is bad or missing is rewritten from a good copy in the
//! ARC or L2ARC (verified against the same checksum) by compaction's relocation path, so the next
//! txg stores it anew and the map points at the new copy. Map pages have no second copy to repair
//! from; their errors are reported.
//!
//! Progress lives in memory: pause keeps the task and its position; a restart of the daemon
//! forgets a paused scrub (the last result stays in the pool's history).

use super::txg::Relocation;
use super::{Inner, Pool};
use crate::blkptr::BlockPtr;
use crate::blockmap::{TreeRef, TreeWalk};
use crate::clock::timeout;
use crate::codec::checksum64;
use crate::error::{Error, Result};
use crate::objstore::StoreErrorKind;
use crate::segment::segment_key;
use crate::space::SPACE_TREE_ID;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Map slots walked at a time (4 KiB blocks: 256 MiB of volume).
const CHUNK_SLOTS: u64 = 1 << 16;
/// Largest ranged GET, and the largest gap of unwanted bytes read to save a request.
const REQUEST_BYTES_MAX: u64 = 8 << 20;
const GAP_BYTES_MAX: u64 = 256 << 10;
/// Errors listed one by one (all are counted).
const ERRORS_LISTED_MAX: usize = 64;
/// Default of the `scrub_rate_max` property: bytes per second read from the store.
pub const SCRUB_RATE_MAX_DEFAULT: u64 = crate::props::SCRUB_RATE_MAX.default_number();

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ScrubState {
    #[default]
    None,
    Scanning,
    Paused,
    Finished,
    Canceled,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ScrubError {
    /// Volume name, or "(space table)".
    pub dataset: String,
    /// What was bad: "block at 1048576" (volume byte offset) or "map page level 1 index 3".
    pub object: String,
    pub segment: String,
    /// "checksum", "missing" or "read": the store's copy failed its checksum, its segment is
    /// gone, or the store would not return it.
    pub kind: String,
    pub repaired: bool,
}

/// What `status` shows about the current or last scrub (fields stable; add, never rename).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ScrubProgress {
    pub state: ScrubState,
    pub started_ms: u64,
    pub finished_ms: u64,
    /// Estimate: the live bytes of the pool when the scrub started.
    pub to_examine_bytes: u64,
    pub examined_bytes: u64,
    pub examined_blocks: u64,
    pub skipped_newer_blocks: u64,
    pub checksum_errors: u64,
    pub missing_blocks: u64,
    pub read_errors: u64,
    pub repaired_blocks: u64,
    pub repaired_bytes: u64,
    pub errors: Vec<ScrubError>,
    pub rate_bytes_per_s_max: u64,
    /// Why a scrub failed (store unreachable beyond retries, ...).
    pub failure: Option<String>,
}

impl ScrubProgress {
    pub fn errors_total(&self) -> u64 {
        self.checksum_errors + self.missing_blocks + self.read_errors
    }
}

#[derive(Debug)]
pub(crate) struct ScrubControl {
    progress: Mutex<ScrubProgress>,
    /// true = paused; the scrub task waits between requests while it is set.
    paused: watch::Sender<bool>,
    cancel: watch::Sender<bool>,
}

impl Default for ScrubControl {
    fn default() -> Self {
        ScrubControl {
            progress: Mutex::new(ScrubProgress::default()),
            paused: watch::channel(false).0,
            cancel: watch::channel(false).0,
        }
    }
}

/// One block (or map page) to check.
#[derive(Debug, Clone, Copy)]
struct Item {
    ptr: BlockPtr,
    tree: TreeRef,
    /// Some(slot) for a data block; None for a map page (level, index).
    block: Option<u64>,
    page: (u8, u64),
}

impl Pool {
    /// Starts a scrub in the background, or resumes a paused one.
    pub fn scrub_start(&self) -> Result<()> {
        // Scrub repairs by rewriting blocks; a read-only import cannot.
        self.check_writable()?;
        let ctl = &self.inner.scrub;
        // Read before `progress` is locked: it is a leaf (lock order: pool/mod.rs).
        let live = self.inner.meta.read().root.totals.live_bytes;
        let rate = rate_max(&self.inner);
        {
            let mut p = ctl.progress.lock();
            match p.state {
                ScrubState::Scanning => {
                    return Err(Error::BadInput(
                        "a scrub is already in progress (fardisk scrub POOL --stop cancels it)"
                            .into(),
                    ))
                }
                ScrubState::Paused => {
                    p.state = ScrubState::Scanning;
                    ctl.paused.send_replace(false);
                    return Ok(());
                }
                _ => {}
            }
            *p = ScrubProgress {
                state: ScrubState::Scanning,
                started_ms: self.inner.env.clock.wall_ms(),
                to_examine_bytes: live,
                rate_bytes_per_s_max: rate,
                ..Default::default()
            };
        }
        ctl.paused.send_replace(false);
        ctl.cancel.send_replace(false);
        let inner = self.inner.clone();
        self.spawn(async move {
            let outcome = run(&inner).await;
            let (state, finished_ms, event) = finish(&inner, outcome);
            // The end is reported once its history event is written: whoever waits for it
            // (`scrub --wait`, tests, the simulation) finds none of the scrub's store requests
            // still to come, racing what it does next.
            super::history::record(&inner, &event).await;
            let mut p = inner.scrub.progress.lock();
            (p.state, p.finished_ms) = (state, finished_ms);
        });
        Ok(())
    }

    pub fn scrub_pause(&self) -> Result<()> {
        let mut p = self.inner.scrub.progress.lock();
        if p.state != ScrubState::Scanning {
            return Err(Error::BadInput(
                "no scrub is running (start one with: fardisk scrub POOL)".into(),
            ));
        }
        p.state = ScrubState::Paused;
        self.inner.scrub.paused.send_replace(true);
        Ok(())
    }

    pub fn scrub_stop(&self) -> Result<()> {
        let p = self.inner.scrub.progress.lock();
        if !matches!(p.state, ScrubState::Scanning | ScrubState::Paused) {
            return Err(Error::BadInput("no scrub is in progress".into()));
        }
        self.inner.scrub.cancel.send_replace(true);
        self.inner.scrub.paused.send_replace(false);
        Ok(())
    }

    pub fn scrub_progress(&self) -> ScrubProgress {
        self.inner.scrub.progress.lock().clone()
    }
}

/// Records how a scrub ended, all but its state and end time (set once the history has them);
/// returns those and the line for the pool's history.
fn finish(inner: &Inner, outcome: Result<bool>) -> (ScrubState, u64, String) {
    let mut p = inner.scrub.progress.lock();
    let finished_ms = inner.env.clock.wall_ms();
    let state = match outcome {
        Ok(true) => ScrubState::Finished,
        Ok(false) => ScrubState::Canceled,
        Err(e) => {
            p.failure = Some(e.to_string());
            ScrubState::Failed
        }
    };
    tracing::info!(
        ?state,
        examined_bytes = p.examined_bytes,
        errors = p.errors_total(),
        repaired = p.repaired_blocks,
        "scrub ended"
    );
    let event = format!(
        "scrub {}: examined {} blocks ({} bytes) in {} s, {} errors, {} repaired{}",
        format!("{state:?}").to_ascii_lowercase(),
        p.examined_blocks,
        p.examined_bytes,
        finished_ms.saturating_sub(p.started_ms) / 1000,
        p.errors_total(),
        p.repaired_blocks,
        p.failure.as_deref().map(|f| format!(" ({f})")).unwrap_or_default(),
    );
    (state, finished_ms, event)
}

fn rate_max(inner: &Inner) -> u64 {
    inner
        .meta
        .read()
        .prop(None, "scrub_rate_max")
        .and_then(|v| v.parse().ok())
        .unwrap_or(SCRUB_RATE_MAX_DEFAULT)
}

fn with_progress(inner: &Inner, f: impl FnOnce(&mut ScrubProgress)) {
    f(&mut inner.scrub.progress.lock())
}

fn note_error(inner: &Inner, e: ScrubError) {
    with_progress(inner, |p| {
        match e.kind.as_str() {
            "checksum" => p.checksum_errors += 1,
            "missing" => p.missing_blocks += 1,
            _ => p.read_errors += 1,
        }
        if e.repaired {
            p.repaired_blocks += 1;
        }
        if p.errors.len() < ERRORS_LISTED_MAX {
            p.errors.push(e);
        }
    });
}

/// Ok(true): every tree walked; Ok(false): canceled.
async fn run(inner: &Arc<Inner>) -> Result<bool> {
    let mut trees: Vec<(String, TreeRef)> = {
        let meta = inner.meta.read();
        let mut t: Vec<(String, TreeRef)> =
            meta.volumes.values().map(|v| (v.name.clone(), v.tree)).collect();
        // Snapshots too: after an overwrite, their blocks are referenced by nothing else.
        for s in meta.snapshots.values() {
            let vol = meta.volumes.get(&s.volume_id).map(|v| v.name.as_str()).unwrap_or("?");
            t.push((format!("{vol}@{}", s.name), s.tree));
        }
        t
    };
    trees.push(("(space table)".into(), inner.meta.read().root.space));
    let mut pages_seen: HashSet<(u32, u8, u64)> = HashSet::new();
    let mut pacer = Pacer::new(inner);
    for (name, start_tree) in trees {
        let mut slot = 0u64;
        // The newest root of this tree for each chunk; a volume destroyed meanwhile is done.
        while let Some(tree) = current_tree(inner, start_tree.tree_id) {
            // The space table is walked whole: its slots are keyed by segment id.
            let end = if tree.tree_id == SPACE_TREE_ID {
                u64::MAX
            } else {
                slot.saturating_add(CHUNK_SLOTS)
            };
            let published = inner.meta.read().root.txg;
            let items = match TreeWalk::walk_range(&tree, &inner.cache, &**inner, slot, end).await {
                Ok(walk) => chunk_items(&tree, walk, &mut pages_seen, published, inner),
                Err(e) => {
                    note_error(
                        inner,
                        ScrubError {
                            dataset: name.clone(),
                            object: format!("map of blocks {slot}..{end}"),
                            segment: String::new(),
                            kind: if matches!(e, Error::Checksum { .. }) {
                                "checksum".into()
                            } else {
                                "read".into()
                            },
                            repaired: false,
                        },
                    );
                    Vec::new()
                }
            };
            if !check_items(inner, &name, items, &mut pacer).await? {
                return Ok(false);
            }
            if end >= tree.capacity_slots() {
                break;
            }
            slot = end;
        }
    }
    Ok(true)
}

fn current_tree(inner: &Inner, tree_id: u32) -> Option<TreeRef> {
    let meta = inner.meta.read();
    if tree_id == SPACE_TREE_ID {
        return Some(meta.root.space);
    }
    meta.volumes
        .get(&tree_id)
        .map(|v| v.tree)
        .or_else(|| meta.snapshots.get(&tree_id).map(|s| s.tree))
}

fn chunk_items(
    tree: &TreeRef,
    walk: TreeWalk,
    pages_seen: &mut HashSet<(u32, u8, u64)>,
    published: u64,
    inner: &Inner,
) -> Vec<Item> {
    let mut items = Vec::new();
    let mut skipped = 0u64;
    let mut keep = |ptr: BlockPtr, item: Item| {
        if ptr.is_hole() {
            return;
        }
        if ptr.birth_txg > published {
            skipped += 1;
            return;
        }
        items.push(item);
    };
    for (level, index, ptr) in walk.pages {
        if pages_seen.insert((tree.tree_id, level, index)) {
            keep(ptr, Item { ptr, tree: *tree, block: None, page: (level, index) });
        }
    }
    if tree.tree_id != SPACE_TREE_ID {
        for (block, slot) in walk.leaf_slots {
            if let Ok(ptr) = BlockPtr::from_bytes(&slot) {
                keep(ptr, Item { ptr, tree: *tree, block: Some(block), page: (0, 0) });
            }
        }
    }
    with_progress(inner, |p| p.skipped_newer_blocks += skipped);
    items
}

/// Reads and verifies one chunk's blocks. Ok(false): canceled.
async fn check_items(
    inner: &Arc<Inner>,
    name: &str,
    mut items: Vec<Item>,
    pacer: &mut Pacer,
) -> Result<bool> {
    items.sort_by_key(|i| (i.ptr.segment_id, i.ptr.offset_bytes));
    for group in coalesce(&items) {
        if !pacer.wait_turn(inner).await {
            return Ok(false);
        }
        let seg = group[0].ptr.segment_id;
        let start = group[0].ptr.range().start;
        let end = group.iter().map(|i| i.ptr.range().end).max().unwrap_or(start);
        pacer.spent(end - start);
        inner.counters.add_store_read(end - start);
        let fetched = inner.store.get_range(&segment_key(seg), start..end).await;
        for item in group {
            let verdict = match &fetched {
                Ok(bytes) => {
                    let r = item.ptr.range();
                    let phys = bytes.slice((r.start - start) as usize..(r.end - start) as usize);
                    if checksum64(&phys) == item.ptr.checksum {
                        None
                    } else {
                        Some("checksum")
                    }
                }
                Err(e) if e.kind == StoreErrorKind::NotFound => Some("missing"),
                Err(_) => Some("read"),
            };
            with_progress(inner, |p| {
                p.examined_blocks += 1;
                p.examined_bytes += u64::from(item.ptr.physical_bytes);
            });
            if let Some(kind) = verdict {
                report_bad(inner, name, item, kind).await;
            }
        }
    }
    Ok(true)
}

/// A bad copy that the map still references is an error; repaired from the ARC/L2ARC if a
/// verified copy is there.
async fn report_bad(inner: &Arc<Inner>, name: &str, item: &Item, kind: &str) {
    if !still_referenced(inner, item).await {
        return;
    }
    if kind == "checksum" {
        inner.counters.add_checksum_error();
    }
    let mut repaired = false;
    if let Some(block) = item.block {
        if let Some(phys) =
            inner.blocks.get(&item.ptr, false).filter(|b| checksum64(b) == item.ptr.checksum)
        {
            inner.txg.pending.lock().relocations.push(Relocation {
                tree_id: item.tree.tree_id,
                block,
                old: item.ptr,
                physical: phys,
            });
            inner.txg.kick();
            with_progress(inner, |p| p.repaired_bytes += u64::from(item.ptr.physical_bytes));
            repaired = true;
        }
    }
    tracing::warn!(dataset = name, segment = %format!("{:016x}", item.ptr.segment_id), kind, repaired, "scrub found a bad block");
    let object = match item.block {
        Some(b) => format!("block at {}", b * crate::dirty::BLOCK_BYTES),
        None => format!("map page level {} index {}", item.page.0, item.page.1),
    };
    note_error(
        inner,
        ScrubError {
            dataset: name.to_string(),
            object,
            segment: format!("{:016x}", item.ptr.segment_id),
            kind: kind.to_string(),
            repaired,
        },
    );
}

async fn still_referenced(inner: &Arc<Inner>, item: &Item) -> bool {
    let Some(tree) = current_tree(inner, item.tree.tree_id) else { return false };
    let now = match item.block {
        Some(block) => tree
            .lookup(&inner.cache, &**inner, block, inner.cache.generation())
            .await
            .ok()
            .and_then(|s| BlockPtr::from_bytes(&s).ok()),
        None => tree.page_location(&inner.cache, &**inner, item.page.0, item.page.1).await.ok(),
    };
    now == Some(item.ptr)
}

/// Groups blocks of one segment into ranged GETs of at most `REQUEST_BYTES_MAX`, reading small
/// gaps rather than paying for another request.
fn coalesce(items: &[Item]) -> Vec<&[Item]> {
    let mut groups = Vec::new();
    let mut first = 0;
    for i in 1..=items.len() {
        let split = i == items.len() || {
            let (a, b) = (&items[first], &items[i]);
            let prev_end = items[first..i].iter().map(|x| x.ptr.range().end).max().unwrap_or(0);
            b.ptr.segment_id != a.ptr.segment_id
                || b.ptr.range().start > prev_end + GAP_BYTES_MAX
                || b.ptr.range().end - a.ptr.range().start > REQUEST_BYTES_MAX
        };
        if split {
            if first < i {
                groups.push(&items[first..i]);
            }
            first = i;
        }
    }
    groups
}

/// Rate limit (the `scrub_rate_max` property, read again every second so `set` takes effect),
/// pause and cancel.
struct Pacer {
    window_start_us: u64,
    window_bytes: u64,
    paused: watch::Receiver<bool>,
    cancel: watch::Receiver<bool>,
}

impl Pacer {
    fn new(inner: &Inner) -> Self {
        Pacer {
            window_start_us: inner.env.clock.mono_us(),
            window_bytes: 0,
            paused: inner.scrub.paused.subscribe(),
            cancel: inner.scrub.cancel.subscribe(),
        }
    }

    fn spent(&mut self, bytes: u64) {
        self.window_bytes += bytes;
    }

    /// Waits while paused or over the rate; false when canceled.
    async fn wait_turn(&mut self, inner: &Inner) -> bool {
        loop {
            if *self.cancel.borrow() {
                return false;
            }
            if *self.paused.borrow() {
                // Woken by resume or cancel (both flip `paused` to false).
                let _ =
                    timeout(&*inner.env.clock, Duration::from_secs(1), self.paused.changed()).await;
                continue;
            }
            let rate = rate_max(inner);
            with_progress(inner, |p| p.rate_bytes_per_s_max = rate);
            let elapsed_us = inner.env.clock.mono_us().saturating_sub(self.window_start_us);
            if elapsed_us >= 1_000_000 {
                self.window_start_us = inner.env.clock.mono_us();
                self.window_bytes = 0;
            }
            if rate == 0 || self.window_bytes < rate {
                return true;
            }
            let left_us = 1_000_000u64.saturating_sub(elapsed_us).max(1_000);
            inner.env.clock.sleep(Duration::from_micros(left_us)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(seg: u64, off: u32, len: u32) -> Item {
        let ptr = BlockPtr {
            segment_id: seg,
            offset_bytes: off,
            physical_bytes: len,
            checksum: 0,
            birth_txg: 1,
            compression: 0,
            logical_bytes: len,
        };
        Item {
            ptr,
            tree: TreeRef { tree_id: 1, levels: 1, top: BlockPtr::HOLE, page_tag: 1 },
            block: Some(0),
            page: (0, 0),
        }
    }

    #[test]
    fn coalesce_splits_on_segment_gap_and_size() {
        let items = vec![
            item(1, 0, 4096),
            item(1, 4096, 4096),
            item(1, 4096 + 4096 + 100_000, 4096), // small gap: same request
            item(1, 2 << 20, 4096),               // large gap: new request
            item(2, 0, 4096),                     // other segment
            item(2, 4096, 9 << 20),               // would pass the request cap
        ];
        let groups: Vec<usize> = coalesce(&items).iter().map(|g| g.len()).collect();
        assert_eq!(groups, vec![3, 1, 1, 1]);
    }
}
