//! L2ARC configuration.

use super::error::L2Error;

/// Smallest log block: big enough for a header, a few entries and a 4 KiB block.
pub const LOG_BLOCK_BYTES_MIN: u32 = 8 << 10;
/// Largest log block; keeps every in-block offset well inside `u32`.
pub const LOG_BLOCK_BYTES_MAX: u32 = 16 << 20;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct L2ArcConfig {
    /// Size of one log block, the unit of the ring (a multiple of 4 KiB).
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
