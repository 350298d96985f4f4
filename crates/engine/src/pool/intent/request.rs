//! A sync request (fsync, NBD FLUSH, FUA): the records of every write acknowledged before it go
//! to the log in write order and the request returns once they are durable there; without a
//! healthy log (or for what the log gave up) it waits for the txg that holds them instead.

use super::Ahead;
use crate::error::Result;
use crate::pool::{syncer, Inner};
use fardisk_slog::{IntentLog, LogError, QueuedCommit};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A sync request: returns once every write acknowledged before the call is durable.
pub(crate) async fn sync_request(inner: &Arc<Inner>) -> Result<()> {
    let intent = &inner.intent;
    intent.sync_requests.fetch_add(1, Ordering::Relaxed);
    intent.sync_request_arrived(inner.env.clock.mono_us());
    let Some(log) = intent.log() else {
        return syncer::wait_for_open_writes(inner).await;
    };
    let (mut taken, queued) = take_and_queue(inner, &log).await;
    let aheads = std::mem::take(&mut taken.aheads);
    let mut outcome = make_durable(inner, &taken, queued).await;
    if outcome.is_ok() {
        outcome = written_ahead_durable(inner, aheads).await;
    }
    if outcome.is_err() {
        // Not durable, and the records are gone from `pending`: every later request must see it.
        let mut st = intent.state.lock();
        st.failed_txg = st.failed_txg.max(taken.newest_txg.max(taken.unlogged_txg));
    }
    intent.finish(taken.ticket);
    outcome?;
    intent.wait_through(taken.ticket).await;
    // An earlier request (or one that ran beside this one) failed to make its records durable;
    // they were written before this request returns, so it may return Ok only once their txg is
    // in the store (or fail with the reason it is not).
    let failed_txg = intent.state.lock().failed_txg;
    if failed_txg > inner.txg.published_txg() {
        syncer::wait_published(inner, failed_txg).await?;
    }
    Ok(())
}

/// What a sync request took from the pending records.
struct Taken {
    ticket: u64,
    /// The newest txg among its records and the writes ahead it took (0: none).
    newest_txg: u64,
    /// The newest txg with writes that were not logged (0: none): it must reach the store.
    unlogged_txg: u64,
    /// The writes ahead queued before its commit: the commit's flush makes them durable, if
    /// they were written at all.
    aheads: Vec<Ahead>,
}

/// Takes the pending records (of txgs not yet published) and queues them in the log, under the
/// `order` lock so that records enter the log in the order their writes were applied.
async fn take_and_queue<'a>(
    inner: &Inner,
    log: &'a IntentLog,
) -> (Taken, std::result::Result<QueuedCommit<'a>, LogError>) {
    let intent = &inner.intent;
    let published = inner.txg.published_txg();
    let _order = intent.order.lock().await;
    let (ticket, records, unlogged_txg, aheads) = {
        let mut st = intent.state.lock();
        st.next_ticket += 1;
        let records = st.take_pending(published);
        let aheads: Vec<Ahead> = st.ahead.drain(..).collect();
        let unlogged = std::mem::take(&mut st.unlogged_txg);
        (st.next_ticket, records, unlogged, aheads)
    };
    #[cfg(test)]
    intent.pause_for_test().await;
    let newest_txg =
        records.iter().map(|r| r.txg).chain(aheads.iter().map(|a| a.newest_txg)).max().unwrap_or(0);
    (Taken { ticket, newest_txg, unlogged_txg, aheads }, log.enqueue(records).await)
}

/// After the commit's flush: every write ahead queued before it is durable if the log wrote
/// it; one the log refused or failed is in its txg, which must reach the store instead.
async fn written_ahead_durable(inner: &Arc<Inner>, aheads: Vec<Ahead>) -> Result<()> {
    for ahead in aheads {
        if let Err(e) = ahead.written.written().await {
            inner.intent.fallbacks.fetch_add(1, Ordering::Relaxed);
            if !matches!(e, LogError::LogFull { .. } | LogError::AwaitingRelease { .. }) {
                tracing::warn!(error = %e, "intent log write ahead failed; waiting for the txg instead");
            }
            syncer::wait_published(inner, ahead.newest_txg).await?;
        }
    }
    Ok(())
}

/// Waits until the taken records are durable: on the log, or (when the log cannot take them)
/// in the store through their txg; and the unlogged writes' txg in the store.
async fn make_durable(
    inner: &Arc<Inner>,
    taken: &Taken,
    queued: std::result::Result<QueuedCommit<'_>, LogError>,
) -> Result<()> {
    let committed = match queued {
        Ok(q) => q.durable().await,
        Err(e) => Err(e),
    };
    if let Err(e) = committed {
        // The log cannot take these records (full, every leg failed): they are in the open or
        // syncing txg, so publishing that txg makes them durable, slowly but surely.
        inner.intent.fallbacks.fetch_add(1, Ordering::Relaxed);
        if !matches!(e, LogError::LogFull { .. } | LogError::AwaitingRelease { .. }) {
            tracing::warn!(error = %e, "intent log commit failed; waiting for the txg instead");
        }
        syncer::wait_published(inner, taken.newest_txg).await?;
    }
    if taken.unlogged_txg > 0 {
        syncer::wait_published(inner, taken.unlogged_txg).await?;
    }
    Ok(())
}
