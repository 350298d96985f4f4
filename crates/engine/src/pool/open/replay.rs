//! Log replay at import (ZFS's zil_replay): the records the log holds beyond the root the pool
//! opened at are applied through the write path, as the writes they record, and then synced, so
//! every write a sync request acknowledged is in the store before anything new is written.

use crate::error::{Error, Result};
use crate::pool::{syncer, Inner, Pool};
use fardisk_slog::RecordKind;
use std::sync::Arc;

/// Replays the log after import: records newer than the last published txg, in order, into the
/// open txg; then syncs them to the store and releases the log. Returns the records applied.
/// The log is read as the records are applied (`replay_stream`): memory holds one block per log
/// vdev, not the whole log (after a store outage the log can hold far more than the dirty data
/// it comes down to).
pub(super) async fn replay(inner: &Arc<Inner>, pool: &Pool, after_txg: u64) -> Result<usize> {
    let Some(log) = inner.intent.log() else { return Ok(0) };
    let mut stream = log
        .replay_stream(after_txg)
        .map_err(|e| Error::Unavailable(format!("intent log replay: {e}")))?;
    let mut n = 0;
    // Bounded by the records the log holds: the stream ends at the end of its prefix.
    while let Some(r) = stream.next_record() {
        n += 1;
        let rec = r.record;
        if pool.volume_size(rec.volume_id).is_none() {
            continue; // The volume was destroyed in a published txg after the record was written.
        }
        match rec.kind {
            RecordKind::Write => {
                pool.write_unlogged(rec.volume_id, rec.offset_bytes, rec.data).await?
            }
            RecordKind::Trim | RecordKind::WriteZeroes => {
                pool.zero_unlogged(rec.volume_id, rec.offset_bytes, rec.length_bytes as u64).await?
            }
        };
    }
    let end = stream.end();
    // Releases wait while a stream lives (slog release.rs): the sync below releases the log.
    drop(stream);
    if let Some(seq) = end.gap_at_seq {
        tracing::warn!(seq, "intent log replay stopped at a record no leg holds intact");
    }
    // Txg numbers must move past every replayed record's, or releasing would keep them forever.
    for _ in 0..8 {
        inner.txg.queue_meta_change();
        let published = syncer::sync_until_clean(inner).await?;
        if published >= end.txg_max {
            break;
        }
    }
    inner.intent.published(inner.txg.published_txg());
    Ok(n)
}
