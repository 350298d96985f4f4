//! Releasing log space once records are published, and the pins that hold a release back.
//!
//! A replay stream (replay_stream.rs) notes the live blocks when it starts and reads them as its
//! records are taken. On a log that keeps working meanwhile (a fenced writer copying what it
//! holds to a file, pool/held.rs in the engine) a release could free blocks the stream has not
//! read yet, and a commit could then write over them: the stream would find a damaged block and
//! stop there, leaving out every record after it. So while a stream lives it holds a
//! [`ReleasePin`]: releases asked for meanwhile are remembered, the highest txg kept, and done
//! when the last pin goes. Commits still run; they only cannot take space a pin keeps, and get
//! `LogFull` when nothing else is free, as they would if the txg had not been published yet.
//!
//! The pins' mutex is held for a whole release (ring updates only, no device I/O), so a pin taken
//! while a release runs waits for it to finish, and the blocks a new stream notes are those the
//! release left live.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::MutexGuard;

use crate::shared::Shared;

/// The pins now held and the release they hold back.
#[derive(Debug, Default)]
pub(crate) struct ReleasePins {
    held: usize,
    /// The highest txg a release was asked for while pins were held.
    deferred_txg: Option<u64>,
}

/// Keeps released space from being reused while it lives (see the module doc).
pub(crate) struct ReleasePin {
    shared: Arc<Shared>,
}

impl ReleasePin {
    pub(crate) fn new(shared: &Arc<Shared>) -> ReleasePin {
        shared.release_pins.lock().held += 1;
        ReleasePin { shared: Arc::clone(shared) }
    }
}

impl Drop for ReleasePin {
    fn drop(&mut self) {
        let mut pins = self.shared.release_pins.lock();
        pins.held -= 1;
        if pins.held == 0 {
            if let Some(txg) = pins.deferred_txg.take() {
                release_now(&self.shared, txg, &mut pins);
            }
        }
    }
}

impl Shared {
    /// `IntentLog::release_through_txg`: now, or when the last pin goes.
    pub(crate) fn release_through_txg(&self, txg: u64) {
        let mut pins = self.release_pins.lock();
        if pins.held > 0 {
            pins.deferred_txg = Some(pins.deferred_txg.map_or(txg, |d| d.max(txg)));
            return;
        }
        release_now(self, txg, &mut pins);
    }
}

/// Releases the records with txg <= `txg`; called with the pins' mutex held (`_pins`).
fn release_now(shared: &Shared, txg: u64, _pins: &mut MutexGuard<'_, ReleasePins>) {
    // Read before the rings: a block being written now, or later, starts at or above it,
    // so it cannot be released by mistake while the bound is applied.
    let next_seq = shared.next_seq.load(Ordering::Acquire);
    let vdevs = shared.vdevs.read().clone();
    let first_unpublished = vdevs
        .iter()
        .filter_map(|v| v.ring.lock().first_seq_above_txg(txg))
        .min()
        .unwrap_or(next_seq)
        .min(next_seq);
    let mut moved = false;
    let mut finished = Vec::new();
    for vdev in &vdevs {
        let mut ring = vdev.ring.lock();
        if ring.release_before_seq(first_unpublished) {
            moved = true;
            vdev.update_space(&ring);
        }
        if vdev.removing.load(Ordering::Acquire) && ring.first_live_seq().is_none() {
            finished.push(vdev.guid);
        }
    }
    for guid in finished {
        shared.finish_removal(guid);
    }
    if moved {
        shared.queue.lock().head_dirty = true;
        shared.queue_wake.notify_one();
    }
}
