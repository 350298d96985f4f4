//! fallocate(2) on an image: punch hole reaches trim, zero range reaches write_zeroes
//! (keeping the allocation), plain allocation is accepted, the rest is refused.
//! Real kernel; needs root and /dev/fuse.

mod fuse_support;

use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;

use fardisk::fuse::FuseOptions;
use fuse_support::{open_rw, Mounted};

const MIB: u64 = 1 << 20;

fn fallocate(file: &std::fs::File, mode: i32, offset: u64, length: u64) -> std::io::Result<()> {
    // SAFETY: plain syscall on an open fd.
    let rc = unsafe {
        libc::fallocate(file.as_raw_fd(), mode, offset as libc::off_t, length as libc::off_t)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[test]
fn punch_hole_reaches_trim_and_reads_back_zeroes() {
    for direct_io in [true, false] {
        let options = FuseOptions { direct_io, ..FuseOptions::default() };
        let (mounted, device) = Mounted::with_mem_volume("punch", "vol", MIB, options);
        let file = open_rw(&mounted.image("vol"), 0);
        file.write_all_at(&vec![0xab; MIB as usize], 0).expect("fill");
        file.sync_all().expect("fsync");
        let pages_before = device.allocated_pages();
        let trims_before = device.stats().trims;
        let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // An unaligned range: whole pages are trimmed, the edges zeroed in place.
        fallocate(&file, punch, 4096 + 100, 64 * 1024).expect("punch hole");
        assert!(
            device.stats().trims > trims_before,
            "direct_io={direct_io}: punch hole did not trim"
        );
        assert!(device.allocated_pages() < pages_before, "trimmed pages are released");
        let mut buf = vec![1u8; 64 * 1024];
        file.read_exact_at(&mut buf, 4096 + 100).expect("read");
        assert!(
            buf.iter().all(|byte| *byte == 0),
            "direct_io={direct_io}: punched range reads as zeroes"
        );
        let mut edge = [0u8; 2];
        file.read_exact_at(&mut edge, 4096 + 99).expect("read");
        assert_eq!(edge, [0xab, 0], "the byte before the hole is untouched");
        file.read_exact_at(&mut edge, 4096 + 100 + 64 * 1024 - 1).expect("read");
        assert_eq!(edge, [0, 0xab], "the byte after the hole is untouched");
        assert_eq!(std::fs::metadata(mounted.image("vol")).expect("stat").len(), MIB, "size kept");
    }
}

#[test]
fn zero_range_reaches_write_zeroes_keeping_allocation() {
    let (mounted, device) = Mounted::with_mem_volume("zero", "vol", MIB, FuseOptions::default());
    let file = open_rw(&mounted.image("vol"), 0);
    file.write_all_at(&vec![0xcd; 256 * 1024], 0).expect("fill");
    let pages_before = device.allocated_pages();
    fallocate(&file, libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE, 8192, 65536)
        .expect("zero range");
    assert_eq!(device.stats().write_zeroes_no_hole, 1);
    assert_eq!(device.allocated_pages(), pages_before, "zero range keeps the space allocated");
    assert!(device.contents(8192, 65536).expect("contents").iter().all(|byte| *byte == 0));
    assert_eq!(device.contents(0, 8192).expect("contents"), vec![0xcd; 8192]);
}

#[test]
fn plain_allocation_is_accepted_and_the_rest_refused() {
    let (mounted, device) = Mounted::with_mem_volume("alloc", "vol", MIB, FuseOptions::default());
    let file = open_rw(&mounted.image("vol"), 0);
    let before = device.stats();
    fallocate(&file, 0, 0, MIB).expect("posix_fallocate inside the volume");
    fallocate(&file, libc::FALLOC_FL_KEEP_SIZE, MIB / 2, 4 * MIB)
        .expect("keep-size allocation past the end");
    assert_eq!(device.stats(), before, "allocation needs no device call");
    let grow = fallocate(&file, 0, MIB / 2, MIB).expect_err("cannot grow a volume image");
    assert_eq!(grow.raw_os_error(), Some(libc::EFBIG));
    let collapse = fallocate(&file, libc::FALLOC_FL_COLLAPSE_RANGE, 0, 4096).expect_err("collapse");
    assert_eq!(collapse.raw_os_error(), Some(libc::EOPNOTSUPP));
    assert_eq!(std::fs::metadata(mounted.image("vol")).expect("stat").len(), MIB);
}
