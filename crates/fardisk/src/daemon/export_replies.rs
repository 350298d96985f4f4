//! Export requests whose reply is not written yet. The main loop waits for them (bounded) after
//! the export and before the process exits, so `fardisk export` gets its answer instead of a
//! closed connection.
//!
//! It was a `Notify` with `notify_one` per export reply written: a refused export (a volume's
//! block device in use) left a permit behind, the next export's wait took it at once, the
//! process exited while that export's reply was still being written, and the CLI said
//! "the daemon closed the connection without a reply" for an export that had happened (e2e 64).

use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::Notify;

#[derive(Debug, Default)]
pub struct ExportReplies {
    pending: AtomicUsize,
    written: Notify,
}

/// One export request, from its arrival until its reply is written (or the connection is gone).
pub struct PendingReply<'a>(&'a ExportReplies);

impl Drop for PendingReply<'_> {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::SeqCst);
        self.0.written.notify_waiters();
    }
}

impl ExportReplies {
    /// An export request arrived; its reply counts as written when the guard drops.
    pub fn begin(&self) -> PendingReply<'_> {
        self.pending.fetch_add(1, Ordering::SeqCst);
        PendingReply(self)
    }

    /// Returns once no export reply is pending.
    pub async fn all_written(&self) {
        loop {
            // Created before the check: `notify_waiters` reaches a `Notified` from its creation.
            let written = self.written.notified();
            if self.pending.load(Ordering::SeqCst) == 0 {
                return;
            }
            written.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_refused_export_does_not_let_the_next_one_exit_before_its_reply() {
        let replies = ExportReplies::default();
        // A refused export: its reply is written, nothing waits for it.
        drop(replies.begin());
        // The export that goes through: the process must wait for its reply.
        let pending = replies.begin();
        let waited = tokio::time::timeout(Duration::from_millis(200), replies.all_written()).await;
        assert!(waited.is_err(), "the exit waits while a reply is pending");
        drop(pending);
        tokio::time::timeout(Duration::from_secs(5), replies.all_written())
            .await
            .expect("once the reply is written the exit goes on");
    }

    #[tokio::test]
    async fn with_no_export_waiting_the_exit_does_not_wait() {
        let replies = ExportReplies::default();
        tokio::time::timeout(Duration::from_millis(200), replies.all_written())
            .await
            .expect("a stop by signal has no reply to wait for");
    }
}
