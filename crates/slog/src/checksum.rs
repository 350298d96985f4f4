//! Checksums used by every on-disk structure of the log.
//!
//! xxh3-64 is used throughout: it is fast enough to run on every record of every commit and
//! 64 bits make an accidental match between a stale block and the expected chain value
//! negligible. The chain function seeds the hash of a record header with the previous
//! record's checksum, so a record is valid only in the exact position it was written (ZIL's
//! sequence-numbered checksum chain).

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// Plain checksum of a byte range (the checksum of every fardisk structure).
pub(crate) use fardisk_common::le::checksum64;

/// Checksum of `bytes` chained from the previous link of the chain.
pub(crate) fn chained64(bytes: &[u8], prev_chain: u64) -> u64 {
    xxh3_64_with_seed(bytes, prev_chain)
}

/// The first link of a vdev's chain. It depends on the pool, the vdev, the writer epoch and
/// the head generation of the reset that started the chain, so blocks left over from an
/// earlier life of the device never chain onto a fresh log.
pub(crate) fn chain_seed(pool_guid: u128, vdev_guid: u64, epoch: u64, generation: u64) -> u64 {
    let mut bytes = [0u8; 56];
    bytes[..16].copy_from_slice(b"fardisk-slog-seq");
    bytes[16..32].copy_from_slice(&pool_guid.to_le_bytes());
    bytes[32..40].copy_from_slice(&vdev_guid.to_le_bytes());
    bytes[40..48].copy_from_slice(&epoch.to_le_bytes());
    bytes[48..56].copy_from_slice(&generation.to_le_bytes());
    xxh3_64(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_depends_on_previous_link() {
        let a = chained64(b"record", 1);
        let b = chained64(b"record", 2);
        assert_ne!(a, b);
        assert_eq!(a, chained64(b"record", 1));
    }

    #[test]
    fn seed_differs_per_vdev_and_epoch() {
        let base = chain_seed(7, 1, 1, 1);
        assert_ne!(base, chain_seed(7, 2, 1, 1));
        assert_ne!(base, chain_seed(7, 1, 2, 1));
        assert_ne!(base, chain_seed(7, 1, 1, 2));
        assert_ne!(base, chain_seed(8, 1, 1, 1));
    }
}
