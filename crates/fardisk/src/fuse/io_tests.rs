//! Unit tests of the byte-range layer against an in-memory device, including one that
//! refuses requests not aligned to 512 bytes (as a real device may).

use std::sync::Arc;

use bytes::Bytes;
use fardisk_nbd::{BlockDevice, DeviceError, Extent, MemDevice, PartsDevice, SectorDevice};

use super::*;

/// Deterministic xorshift so failures replay exactly.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Random writes, reads, punches and zeroings at odd offsets, checked against a plain
/// byte array after every step.
fn random_ops_match_model(device: &dyn BlockDevice, seed: u64) {
    let size = device.size_bytes();
    let gate = RmwGate::default();
    let mut model = vec![0u8; size as usize];
    let mut rng = Rng(seed);
    runtime().block_on(async {
        for step in 0..400 {
            let offset = rng.below(size + 64);
            let length = rng.below(9000) + 1;
            match rng.below(4) {
                0 | 1 => {
                    let data: Vec<u8> = (0..length).map(|_| rng.next() as u8).collect();
                    let result =
                        write_at(device, &gate, offset, Bytes::from(data.clone()), false).await;
                    if offset >= size {
                        assert!(matches!(result, Err(DeviceError::NoSpace(_))), "step {step}");
                        continue;
                    }
                    let written = result.expect("write") as u64;
                    assert_eq!(written, length.min(size - offset), "step {step}");
                    model[offset as usize..(offset + written) as usize]
                        .copy_from_slice(&data[..written as usize]);
                }
                2 => {
                    let got = read_at(device, offset, length as u32).await.expect("read");
                    let want_end = (offset + length).min(size);
                    let want = if offset >= size {
                        &[][..]
                    } else {
                        &model[offset as usize..want_end as usize]
                    };
                    assert_eq!(&got[..], want, "step {step} read {offset}+{length}");
                }
                _ => {
                    let op = if rng.below(2) == 0 {
                        FallocateOp::PunchHole
                    } else {
                        FallocateOp::ZeroRange { keep_size: true }
                    };
                    fallocate(device, &gate, op, offset, length).await.expect("fallocate");
                    let end = (offset + length).min(size);
                    if offset < end {
                        model[offset as usize..end as usize].fill(0);
                    }
                }
            }
        }
        let all = read_at(device, 0, size as u32).await.expect("read all");
        assert_eq!(&all[..], &model[..]);
    });
}

#[test]
fn byte_granular_device_matches_model() {
    let device = MemDevice::new(64 * 1024 + 123);
    random_ops_match_model(&device, 0x9e37_79b9_7f4a_7c15);
}

#[test]
fn sector_device_matches_model_through_read_modify_write() {
    let device = SectorDevice::new(64 * 1024);
    random_ops_match_model(&device, 0x2545_f491_4f6c_dd1d);
    // Every request reaching the device was aligned, or SectorDevice would have failed it.
}

#[test]
fn concurrent_unaligned_writes_into_one_sector_keep_every_byte() {
    let device = Arc::new(SectorDevice::new(4096));
    let gate = RmwGate::default();
    runtime().block_on(async {
        let mut tasks = Vec::new();
        for index in 0..64u64 {
            let device = device.clone();
            let gate = gate.clone();
            tasks.push(tokio::spawn(async move {
                let byte = Bytes::from(vec![index as u8 + 1; 3]);
                write_at(&*device, &gate, 100 + index * 3, byte, false).await.expect("write");
            }));
        }
        for task in tasks {
            task.await.expect("task");
        }
        let all = read_at(&*device, 0, 4096).await.expect("read");
        for index in 0..64usize {
            let at = 100 + index * 3;
            assert_eq!(&all[at..at + 3], &[index as u8 + 1; 3], "write {index} lost");
        }
    });
}

#[test]
fn fua_is_passed_through() {
    let device = MemDevice::new(8192);
    let gate = RmwGate::default();
    runtime().block_on(async {
        write_at(&device, &gate, 0, Bytes::from_static(b"abc"), true).await.expect("write");
        write_at(&device, &gate, 10, Bytes::from_static(b"abc"), false).await.expect("write");
    });
    assert_eq!(device.stats().fua_writes, 1);
    assert_eq!(device.stats().writes, 2);
}

#[test]
fn punch_hole_trims_and_zero_range_keeps_allocation() {
    let device = MemDevice::new(1 << 20);
    device.fill(0, &vec![0xaa; 1 << 20]).expect("fill");
    let gate = RmwGate::default();
    runtime().block_on(async {
        fallocate(&device, &gate, FallocateOp::PunchHole, 4096, 65536).await.expect("punch");
        fallocate(&device, &gate, FallocateOp::ZeroRange { keep_size: false }, 131072, 4096)
            .await
            .expect("zero");
        fallocate(&device, &gate, FallocateOp::Allocate { keep_size: false }, 0, 4096)
            .await
            .expect("alloc");
    });
    let stats = device.stats();
    assert_eq!(stats.trims, 1);
    assert_eq!(stats.write_zeroes_no_hole, 1);
    assert_eq!(device.allocated_pages(), 256 - 16, "punched pages are gone, zeroed ones stay");
    assert!(device.contents(4096, 65536).expect("contents").iter().all(|byte| *byte == 0));
    assert!(device.contents(131072, 4096).expect("contents").iter().all(|byte| *byte == 0));
    assert_eq!(device.contents(0, 4096).expect("contents"), vec![0xaa; 4096]);
}

#[test]
fn fallocate_cannot_grow_the_image() {
    let device = MemDevice::new(8192);
    let gate = RmwGate::default();
    runtime().block_on(async {
        let grow =
            fallocate(&device, &gate, FallocateOp::Allocate { keep_size: false }, 4096, 8192).await;
        assert!(matches!(grow, Err(Failure::Refused(errno)) if errno == Errno::EFBIG));
        let kept = fallocate(&device, &gate, FallocateOp::PunchHole, 4096, 1 << 30).await;
        assert!(kept.is_ok(), "KEEP_SIZE past the end is clipped");
    });
}

#[test]
fn fallocate_modes_parse() {
    let keep = libc::FALLOC_FL_KEEP_SIZE;
    assert_eq!(FallocateOp::parse(0), Ok(FallocateOp::Allocate { keep_size: false }));
    assert_eq!(FallocateOp::parse(keep), Ok(FallocateOp::Allocate { keep_size: true }));
    assert_eq!(FallocateOp::parse(libc::FALLOC_FL_PUNCH_HOLE | keep), Ok(FallocateOp::PunchHole));
    assert_eq!(FallocateOp::parse(libc::FALLOC_FL_PUNCH_HOLE), Err(Errno::EINVAL));
    assert_eq!(
        FallocateOp::parse(libc::FALLOC_FL_ZERO_RANGE),
        Ok(FallocateOp::ZeroRange { keep_size: false })
    );
    assert_eq!(FallocateOp::parse(libc::FALLOC_FL_COLLAPSE_RANGE), Err(Errno::EOPNOTSUPP));
    assert_eq!(FallocateOp::parse(libc::FALLOC_FL_INSERT_RANGE), Err(Errno::EOPNOTSUPP));
}

#[test]
fn short_device_read_is_an_error_not_a_hole() {
    struct Short(MemDevice);
    #[async_trait::async_trait]
    impl BlockDevice for Short {
        fn size_bytes(&self) -> u64 {
            self.0.size_bytes()
        }
        async fn read(&self, offset: u64, length: u32) -> Result<Bytes, DeviceError> {
            Ok(self.0.read(offset, length).await?.slice(..(length as usize) / 2))
        }
        async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), DeviceError> {
            self.0.write(offset, data, fua).await
        }
        async fn flush(&self) -> Result<(), DeviceError> {
            Ok(())
        }
        async fn trim(&self, offset: u64, length: u32) -> Result<(), DeviceError> {
            self.0.trim(offset, length).await
        }
        async fn write_zeroes(
            &self,
            offset: u64,
            length: u32,
            may_trim: bool,
            fua: bool,
        ) -> Result<(), DeviceError> {
            self.0.write_zeroes(offset, length, may_trim, fua).await
        }
        async fn cache(&self, _offset: u64, _length: u32) -> Result<(), DeviceError> {
            Ok(())
        }
        async fn block_status(&self, offset: u64, length: u32) -> Result<Vec<Extent>, DeviceError> {
            self.0.block_status(offset, length).await
        }
    }
    let device = Short(MemDevice::new(8192));
    let result = runtime().block_on(read_at(&device, 0, 4096));
    assert!(matches!(result, Err(DeviceError::Io(_))));
}

#[test]
fn reads_in_parts_match_the_model_and_keep_only_the_asked_bytes() {
    for part_bytes in [1, 777, 4096] {
        let device = PartsDevice::new(64 * 1024 + 123, part_bytes);
        random_ops_match_model(&device, 0x51_7cc1_b727_220a ^ part_bytes as u64);
        let parts = runtime().block_on(read_parts_at(&device, 1000, 5000)).expect("read");
        assert!(parts.iter().all(|p| !p.is_empty()), "no empty parts ({part_bytes})");
        assert_eq!(parts.iter().map(Bytes::len).sum::<usize>(), 5000, "{part_bytes}");
    }
}

#[test]
fn parts_that_come_short_are_an_error_not_a_hole() {
    let device = PartsDevice::new(16384, 4096);
    device.short_by_one_part.store(true, std::sync::atomic::Ordering::SeqCst);
    let result = runtime().block_on(read_parts_at(&device, 0, 8192));
    assert!(matches!(result, Err(DeviceError::Io(_))));
}
