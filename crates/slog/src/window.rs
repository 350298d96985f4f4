//! A read-ahead window for walking a chain of log blocks.
//!
//! The writer places blocks one after another in the ring, so a walk of the chain (the scan of
//! each leg at open, the replay's read of every live block) asks for offsets that mostly follow
//! each other. Read one block at a time, that is one or two O_DIRECT reads per 4-8 KiB block,
//! each a device round trip: an import with 80,000 records of 4 KiB in its log (625 MiB) took
//! 42-51 s (`fardisk-bench log-replay`, release build). The window reads `WINDOW_BYTES` at a
//! time and serves the blocks inside it from memory: 5.4-5.8 s with the window alone.

use std::io;

use crate::aligned::AlignedBuf;
use crate::device::LogDevice;
use crate::layout::SECTOR_SIZE_BYTES;

/// How much one window read fetches: large enough that a walk runs at the device's sequential
/// speed, small enough to hold per leg being walked.
pub(crate) const WINDOW_BYTES: usize = 1 << 20;

/// The bytes of one device read, reused for the reads the walk asks for next.
pub(crate) struct ReadWindow {
    buf: AlignedBuf,
    /// Device offset of `buf[0]`.
    at_bytes: u64,
    /// How many bytes of `buf` hold the device's content (0: nothing yet).
    valid_bytes: usize,
    /// Never read at or past this offset (the ring's end).
    end_bytes: u64,
    /// Device reads made (for tests).
    device_reads: u64,
}

impl ReadWindow {
    /// A window (its `WINDOW_BYTES` buffer allocated now) that never reads at or past `end_bytes`.
    pub fn new(end_bytes: u64) -> ReadWindow {
        ReadWindow {
            buf: AlignedBuf::zeroed(WINDOW_BYTES),
            at_bytes: 0,
            valid_bytes: 0,
            end_bytes,
            device_reads: 0,
        }
    }

    /// Fills `out` with the device's bytes at `offset_bytes` (a sector multiple): from the
    /// window when it holds them, else from a new window read starting there. When that read
    /// fails, `out` alone is read, so an error past the block asked for is not the block's.
    pub fn read_at(
        &mut self,
        device: &dyn LogDevice,
        offset_bytes: u64,
        out: &mut [u8],
    ) -> io::Result<()> {
        let len = out.len() as u64;
        if offset_bytes >= self.at_bytes
            && offset_bytes + len <= self.at_bytes + self.valid_bytes as u64
        {
            let from = (offset_bytes - self.at_bytes) as usize;
            out.copy_from_slice(&self.buf[from..from + out.len()]);
            return Ok(());
        }
        self.valid_bytes = 0;
        let window_len = (WINDOW_BYTES as u64).min(self.end_bytes.saturating_sub(offset_bytes));
        let window_len = window_len / SECTOR_SIZE_BYTES * SECTOR_SIZE_BYTES;
        if window_len < len || !offset_bytes.is_multiple_of(SECTOR_SIZE_BYTES) {
            self.device_reads += 1;
            return device.read_at(offset_bytes, out);
        }
        self.device_reads += 1;
        match device.read_at(offset_bytes, &mut self.buf[..window_len as usize]) {
            Ok(()) => {
                self.at_bytes = offset_bytes;
                self.valid_bytes = window_len as usize;
                out.copy_from_slice(&self.buf[..out.len()]);
                Ok(())
            }
            Err(_) => {
                self.device_reads += 1;
                device.read_at(offset_bytes, out)
            }
        }
    }

    #[cfg(test)]
    pub fn device_reads(&self) -> u64 {
        self.device_reads
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::crash::CrashDevice;

    fn device_with_pattern(len: usize) -> CrashDevice {
        let dev = CrashDevice::new("leg", len as u64);
        let bytes: Vec<u8> = (0..len).map(|i| (i / 512 % 251) as u8).collect();
        dev.write_at(0, &bytes).expect("write");
        dev
    }

    #[test]
    fn consecutive_reads_are_served_from_one_device_read() {
        let dev = device_with_pattern(4 << 20);
        let mut w = ReadWindow::new(4 << 20);
        let mut off = 0u64;
        for i in 0..256u64 {
            let mut out = vec![0u8; if i % 2 == 0 { 4096 } else { 8192 }];
            w.read_at(&dev, off, &mut out).expect("read");
            let mut want = vec![0u8; out.len()];
            dev.read_at(off, &mut want).expect("read");
            assert_eq!(out, want, "bytes at {off}");
            off += out.len() as u64;
        }
        // 1.5 MiB in 4 and 8 KiB blocks: two window reads (the second starts at the block
        // that did not fit in the first), where block at a time made 256.
        assert_eq!(w.device_reads(), 2);
    }

    #[test]
    fn a_jump_or_the_ring_end_reads_again_and_never_past_the_end() {
        let end = (1 << 20) + 8192;
        let dev = device_with_pattern(2 << 20);
        let mut w = ReadWindow::new(end);
        let mut out = vec![0u8; 4096];
        w.read_at(&dev, 1 << 20, &mut out).expect("read near the end");
        let mut want = vec![0u8; 4096];
        dev.read_at(1 << 20, &mut want).expect("read");
        assert_eq!(out, want);
        // The ring start (a wrap): a new window read.
        w.read_at(&dev, 0, &mut out).expect("read at the start");
        dev.read_at(0, &mut want).expect("read");
        assert_eq!(out, want);
        assert_eq!(w.device_reads(), 2);
        // A read that would run past the ring's end is the device's answer alone.
        let mut big = vec![0u8; 16384];
        let _ = w.read_at(&dev, end - 8192, &mut big);
        assert_eq!(w.device_reads(), 3);
    }
}
