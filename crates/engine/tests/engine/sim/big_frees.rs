//! The simulation's big-free step: a trim of a whole volume, or of an unaligned range over its
//! whole leaf pages, whose cut subtrees wait in the root's free queue (docs/design/
//! 0006-free-queue.md); the sim's pools free one queued page per txg, so a few txgs in, a crash
//! cuts the freeing half-way. The import that follows resumes from the root, and the auditor
//! checks the volumes against the history and the space table against the maps and the queue.
//! Or a snapshot destroy: a snapshot, blocks rewritten all over the volume (so it alone holds
//! them), the destroy, and a few txgs of its walk (one leaf page each at the sim's bound) before
//! the crash; the import resumes the walk from the cursor in the root.

use super::{World, VOLUMES};

const BLOCK_BYTES: u64 = 4096;

impl World {
    pub(super) async fn big_free_then_crash(&mut self) {
        if self.rng.chance(0.5) {
            return self.snapshot_destroy_then_crash().await;
        }
        let vol = self.rng.below(VOLUMES.len() as u64) as usize;
        let blocks = VOLUMES[vol].1 / BLOCK_BYTES;
        let (first, end) = if self.rng.chance(0.5) {
            (0, blocks)
        } else {
            // Starts inside the first leaf page (256 blocks) and ends inside the last: the
            // pages between are cut whole, the edges walk down to their slots.
            (self.rng.below(256), blocks - self.rng.below(256))
        };
        self.zero(vol, first * BLOCK_BYTES, (end - first) * BLOCK_BYTES).await;
        self.report.big_frees += 1;
        self.free_steps_then_crash().await;
    }

    async fn snapshot_destroy_then_crash(&mut self) {
        let vol = self.rng.below(VOLUMES.len() as u64) as usize;
        let (volume, bytes) = VOLUMES[vol];
        let name = format!("sim{}", self.step);
        let (pool, snap) = (self.pool(), name.clone());
        let create = async move { pool.snapshot_create(volume, &snap).await.map(|_| 0) };
        let mark = self.history.mark();
        match self.watch(tokio::spawn(create), "snapshot create").await {
            Ok(_) => self.history.ack_through(mark),
            Err(e) => self.fail(format!("snapshot of {volume} failed: {e}")),
        }
        // Blocks in many leaf pages, so the walk has several to go through.
        for _ in 0..4 + self.rng.below(12) {
            let offset = self.rng.below(bytes / BLOCK_BYTES) * BLOCK_BYTES;
            let data = self.bytes(BLOCK_BYTES);
            self.write(vol, offset, data).await;
        }
        let pool = self.pool();
        let destroy = async move { pool.snapshot_destroy(volume, &name).await.map(|_| 0) };
        let mark = self.history.mark();
        match self.watch(tokio::spawn(destroy), "snapshot destroy").await {
            Ok(_) => self.history.ack_through(mark),
            Err(e) => self.fail(format!("snapshot destroy of {volume} failed: {e}")),
        }
        self.report.snapshot_destroys += 1;
        self.free_steps_then_crash().await;
    }

    /// A few txgs of queued frees and destroy walks, then a crash.
    async fn free_steps_then_crash(&mut self) {
        for _ in 0..1 + self.rng.below(3) {
            let mark = self.history.mark();
            let pool = self.pool();
            let handle =
                tokio::spawn(async move { pool.sync_step().await.map(|t| t.unwrap_or(0)) });
            match self.watch(handle, "big-free txg").await {
                Ok(_) => self.history.ack_through(mark),
                Err(e) => self.fail(format!("a txg of a big trim's frees failed: {e}")),
            }
        }
        let pool = self.pool();
        if pool.free_queue_entries() > 0 || !pool.trees_being_destroyed().is_empty() {
            self.report.crashes_mid_frees += 1;
        }
        self.crash_now::<()>(Vec::new()).await;
    }
}
