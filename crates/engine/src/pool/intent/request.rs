//! A sync request (fsync, NBD FLUSH, FUA): the records of every write acknowledged before it go
//! to the log in write order and the request returns once they are durable there; without a
//! healthy log (or for what the log gave up) it waits for the txg that holds them instead.

use crate::error::Result;
use crate::pool::{syncer, Inner};
use fardisk_slog::{LogError, LogRecord};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A sync request: returns once every write acknowledged before the call is durable.
pub(crate) async fn sync_request(inner: &Arc<Inner>) -> Result<()> {
    let intent = &inner.intent;
    intent.sync_requests.fetch_add(1, Ordering::Relaxed);
    let Some(log) = intent.log() else {
        return syncer::wait_for_open_writes(inner).await;
    };
    let published = inner.txg.published_txg();
    let (ticket, newest_txg, unlogged_txg, queued) = {
        let _order = intent.order.lock().await;
        let (ticket, records, unlogged_txg) = {
            let mut st = intent.state.lock();
            st.next_ticket += 1;
            let records: Vec<LogRecord> =
                std::mem::take(&mut st.pending).into_iter().filter(|r| r.txg > published).collect();
            st.pending_bytes = 0;
            let unlogged = std::mem::take(&mut st.unlogged_txg);
            (st.next_ticket, records, unlogged)
        };
        #[cfg(test)]
        intent.pause_for_test().await;
        let newest_txg = records.iter().map(|r| r.txg).max().unwrap_or(0);
        (ticket, newest_txg, unlogged_txg, log.enqueue(records).await)
    };
    let committed = match queued {
        Ok(q) => q.durable().await,
        Err(e) => Err(e),
    };
    let outcome = match committed {
        Ok(_) => Ok(()),
        Err(e) => {
            // The log cannot take these records (full, every leg failed): they are in the open or
            // syncing txg, so publishing that txg makes them durable, slowly but surely.
            intent.fallbacks.fetch_add(1, Ordering::Relaxed);
            if !matches!(e, LogError::LogFull { .. } | LogError::AwaitingRelease { .. }) {
                tracing::warn!(error = %e, "intent log commit failed; waiting for the txg instead");
            }
            syncer::wait_published(inner, newest_txg).await
        }
    };
    let outcome = match (outcome, unlogged_txg) {
        (Ok(()), t) if t > 0 => syncer::wait_published(inner, t).await,
        (o, _) => o,
    };
    if outcome.is_err() {
        // Not durable, and the records are gone from `pending`: every later request must see it.
        let mut st = intent.state.lock();
        st.failed_txg = st.failed_txg.max(newest_txg.max(unlogged_txg));
    }
    intent.finish(ticket);
    outcome?;
    intent.wait_through(ticket).await;
    // An earlier request (or one that ran beside this one) failed to make its records durable;
    // they were written before this request returns, so it may return Ok only once their txg is
    // in the store (or fail with the reason it is not).
    let failed_txg = intent.state.lock().failed_txg;
    if failed_txg > inner.txg.published_txg() {
        syncer::wait_published(inner, failed_txg).await?;
    }
    Ok(())
}
