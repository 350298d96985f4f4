//! Fixed positions on every log device (leg). See docs/format/slog.md for the byte layout.
//!
//! ```text
//! offset 0      label copy A      (4 KiB)
//! offset 4096   label copy B      (4 KiB)
//! offset 8192   log head slot 0   (4 KiB)
//! offset 12288  log head slot 1   (4 KiB)
//! offset 16384  ring of log blocks, up to the label's ring_end_bytes
//! ```

/// The device I/O unit: every read and write is a whole number of these at an aligned offset.
pub const BLOCK_SIZE_BYTES: u64 = 4096;
/// Torn writes happen at this granularity on real devices (and in `CrashDevice`). It is also
/// the smallest write unit of a log block (format version 2): a device's atomic write unit
/// (its physical sector) is between this and `BLOCK_SIZE_BYTES`.
pub const SECTOR_SIZE_BYTES: u64 = 512;
/// The two label copies.
pub const LABEL_OFFSETS_BYTES: [u64; 2] = [0, 4096];
/// The two double-buffered log head slots.
pub const HEAD_SLOT_OFFSETS_BYTES: [u64; 2] = [8192, 12288];
/// First byte of the ring of log blocks.
pub const RING_START_BYTES: u64 = 16384;
/// Smallest ring accepted by `format`.
pub const RING_MIN_BYTES: u64 = 64 * 1024;
/// Size of a file created by `format` when the caller does not choose one.
pub const DEFAULT_FILE_SIZE_BYTES: u64 = 256 * 1024 * 1024;

/// Rounds up to a whole number of device units.
pub fn round_up_block(len_bytes: u64) -> u64 {
    len_bytes.div_ceil(BLOCK_SIZE_BYTES) * BLOCK_SIZE_BYTES
}

/// Rounds up to a whole number of `unit_bytes` (a power of two).
pub fn round_up_to(len_bytes: u64, unit_bytes: u64) -> u64 {
    debug_assert!(unit_bytes.is_power_of_two());
    len_bytes.div_ceil(unit_bytes) * unit_bytes
}

/// The write unit a device may use: its atomic write unit clamped to 512..=4096 bytes and a
/// power of two (anything else, or unknown, is the safe 4 KiB).
pub fn clamp_write_unit(unit_bytes: u64) -> u64 {
    if unit_bytes.is_power_of_two() && (SECTOR_SIZE_BYTES..=BLOCK_SIZE_BYTES).contains(&unit_bytes)
    {
        unit_bytes
    } else {
        BLOCK_SIZE_BYTES
    }
}

/// Rounds down to a whole number of device units.
pub fn round_down_block(len_bytes: u64) -> u64 {
    len_bytes / BLOCK_SIZE_BYTES * BLOCK_SIZE_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding() {
        assert_eq!(round_up_block(0), 0);
        assert_eq!(round_up_block(1), 4096);
        assert_eq!(round_up_block(4096), 4096);
        assert_eq!(round_down_block(8191), 4096);
        assert!(RING_START_BYTES >= HEAD_SLOT_OFFSETS_BYTES[1] + BLOCK_SIZE_BYTES);
        assert_eq!(round_up_to(4288, 512), 4608);
        assert_eq!(round_up_to(4288, 4096), 8192);
        assert_eq!(clamp_write_unit(512), 512);
        assert_eq!(clamp_write_unit(1024), 1024);
        assert_eq!(clamp_write_unit(0), 4096);
        assert_eq!(clamp_write_unit(8192), 4096);
        assert_eq!(clamp_write_unit(520), 4096);
    }
}
