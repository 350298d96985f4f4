//! qemu-io / qemu-img (qemu-utils) and nbdcopy (libnbd-bin) against the in-process
//! server: data written through NBD reads back, and copying a sparse image keeps its
//! holes.

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use common::*;
use fardisk_nbd::ServerConfig;

const MIB: u64 = 1 << 20;
const PAGE_BYTES: u64 = 4096;

/// A 64 MiB sparse raw image with 64 KiB of data at 0 and at 32 MiB.
fn sparse_image(path: &Path) -> Vec<(u64, Vec<u8>)> {
    let mut file = std::fs::File::create(path).expect("create image");
    file.set_len(64 * MIB).expect("size image");
    let regions: Vec<(u64, Vec<u8>)> = vec![
        (0, (0..65536u32).map(|i| (i % 251) as u8 | 1).collect()),
        (32 * MIB, vec![0x5a; 65536]),
    ];
    for (offset, data) in &regions {
        file.seek(SeekFrom::Start(*offset)).expect("seek");
        file.write_all(data).expect("write image");
    }
    file.sync_all().expect("sync image");
    regions
}

#[test]
fn qemu_io_write_then_read_pattern() {
    let qemu_io = require_tool("qemu-io", "qemu-utils");
    let (device, exports) = mem_export(16 * MIB);
    let server = TestServer::start(exports, ServerConfig::default());
    let uri = server.uri("vol");
    run_ok(
        &qemu_io,
        &[
            "-f",
            "raw",
            "-c",
            "write -P 0xab 0 1M",
            "-c",
            "write -P 0xcd 4M 64k",
            "-c",
            "read -P 0xab 0 1M",
            &uri,
        ],
    );
    assert_eq!(device.contents(0, MIB).expect("contents"), vec![0xab; MIB as usize]);
    assert_eq!(device.contents(4 * MIB, 65536).expect("contents"), vec![0xcd; 65536]);
    assert_eq!(device.contents(MIB, 4096).expect("contents"), vec![0; 4096]);

    // A wrong expected pattern must be detected: proves the read path returns data.
    let output = run(&qemu_io, &["-f", "raw", "-c", "read -P 0x11 0 64k", &uri]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("Pattern verification failed"), "stdout: {stdout}");
}

#[test]
fn qemu_io_flush_fua_discard_and_zero() {
    let qemu_io = require_tool("qemu-io", "qemu-utils");
    let (device, exports) = mem_export(16 * MIB);
    let server = TestServer::start(exports, ServerConfig::default());
    let uri = server.uri("vol");
    run_ok(
        &qemu_io,
        &[
            "-f",
            "raw",
            "-c",
            "write -P 0x77 0 2M",
            "-c",
            "write -f -P 0x66 8M 4k",
            "-c",
            "flush",
            "-c",
            "discard 0 1M",
            "-c",
            "write -z -u 1M 512k",
            "-c",
            "read -P 0 0 1536k",
            "-c",
            "read -P 0x77 1536k 512k",
            &uri,
        ],
    );
    let stats = device.stats();
    assert!(stats.flushes >= 1, "flush did not reach the device: {stats:?}");
    assert!(stats.fua_writes >= 1, "FUA write did not reach the device: {stats:?}");
    assert!(stats.trims >= 1, "discard did not reach the device: {stats:?}");
    assert!(stats.write_zeroes >= 1, "write -z did not reach the device: {stats:?}");
    // Discard and unmapping zero punched holes: only 1.5M..2M and the 4k at 8M remain.
    assert_eq!(device.allocated_pages(), (512 * 1024 + 4096) / PAGE_BYTES);
    assert_eq!(device.contents(8 * MIB, 4096).expect("contents"), vec![0x66; 4096]);
}

#[test]
fn qemu_img_convert_keeps_holes() {
    let qemu_img = require_tool("qemu-img", "qemu-utils");
    let (device, exports) = mem_export(64 * MIB);
    let server = TestServer::start(exports, ServerConfig::default());
    let image = server.dir.path().join("sparse.raw");
    let regions = sparse_image(&image);
    let uri = server.uri("vol");
    let image_arg = image.to_str().expect("utf-8 path");
    run_ok(&qemu_img, &["convert", "-n", "-f", "raw", "-O", "raw", image_arg, &uri]);
    for (offset, data) in &regions {
        assert_eq!(&device.contents(*offset, data.len() as u64).expect("contents"), data);
    }
    let data_pages = regions.iter().map(|(_, data)| data.len() as u64 / PAGE_BYTES).sum::<u64>();
    assert_eq!(device.allocated_pages(), data_pages, "holes were filled in");
    run_ok(&qemu_img, &["compare", "-f", "raw", "-F", "raw", image_arg, &uri]);

    // And back: the copy out of NBD is identical, found through block status.
    let copy = server.dir.path().join("copy.raw");
    let copy_arg = copy.to_str().expect("utf-8 path");
    run_ok(&qemu_img, &["convert", "-f", "raw", "-O", "raw", &uri, copy_arg]);
    assert_eq!(
        std::fs::read(&copy).expect("read copy"),
        std::fs::read(&image).expect("read image")
    );
}

#[test]
fn nbdcopy_round_trip_keeps_holes() {
    let nbdcopy = require_tool("nbdcopy", "libnbd-bin");
    let (device, exports) = mem_export(64 * MIB);
    let server = TestServer::start(exports, ServerConfig::default());
    let image = server.dir.path().join("sparse.raw");
    let regions = sparse_image(&image);
    let uri = server.uri("vol");
    let image_arg = image.to_str().expect("utf-8 path");
    run_ok(&nbdcopy, &[image_arg, &uri]);
    let data_pages = regions.iter().map(|(_, data)| data.len() as u64 / PAGE_BYTES).sum::<u64>();
    assert_eq!(device.allocated_pages(), data_pages, "nbdcopy filled holes");

    let copy = server.dir.path().join("copy.raw");
    let copy_arg = copy.to_str().expect("utf-8 path");
    run_ok(&nbdcopy, &["--connections=2", &uri, copy_arg]);
    assert_eq!(
        std::fs::read(&copy).expect("read copy"),
        std::fs::read(&image).expect("read image")
    );
}
