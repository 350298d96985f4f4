//! The write history the simulation's actors produced, and the auditor's rule for a crash: what
//! the volumes hold after a crash and import must be the history applied up to some point, no
//! earlier than the last acknowledged sync. Anything else (a lost acknowledged write, a mix of
//! old and new, bytes nobody wrote) is a failure.

use std::collections::BTreeSet;

pub const BLOCK: u64 = 4096;

#[derive(Debug, Clone)]
pub enum Op {
    Write { vol: usize, offset: u64, data: Vec<u8> },
    Zero { vol: usize, offset: u64, len: u64 },
}

impl Op {
    fn apply(&self, images: &mut [Vec<u8>]) {
        match self {
            Op::Write { vol, offset, data } => {
                images[*vol][*offset as usize..*offset as usize + data.len()].copy_from_slice(data)
            }
            Op::Zero { vol, offset, len } => {
                images[*vol][*offset as usize..(*offset + *len) as usize].fill(0)
            }
        }
    }

    /// The (volume, block) pairs the op touches.
    fn blocks(&self) -> impl Iterator<Item = (usize, u64)> {
        let (vol, offset, len) = match self {
            Op::Write { vol, offset, data } => (*vol, *offset, data.len() as u64),
            Op::Zero { vol, offset, len } => (*vol, *offset, *len),
        };
        (offset / BLOCK..(offset + len).div_ceil(BLOCK)).map(move |b| (vol, b))
    }
}

/// What a crash cut away: `kept` ops after the last acknowledgement survived, `lost` did not
/// (none of them had been acknowledged).
#[derive(Debug, Clone, Copy)]
pub struct Cut {
    pub kept: usize,
    pub lost: usize,
}

pub struct History {
    /// The volumes as the acknowledged prefix left them.
    acked: Vec<Vec<u8>>,
    /// Ops after the acknowledged prefix, in the order the pool applied them.
    since_ack: Vec<Op>,
    /// `acked` with `since_ack` applied: what reads must return now.
    current: Vec<Vec<u8>>,
    pub ops_total: u64,
    pub acks: u64,
}

impl History {
    pub fn new(volume_bytes: &[u64]) -> History {
        let images: Vec<Vec<u8>> = volume_bytes.iter().map(|&b| vec![0u8; b as usize]).collect();
        History {
            acked: images.clone(),
            since_ack: Vec::new(),
            current: images,
            ops_total: 0,
            acks: 0,
        }
    }

    pub fn record(&mut self, op: Op) {
        op.apply(&mut self.current);
        self.since_ack.push(op);
        self.ops_total += 1;
    }

    /// How many ops were recorded: a sync that starts now covers this many.
    pub fn mark(&self) -> usize {
        self.since_ack.len()
    }

    /// A sync that started at `mark` returned: every op before it is acknowledged.
    pub fn ack_through(&mut self, mark: usize) {
        let mark = mark.min(self.since_ack.len());
        for op in self.since_ack.drain(..mark) {
            op.apply(&mut self.acked);
        }
        self.acks += 1;
    }

    pub fn current(&self, vol: usize) -> &[u8] {
        &self.current[vol]
    }

    /// After a crash and import the pool shows `got`: finds the longest prefix of the ops since
    /// the last acknowledgement that explains it, and adopts it as the new acknowledged state
    /// (what the pool has shown once must survive the next crash too).
    pub fn adopt_prefix(&mut self, got: &[Vec<u8>]) -> Result<Cut, String> {
        let mut candidate = self.acked.clone();
        let differs = |c: &[Vec<u8>], (v, b): (usize, u64)| {
            let r = (b * BLOCK) as usize..(((b + 1) * BLOCK) as usize).min(c[v].len());
            c[v][r.clone()] != got[v][r]
        };
        let mut mismatched: BTreeSet<(usize, u64)> = BTreeSet::new();
        for (v, image) in candidate.iter().enumerate() {
            for b in 0..(image.len() as u64).div_ceil(BLOCK) {
                if differs(&candidate, (v, b)) {
                    mismatched.insert((v, b));
                }
            }
        }
        let mut best = mismatched.is_empty().then_some(0);
        for (k, op) in self.since_ack.iter().enumerate() {
            op.apply(&mut candidate);
            for vb in op.blocks() {
                if differs(&candidate, vb) {
                    mismatched.insert(vb);
                } else {
                    mismatched.remove(&vb);
                }
            }
            if mismatched.is_empty() {
                best = Some(k + 1);
            }
        }
        let Some(kept) = best else {
            let (v, b) = self.first_difference(got);
            let r = (b * BLOCK) as usize..((b + 1) * BLOCK) as usize;
            let (want, read) = (&self.acked[v][r.clone()], &got[v][r]);
            let at = want.iter().zip(read).position(|(a, b)| a != b).unwrap_or(0);
            let differing = want.iter().zip(read).filter(|(a, b)| a != b).count();
            return Err(format!(
                "volume {v} block {b} matches no prefix of the history between the last acknowledged sync and the last write ({} ops in between): \
                 {differing} bytes differ from the acknowledged state, the first at byte {at} (read {}, acknowledged {}; the read block is {})",
                self.since_ack.len(),
                read[at],
                want[at],
                if read.iter().all(|&x| x == 0) { "all zeros" } else { "not zeros" }
            ));
        };
        let lost = self.since_ack.len() - kept;
        self.ack_through(kept);
        self.acks -= 1; // Not an acknowledgement by a caller.
        self.since_ack.clear();
        self.current = self.acked.clone();
        Ok(Cut { kept, lost })
    }

    /// The first block where `got` differs from the acknowledged state (for error messages).
    fn first_difference(&self, got: &[Vec<u8>]) -> (usize, u64) {
        for (v, image) in self.acked.iter().enumerate() {
            if let Some(pos) = image.iter().zip(&got[v]).position(|(a, b)| a != b) {
                return (v, pos as u64 / BLOCK);
            }
        }
        (0, 0)
    }

    /// A hash of the current images, for the replay fingerprint.
    pub fn digest(&self) -> u64 {
        self.current.iter().fold(0u64, |h, image| xxhash_rust::xxh3::xxh3_64_with_seed(image, h))
    }
}
