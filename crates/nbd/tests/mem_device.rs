//! MemDevice: the in-memory sparse device the other tests rely on.

use bytes::Bytes;
use fardisk_nbd::{BlockDevice, DeviceError, Extent, MemDevice};

fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread().build().expect("runtime").block_on(future)
}

fn extent(length_bytes: u64, hole: bool, zero: bool) -> Extent {
    Extent { length_bytes, hole, zero }
}

#[test]
fn unaligned_writes_read_back_and_holes_read_zero() {
    let device = MemDevice::new(100_000); // not a page multiple
    block_on(async {
        device.write(4000, Bytes::from(vec![7u8; 5000]), false).await.expect("write");
        let data = device.read(3990, 5020).await.expect("read");
        assert_eq!(&data[..10], &[0; 10]);
        assert_eq!(&data[10..5010], &[7; 5000][..]);
        assert_eq!(&data[5010..], &[0; 10]);
        // The last partial page is addressable up to the exact size.
        device.write(99_990, Bytes::from(vec![1u8; 10]), false).await.expect("write tail");
        assert!(device.read(99_995, 10).await.is_err(), "read past the end accepted");
    });
    assert_eq!(device.allocated_pages(), 3 + 1);
}

#[test]
fn block_status_merges_runs_and_distinguishes_zero_pages() {
    let device = MemDevice::new(64 * 4096);
    block_on(async {
        device.write(4096, Bytes::from(vec![1u8; 8192]), false).await.expect("write");
        device.write_zeroes(5 * 4096, 8192, false, false).await.expect("zero no-hole");
        let extents = device.block_status(0, 64 * 4096).await.expect("status");
        assert_eq!(
            extents,
            vec![
                extent(4096, true, true),
                extent(8192, false, false),
                extent(8192, true, true),
                extent(8192, false, true),
                extent(64 * 4096 - 7 * 4096, true, true),
            ]
        );
        // Starting mid-page reports from the exact offset.
        let extents = device.block_status(6000, 100).await.expect("status");
        assert_eq!(extents, vec![extent(100, false, false)]);
    });
}

#[test]
fn trim_removes_whole_pages_and_zeroes_partial_ones() {
    let device = MemDevice::new(16 * 4096);
    block_on(async {
        device.write(0, Bytes::from(vec![9u8; 4 * 4096]), false).await.expect("write");
        device.trim(2048, 2 * 4096).await.expect("trim");
        let data = device.read(0, 4 * 4096).await.expect("read");
        assert!(data[..2048].iter().all(|b| *b == 9));
        assert!(data[2048..2048 + 2 * 4096].iter().all(|b| *b == 0));
        assert!(data[2048 + 2 * 4096..].iter().all(|b| *b == 9));
    });
    // Page 1 was wholly inside the trim; pages 0 and 2 only partly.
    assert_eq!(device.allocated_pages(), 3);
    assert_eq!(device.stats().trims, 1);
}

#[test]
fn page_limit_gives_no_space_without_partial_writes() {
    let device = MemDevice::new(16 * 4096).with_page_limit(2);
    block_on(async {
        let error =
            device.write(0, Bytes::from(vec![1u8; 3 * 4096]), false).await.expect_err("over limit");
        assert!(matches!(error, DeviceError::NoSpace(_)), "{error:?}");
        assert_eq!(error.nbd_errno(), 28);
        device.write(0, Bytes::from(vec![1u8; 2 * 4096]), false).await.expect("within limit");
        // Overwriting allocated pages needs no new space.
        device.write(0, Bytes::from(vec![2u8; 2 * 4096]), true).await.expect("overwrite");
    });
    assert_eq!(device.allocated_pages(), 2);
    assert_eq!(device.stats().fua_writes, 1);
}

#[test]
fn read_only_device_refuses_changes() {
    let device = MemDevice::new(4096).with_read_only(true);
    block_on(async {
        let error = device.write(0, Bytes::from_static(b"x"), false).await.expect_err("read-only");
        assert_eq!(error.nbd_errno(), 1);
        assert!(device.trim(0, 4096).await.is_err());
        assert!(device.write_zeroes(0, 4096, true, false).await.is_err());
        assert_eq!(device.read(0, 4096).await.expect("read").len(), 4096);
    });
}

#[test]
fn error_kinds_map_to_nbd_errnos() {
    let cases = [
        (DeviceError::Io("x".into()), 5),
        (DeviceError::InvalidArgument("x".into()), 22),
        (DeviceError::NoSpace("x".into()), 28),
        (DeviceError::ReadOnly, 1),
        (DeviceError::NotSupported("x".into()), 95),
        (DeviceError::Shutdown, 108),
    ];
    for (error, errno) in cases {
        assert_eq!(error.nbd_errno(), errno, "{error}");
    }
}
