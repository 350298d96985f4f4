//! Replay as a stream: the records `IntentLog::replay` returns, in the same order, read a block
//! at a time as they are taken instead of all at once.
//!
//! `replay` reads every live block of every vdev into memory before it returns: as much memory
//! as the log holds live. After a store outage that is the whole log: e2e 54's engine replayed
//! about 750 MiB of records that came down to 20 MiB of dirty data (a database rewrites the same
//! pages and WAL). The stream holds one decoded block and one read-ahead window per vdev.
//!
//! Each vdev's chain holds its blocks in sequence order (batches are numbered and written one
//! after another; a batch retried on another vdev keeps its numbers), so a merge that always
//! takes the lowest next sequence number, the earlier vdev on a tie, gives what `replay`'s stable
//! sort of everything gives. That order is checked from the blocks' headers, which the ring
//! holds in memory, before anything is read; should it not hold, the stream falls back to
//! `replay`.
//!
//! A stream may also read a live log (a fenced writer copying what it holds): commits append
//! into free space only, and the stream's [`ReleasePin`] keeps releases from freeing the blocks it
//! has yet to read until it is dropped (release.rs). Drop it as soon as it has ended.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::error::LogError;
use crate::intent_log::IntentLog;
use crate::release::ReleasePin;
use crate::replay::ReplayedRecord;
use crate::ring::Extent;
use crate::vdev::Vdev;
use crate::window::ReadWindow;

/// How a finished stream ended (`Replay`'s fields other than the records).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayEnd {
    /// The release point the replay started from.
    pub start_seq: u64,
    /// One past the last sequence number of the replayable prefix.
    pub end_seq: u64,
    /// Set when a live record could not be read from any leg: replay stopped there.
    pub gap_at_seq: Option<u64>,
    /// Highest txg among the records handed out (0 when none).
    pub txg_max: u64,
}

/// The live records with txg above a point, in commit order; see the module doc.
pub struct ReplayStream {
    source: Source,
    after_txg: u64,
    start_seq: u64,
    /// The next sequence number of the replayable prefix.
    expected: u64,
    /// One past the last sequence number the log handed out.
    next_seq: u64,
    txg_max: u64,
    ended: bool,
    /// Releases wait until the stream is dropped (release.rs).
    _pin: ReleasePin,
}

enum Source {
    Chains(Vec<Chain>),
    /// `replay`'s records and end, when a chain was found out of order (handed out as they are:
    /// `replay` has already walked and filtered them).
    Collected(std::vec::IntoIter<ReplayedRecord>, ReplayEnd),
}

/// One vdev's live blocks, read as the merge needs them.
struct Chain {
    vdev: Arc<Vdev>,
    extents: VecDeque<Extent>,
    windows: Vec<ReadWindow>,
    /// The records of the block read last, not yet taken.
    records: VecDeque<ReplayedRecord>,
    /// A block no leg has intact was met: like `replay`, nothing after it on this vdev counts.
    broken: bool,
}

impl Chain {
    /// The sequence number of its next record, reading its next block when the last is used up.
    fn peek_seq(&mut self) -> Option<u64> {
        while self.records.is_empty() {
            if self.broken {
                return None;
            }
            let extent = self.extents.pop_front()?;
            let inner = self.vdev.inner.lock();
            match self.vdev.read_extent(&inner, &mut self.windows, &extent) {
                Some(records) => self.records.extend(records.into_iter().map(ReplayedRecord::from)),
                None => self.broken = true,
            }
        }
        self.records.front().map(|r| r.seq)
    }
}

/// True when every block of `extents` numbers its records after the block before it.
fn in_sequence_order(extents: &VecDeque<Extent>) -> bool {
    extents
        .iter()
        .zip(extents.iter().skip(1))
        .all(|(a, b)| a.first_seq + a.record_count <= b.first_seq)
}

impl IntentLog {
    /// [`IntentLog::replay`] as a stream (module doc): for an import, where nothing commits or
    /// releases until it is done.
    pub fn replay_stream(&self, after_txg: u64) -> Result<ReplayStream, LogError> {
        // Before the blocks are noted: no release may free them while the stream lives.
        let pin = ReleasePin::new(&self.shared);
        let vdevs = self.shared.vdevs.read().clone();
        let start_seq = self.shared.release_seq();
        let next_seq = self.shared.next_seq.load(std::sync::atomic::Ordering::Acquire);
        let mut chains = Vec::with_capacity(vdevs.len());
        for vdev in vdevs {
            let extents: VecDeque<Extent> = vdev.live_record_extents();
            let windows = vdev.read_windows(&vdev.inner.lock());
            chains.push(Chain { vdev, extents, windows, records: VecDeque::new(), broken: false });
        }
        let source = if chains.iter().all(|c| in_sequence_order(&c.extents)) {
            Source::Chains(chains)
        } else {
            tracing::warn!("intent log blocks out of sequence order on a vdev; replaying it whole");
            let replay = self.replay(after_txg)?;
            let end = ReplayEnd {
                start_seq: replay.start_seq,
                end_seq: replay.end_seq,
                gap_at_seq: replay.gap_at_seq,
                txg_max: replay.txg_max,
            };
            Source::Collected(replay.records.into_iter(), end)
        };
        Ok(ReplayStream {
            source,
            after_txg,
            start_seq,
            expected: start_seq,
            next_seq,
            txg_max: 0,
            ended: false,
            _pin: pin,
        })
    }
}

impl ReplayStream {
    /// The next record in commit order, or None at the end of the replayable prefix.
    pub fn next_record(&mut self) -> Option<ReplayedRecord> {
        if let Source::Collected(records, _) = &mut self.source {
            let next = records.next();
            self.ended = next.is_none();
            return next;
        }
        // Bounded: each turn takes a record off a chain (or ends), and the chains are finite.
        while !self.ended {
            let Some(replayed) = self.take_lowest() else {
                self.ended = true;
                break;
            };
            if replayed.seq < self.expected {
                continue; // released, or a duplicate of a retried batch
            }
            if replayed.seq > self.expected {
                self.ended = true;
                break;
            }
            self.expected += 1;
            if replayed.record.txg > self.after_txg {
                self.txg_max = self.txg_max.max(replayed.record.txg);
                return Some(replayed);
            }
        }
        None
    }

    /// The record with the lowest sequence number any chain has next (the earlier vdev's on a
    /// tie, as `replay`'s stable sort).
    fn take_lowest(&mut self) -> Option<ReplayedRecord> {
        let Source::Chains(chains) = &mut self.source else { return None };
        let mut lowest: Option<(u64, usize)> = None;
        for (i, chain) in chains.iter_mut().enumerate() {
            if let Some(seq) = chain.peek_seq() {
                if lowest.is_none_or(|(s, _)| seq < s) {
                    lowest = Some((seq, i));
                }
            }
        }
        lowest.and_then(|(_, i)| chains[i].records.pop_front())
    }

    /// How the replay ended; call once `next_record` has returned None.
    pub fn end(&self) -> ReplayEnd {
        debug_assert!(self.ended, "ReplayStream::end before the stream ended");
        if let Source::Collected(_, end) = &self.source {
            return *end;
        }
        ReplayEnd {
            start_seq: self.start_seq,
            end_seq: self.expected,
            gap_at_seq: (self.expected < self.next_seq).then_some(self.expected),
            txg_max: self.txg_max,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extent(first_seq: u64, record_count: u64) -> Extent {
        Extent {
            offset_bytes: 0,
            len_bytes: 4096,
            block_seq: 0,
            prev_chain: 0,
            header_checksum: 0,
            first_seq,
            record_count,
            txg_max: 1,
        }
    }

    #[test]
    fn sequence_order_is_each_block_after_the_one_before() {
        let chain =
            |v: &[(u64, u64)]| v.iter().map(|&(f, n)| extent(f, n)).collect::<VecDeque<_>>();
        assert!(in_sequence_order(&chain(&[])));
        assert!(
            in_sequence_order(&chain(&[(3, 2), (5, 1), (9, 4)])),
            "gaps between blocks are fine"
        );
        assert!(!in_sequence_order(&chain(&[(3, 2), (4, 1)])), "an overlap is not");
        assert!(!in_sequence_order(&chain(&[(5, 1), (3, 2)])), "nor a step back");
    }
}
