//! The commit of one txg (ZFS's spa_sync), called by the syncer with the txg frozen: pack its
//! blocks into segments, update the block maps and the space table copy-on-write, upload every
//! segment, and only then publish the root (rule 1: a root never references an object not yet
//! stored). A crash at any instant leaves the previous root intact; uploads and the publish are
//! retried until they succeed (the pool shows SUSPENDED meanwhile) or the pool is fenced.

use super::maps::MapChanges;
use super::pack::Segments;
use super::retry::publish_until_done;
use super::{snapshot_space, space, PendingMeta, Published};
use crate::dirty::DirtySet;
use crate::error::Result;
use crate::fence::write_head_hint;
use crate::pool::Inner;
use crate::root::Root;
use std::sync::Arc;

/// Commits txg `txg` (its dirty blocks `set` and queued work `pending`) and publishes its root.
/// Returns what reclaim needs to know of it.
pub(crate) async fn build_and_publish(
    inner: &Arc<Inner>,
    txg: u64,
    set: &DirtySet,
    pending: PendingMeta,
) -> Result<Published> {
    let cfg = inner.config.read().clone();
    // The data: full segments uploading, the rest in the meta segment.
    let mut segments = Segments::new(inner, txg, &cfg);
    let (mut updates, mut meta_segment) = segments.pack_data(set).await?;
    // The maps, their pages written into the meta segment.
    let mut maps = MapChanges::load(inner);
    maps.apply(inner, txg, set, &pending, &mut meta_segment, &mut updates).await?;
    maps.write_pages(inner, txg, &mut meta_segment, cfg.compression).await?;
    let time_ms = inner.env.clock.wall_ms();
    snapshot_space::capture_snapshots(&pending, txg, time_ms, &maps.volumes, &mut maps.snaps);
    // The space table, its pages last; then the root can be assembled.
    segments.count_meta_written(&meta_segment);
    let delta = std::mem::take(&mut maps.delta);
    let written = &segments.written;
    let (mut root, freed) =
        space::update_space(inner, txg, &mut meta_segment, written, delta, &pending, &maps.volumes)
            .await?;
    root.time_ms = time_ms;
    root.snapshots = maps.snaps.values().cloned().collect();
    root.free_queue = std::mem::take(&mut maps.queue);
    root.destroying = std::mem::take(&mut maps.destroying);
    // Every segment in the store, and only then the root. The previous root's head hint goes
    // out beside the last upload, so no sync request waits a round trip for it.
    let (meta_counter, ()) = tokio::join!(
        segments.upload_last_and_wait(meta_segment, &updates),
        write_due_head_hint(inner)
    );
    let root = Root { next_segment_counter: meta_counter? + 1, ..root };
    publish_until_done(inner, &root).await?;
    let frees_queued = !root.free_queue.is_empty() || !root.destroying.is_empty();
    install(inner, root, maps);
    inner.txg.publish_with_frees(txg, frees_queued);
    inner.txg.head_hint_due(txg);
    inner.intent.published(txg);
    Ok(Published { time_ms, freed })
}

/// Writes the head hint of the newest published root if it is not written yet: beside a
/// commit's last upload, when the syncer finds the pool idle, and at export.
pub(crate) async fn write_due_head_hint(inner: &Arc<Inner>) {
    if let Some(txg) = inner.txg.take_head_hint() {
        write_head_hint(inner.store.as_ref(), txg).await;
    }
}

/// The published root becomes the pool's: the maps as the txg left them replace the live ones,
/// and the written pages become evictable.
fn install(inner: &Inner, root: Root, maps: MapChanges) {
    let rolled_back = maps.ops.rolled_back;
    let cuts = maps.cuts;
    {
        let mut meta = inner.meta.write();
        for (id, v) in maps.volumes {
            if let Some(live) = meta.volumes.get_mut(&id) {
                live.tree = v.tree;
                live.allocated_blocks = v.allocated_blocks;
                live.origin = v.origin;
                if rolled_back.contains(&id) {
                    live.size_bytes = v.size_bytes;
                }
            }
        }
        // Ids handed out while this txg synced must not be handed out again.
        let next_volume_id = meta.root.next_volume_id.max(root.next_volume_id);
        // Properties and vdevs changed while this txg synced (`set`, `add`, `replace`) are newer
        // than this txg's copy; they reach the store with the next txg (their `meta_changed`).
        let (props, vdevs) =
            (std::mem::take(&mut meta.root.props), std::mem::take(&mut meta.root.vdevs));
        meta.root = root;
        meta.root.next_volume_id = next_volume_id;
        (meta.root.props, meta.root.vdevs) = (props, vdevs);
        meta.snapshots = maps.snaps;
    }
    inner.cache.finish_txg();
    // Readers that walked the old map of a rolled-back volume may have cached its pages.
    for id in &rolled_back {
        inner.cache.forget_tree(*id);
    }
    // Likewise the pages under subtrees a trim cut off (blockmap/cut.rs).
    let mut by_tree: std::collections::BTreeMap<u32, Vec<(u8, u64)>> = Default::default();
    for (tree_id, level, index) in cuts {
        by_tree.entry(tree_id).or_default().push((level, index));
    }
    for (tree_id, roots) in by_tree {
        inner.cache.forget_subtrees(tree_id, &roots);
    }
}

/// The final root of an export: the holder is marked inactive so the next import needs no force.
pub(crate) async fn publish_export(inner: &Arc<Inner>) -> Result<()> {
    let _guard = inner.txg.sync_lock.lock().await;
    let mut root = inner.meta.read().root.clone();
    root.txg += 1;
    root.put_id = inner.rng.next_u128();
    root.time_ms = inner.env.clock.wall_ms();
    root.holder.active = false;
    publish_until_done(inner, &root).await?;
    inner.txg.state.lock().open_txg = root.txg + 1;
    let txg = root.txg;
    inner.meta.write().root = root;
    inner.txg.publish(txg);
    // The next import finds the export root without a probe.
    inner.txg.take_head_hint();
    write_head_hint(inner.store.as_ref(), txg).await;
    Ok(())
}
