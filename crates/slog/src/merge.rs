//! Merging the chains of all log vdevs into one replayable history.
//!
//! Each commit batch went to one vdev; the global sequence number orders them. Replay must
//! return a prefix of the commit order, so the merge starts at the release point (every
//! lower sequence number was already released) and stops at the first sequence number no
//! vdev holds. Records of an older writer epoch at or beyond the first sequence number a
//! newer epoch handed out are stale leftovers of a history that was cut at a gap, and are
//! discarded (see docs/format/slog.md, "epochs").

/// What the merge needs to know of one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BlockSummary {
    pub first_seq: u64,
    pub record_count: u64,
    pub release_seq: u64,
    pub writer_epoch: u64,
    pub epoch_first_seq: u64,
}

/// What the merge needs to know of one head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HeadSummary {
    pub release_seq: u64,
    pub writer_epoch: u64,
    pub epoch_first_seq: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MergePlan {
    /// Every record below this sequence number is released.
    pub release_seq: u64,
    /// First sequence number not part of the replayable prefix.
    pub next_seq: u64,
    /// Per vdev, how many chain blocks stay (the rest is cut).
    pub keep_blocks: Vec<usize>,
    pub max_epoch: u64,
    /// Set when the merge stopped because a sequence number was missing.
    pub gap_at_seq: Option<u64>,
}

impl BlockSummary {
    fn last_seq(&self) -> Option<u64> {
        (self.record_count > 0).then(|| self.first_seq + self.record_count - 1)
    }
}

/// Where each writer epoch began handing out sequence numbers, as every head and block tells
/// it: for "did a newer epoch start at or before this block's last record?", asked once per
/// block. Asking it of every (epoch, first) pair instead made the merge quadratic in the
/// number of blocks: 1.7 s of an 80,000-block log's open (`fardisk-bench log-replay`).
struct EpochStarts {
    /// (epoch, the lowest first sequence number any newer-or-equal epoch gave), by epoch.
    min_first_from: Vec<(u64, u64)>,
}

impl EpochStarts {
    fn new(pairs: impl Iterator<Item = (u64, u64)>) -> EpochStarts {
        let mut by_epoch = std::collections::BTreeMap::<u64, u64>::new();
        for (epoch, first) in pairs {
            let min = by_epoch.entry(epoch).or_insert(first);
            *min = (*min).min(first);
        }
        let mut min_first_from: Vec<(u64, u64)> = by_epoch.into_iter().collect();
        for i in (0..min_first_from.len().saturating_sub(1)).rev() {
            min_first_from[i].1 = min_first_from[i].1.min(min_first_from[i + 1].1);
        }
        EpochStarts { min_first_from }
    }

    fn max_epoch(&self) -> u64 {
        self.min_first_from.last().map_or(0, |e| e.0)
    }

    /// The lowest first sequence number of any epoch newer than `epoch` (u64::MAX: none).
    fn first_seq_after(&self, epoch: u64) -> u64 {
        let i = self.min_first_from.partition_point(|e| e.0 <= epoch);
        self.min_first_from.get(i).map_or(u64::MAX, |e| e.1)
    }
}

/// Plans the merge of per-vdev chains (each in chain order).
pub(crate) fn plan(chains: &[Vec<BlockSummary>], heads: &[HeadSummary]) -> MergePlan {
    let blocks = || chains.iter().flatten();
    let release_seq = heads
        .iter()
        .map(|h| h.release_seq)
        .chain(blocks().map(|b| b.release_seq))
        .max()
        .unwrap_or(0);
    let epochs = EpochStarts::new(
        heads
            .iter()
            .map(|h| (h.writer_epoch, h.epoch_first_seq))
            .chain(blocks().map(|b| (b.writer_epoch, b.epoch_first_seq))),
    );
    let max_epoch = epochs.max_epoch();
    let superseded = |b: &BlockSummary| {
        b.last_seq().is_some_and(|last| epochs.first_seq_after(b.writer_epoch) <= last)
    };
    let mut keep_blocks: Vec<usize> = chains
        .iter()
        .map(|chain| chain.iter().position(superseded).unwrap_or(chain.len()))
        .collect();

    let mut ranges: Vec<(u64, u64)> = chains
        .iter()
        .zip(&keep_blocks)
        .flat_map(|(chain, &keep)| {
            chain[..keep].iter().filter_map(|b| b.last_seq().map(|last| (b.first_seq, last)))
        })
        .collect();
    ranges.sort_unstable();
    let mut next_seq = release_seq;
    let mut gap_at_seq = None;
    for (first, last) in ranges {
        if last < next_seq {
            continue; // released, or a duplicate of a batch retried on another vdev
        }
        if first > next_seq {
            gap_at_seq = Some(next_seq);
            break;
        }
        next_seq = last + 1;
    }
    for (chain, keep) in chains.iter().zip(keep_blocks.iter_mut()) {
        let beyond =
            chain[..*keep].iter().position(|b| b.last_seq().is_some_and(|last| last >= next_seq));
        if let Some(cut) = beyond {
            *keep = cut;
        }
    }
    MergePlan { release_seq, next_seq, keep_blocks, max_epoch, gap_at_seq }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(first: u64, count: u64, epoch: u64) -> BlockSummary {
        BlockSummary {
            first_seq: first,
            record_count: count,
            release_seq: 0,
            writer_epoch: epoch,
            epoch_first_seq: 0,
        }
    }

    #[test]
    fn interleaved_vdevs_merge_to_one_prefix() {
        let a = vec![block(0, 2, 1), block(4, 1, 1)];
        let b = vec![block(2, 2, 1), block(5, 3, 1)];
        let plan = plan(&[a, b], &[]);
        assert_eq!(plan.next_seq, 8);
        assert_eq!(plan.keep_blocks, vec![2, 2]);
        assert_eq!(plan.gap_at_seq, None);
    }

    #[test]
    fn gap_cuts_every_later_block() {
        // seq 4 was on a vdev that is gone: 5.. must not be replayed nor kept.
        let a = vec![block(0, 2, 1), block(5, 1, 1)];
        let b = vec![block(2, 2, 1), block(6, 2, 1)];
        let plan = plan(&[a, b], &[]);
        assert_eq!(plan.next_seq, 4);
        assert_eq!(plan.gap_at_seq, Some(4));
        assert_eq!(plan.keep_blocks, vec![1, 1]);
    }

    #[test]
    fn release_point_skips_released_history_and_duplicates() {
        let mut a0 = block(0, 3, 1);
        a0.release_seq = 0;
        let mut a1 = block(3, 2, 1);
        a1.release_seq = 3;
        let retried = block(3, 2, 1);
        let plan = plan(&[vec![a0, a1], vec![retried]], &[]);
        assert_eq!(plan.release_seq, 3);
        assert_eq!(plan.next_seq, 5);
        assert_eq!(plan.keep_blocks, vec![2, 1]);
    }

    #[test]
    fn older_epoch_leftovers_are_superseded() {
        // Epoch 2 started handing out sequence numbers at 10 after a gap; a vdev that was
        // absent then still carries epoch-1 records 10..13.
        let stale = vec![block(8, 2, 1), block(10, 4, 1)];
        let mut fresh_block = block(10, 1, 2);
        fresh_block.epoch_first_seq = 10;
        let head = HeadSummary { release_seq: 8, writer_epoch: 1, epoch_first_seq: 0 };
        let plan = plan(&[stale, vec![fresh_block]], &[head]);
        assert_eq!(plan.keep_blocks, vec![1, 1]);
        assert_eq!(plan.next_seq, 11);
        assert_eq!(plan.max_epoch, 2);
    }

    #[test]
    fn epoch_starts_answer_as_the_pairwise_definition() {
        let rng = crate::rng::Rng::new(5);
        for _ in 0..500 {
            let pairs: Vec<(u64, u64)> =
                (0..rng.below(12)).map(|_| (rng.below(6), rng.below(40))).collect();
            let starts = EpochStarts::new(pairs.iter().copied());
            assert_eq!(starts.max_epoch(), pairs.iter().map(|p| p.0).max().unwrap_or(0));
            for epoch in 0..7 {
                for last in 0..42 {
                    let pairwise = pairs.iter().any(|&(e, first)| e > epoch && first <= last);
                    assert_eq!(
                        starts.first_seq_after(epoch) <= last,
                        pairwise,
                        "{pairs:?} {epoch} {last}"
                    );
                }
            }
        }
    }

    #[test]
    fn missing_start_means_nothing_replays() {
        let head = HeadSummary { release_seq: 10, writer_epoch: 1, epoch_first_seq: 0 };
        let plan = plan(&[vec![block(12, 2, 1)]], &[head]);
        assert_eq!(plan.next_seq, 10);
        assert_eq!(plan.gap_at_seq, Some(10));
        assert_eq!(plan.keep_blocks, vec![0]);
    }
}
