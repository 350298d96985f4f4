//! L2ARC configuration.

use super::error::L2Error;

/// Smallest log block: big enough for a header, a few entries and a 4 KiB block.
pub const LOG_BLOCK_BYTES_MIN: u32 = 8 << 10;
/// Largest log block; keeps every in-block offset well inside `u32`.
pub const LOG_BLOCK_BYTES_MAX: u32 = 64 << 20;
/// A device with more log blocks than this of the configured size gets larger log blocks at
/// format: the index names a log block in `log2(slots)` bits of each entry, so fewer slots leave
/// more bits to tell keys apart (docs/design/0005-l2arc-index.md). 64 Ki slots of 16 MiB is
/// 1 TiB.
pub const SLOTS_PER_DEVICE_TARGET: u64 = 1 << 16;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct L2ArcConfig {
    /// Size of one log block, the unit of the ring (a multiple of 4 KiB). The smallest size a
    /// device is formatted with: one with more than [`SLOTS_PER_DEVICE_TARGET`] blocks of this
    /// size gets the smallest power-of-two multiple that brings it down to that many (at most
    /// [`LOG_BLOCK_BYTES_MAX`]).
    pub log_block_bytes: u32,
    /// Cap on bytes taken from the eviction feed per second, as OpenZFS `l2arc_write_max`:
    /// cache devices wear out and their bandwidth belongs to reads.
    pub write_max_bytes_per_s: u64,
    /// A partly filled log block is written out after this long, so a slow trickle of
    /// evictions still reaches the device (and survives a restart).
    pub flush_interval_ms: u64,
    /// How often the writer checks that every device file is still the one it opened.
    pub health_check_interval_ms: u64,
}

impl Default for L2ArcConfig {
    fn default() -> Self {
        Self {
            log_block_bytes: 1 << 20,
            write_max_bytes_per_s: 32 << 20,
            flush_interval_ms: 1000,
            health_check_interval_ms: 1000,
        }
    }
}

impl L2ArcConfig {
    /// The log-block size a device of `capacity_bytes` is formatted with.
    pub fn log_block_bytes_for(&self, capacity_bytes: u64) -> u32 {
        let ring_bytes = capacity_bytes.saturating_sub(super::label::RING_OFFSET_BYTES);
        let mut block = self.log_block_bytes;
        // Bounded: the block doubles at most log2(MAX / MIN) times.
        while ring_bytes / u64::from(block) > SLOTS_PER_DEVICE_TARGET
            && block <= LOG_BLOCK_BYTES_MAX / 2
        {
            block *= 2;
        }
        block
    }

    pub(crate) fn validate(&self) -> Result<(), L2Error> {
        let block = self.log_block_bytes;
        if !(LOG_BLOCK_BYTES_MIN..=LOG_BLOCK_BYTES_MAX).contains(&block)
            || !block.is_multiple_of(4096)
        {
            return Err(L2Error::BadConfig(format!(
                "log_block_bytes {block} must be a multiple of 4096 in \
                 {LOG_BLOCK_BYTES_MIN}..={LOG_BLOCK_BYTES_MAX}"
            )));
        }
        if self.write_max_bytes_per_s == 0 {
            return Err(L2Error::BadConfig("write_max_bytes_per_s must be positive".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_devices_get_larger_log_blocks() {
        let c = L2ArcConfig::default();
        assert_eq!(c.log_block_bytes_for(512 << 20), 1 << 20);
        assert_eq!(c.log_block_bytes_for(64 << 30), 1 << 20);
        assert_eq!(c.log_block_bytes_for((64 << 30) + (8 << 20)), 2 << 20);
        assert_eq!(c.log_block_bytes_for(1 << 40), 16 << 20);
        assert_eq!(c.log_block_bytes_for(1 << 50), LOG_BLOCK_BYTES_MAX);
        let small = L2ArcConfig { log_block_bytes: 16 << 10, ..L2ArcConfig::default() };
        assert_eq!(small.log_block_bytes_for(640 << 10), 16 << 10);
    }
}
