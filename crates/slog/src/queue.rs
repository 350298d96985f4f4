//! The group-commit queue between the callers of `IntentLog::enqueue` and the writer thread
//! (writer.rs): each caller queues a waiter with its records and sleeps until the writer
//! answers it with a receipt or an error.

use std::collections::VecDeque;

use tokio::sync::oneshot;

use crate::error::LogError;
use crate::record::LogRecord;

/// What a successful commit tells its caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitReceipt {
    /// Global sequence number of the caller's first record (its records follow in order).
    pub first_seq: u64,
    pub record_count: u64,
    /// The vdev the batch went to (`None` when there was nothing to write).
    pub vdev_guid: Option<u64>,
    /// Callers that shared this device write and flush.
    pub batch_commits: u64,
    pub batch_records: u64,
}

/// One caller waiting for its records to be durable (or, written ahead, only on the devices).
pub(crate) struct Waiter {
    pub records: Vec<LogRecord>,
    pub payload_bytes: u64,
    /// True for a commit: answered after the device flush that makes its records (and every
    /// earlier record) durable. False for a write ahead (`IntentLog::write_ahead`): answered
    /// once its block is written to every online leg, before any flush.
    pub durable: bool,
    pub reply: oneshot::Sender<Result<CommitReceipt, LogError>>,
}

#[derive(Default)]
pub(crate) struct Queue {
    pub waiters: VecDeque<Waiter>,
    pub head_dirty: bool,
    pub shutdown: bool,
    /// The writer holds work taken from the queue (a batch or heads being written).
    pub busy: bool,
    /// A committer is writing a batch on its own thread (writer.rs `lead`): the writer thread
    /// waits until it is done.
    pub leading: bool,
}

impl Queue {
    /// Puts waiters a batch could not take back at the front, in their order.
    pub fn put_back(&mut self, leftover: Vec<Waiter>) {
        for waiter in leftover.into_iter().rev() {
            self.waiters.push_front(waiter);
        }
    }
}
