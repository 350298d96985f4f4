//! `import --rewind` (ZFS's `zpool import -F`): when the newest root (or several) does not verify,
//! the pool is claimed on top of the newest intact one and the damaged txgs are discarded. Their
//! keys stay taken, so the claim comes after the newest key; the epoch moves past every writer
//! that could have written them, so no segment id of theirs is ever reused. What it discarded and
//! what the log gave back is logged and written into the pool's history.

use crate::fence::RootScan;
use crate::pool::{history, Inner};
use crate::root::Root;

#[derive(Debug, Clone)]
pub(super) struct Rewind {
    /// The intact root the pool opens at.
    pub from_txg: u64,
    /// Damaged roots discarded (empty: a normal import).
    pub discarded: Vec<u64>,
    pub claim_txg: u64,
    pub claim_epoch: u64,
}

impl Rewind {
    pub fn plan(scan: &RootScan, latest: &Root) -> Rewind {
        // Each txg after the intact root may have been a new writer's claim (a new epoch), so the
        // epoch skips as many as there are root keys after it.
        let skipped = scan.newest_key_txg.saturating_sub(latest.txg);
        Rewind {
            from_txg: latest.txg,
            discarded: scan.damaged.clone(),
            claim_txg: scan.newest_key_txg.max(latest.txg) + 1,
            claim_epoch: latest.epoch + skipped + 1,
        }
    }

    /// Says what the rewind did, in the daemon's log and the pool's history.
    pub async fn report(&self, inner: &Inner, replayed_records: usize) {
        let (Some(first), Some(last)) = (self.discarded.first(), self.discarded.last()) else {
            return;
        };
        let event = format!(
            "import --rewind: opened at txg {}, discarded {} damaged root(s) (txg {first}-{last}); replayed {replayed_records} intent-log record(s) newer than txg {}",
            self.from_txg,
            self.discarded.len(),
            self.from_txg
        );
        tracing::warn!("{event}");
        history::record(inner, &event).await;
    }
}
