//! A session against the real kernel, in both transports: mount with mount(2), INIT,
//! lookups, a listing, reads and writes of odd sizes checked against the backing file,
//! fsync, statfs, unmount; with io_uring, requests must really arrive through the rings.

mod common;

use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use common::{FileFs, TempDir, FILE_BYTES};
use fardisk_fuse::{mount, MountOptions, Session, SessionConfig, Transport};

fn exercise(uring: bool) {
    common::require_fuse();
    let dir = TempDir::new(if uring { "uring" } else { "dev" });
    let mnt = dir.0.join("mnt");
    std::fs::create_dir_all(&mnt).expect("mount point");
    let fs = Arc::new(FileFs::new(&dir.0.join("backing")));
    let device = mount::open_device().expect("open /dev/fuse");
    let options = MountOptions {
        fsname: "fardisk-test".into(),
        subtype: "fardisk-test".into(),
        ..MountOptions::default()
    };
    mount::mount_with_fd(device.as_fd(), &mnt, &options).expect("mount");
    let config = SessionConfig { uring, name: "t".into(), ..SessionConfig::default() };
    let session = Session::start(device, fs.clone(), config).expect("session");
    let stats = session.stats();
    if uring {
        assert_eq!(stats.transport, Transport::IoUring, "{}", stats.transport_reason);
        // What the rings hold, as status reports it: every entry's payload and header.
        let entry_bytes = (session.negotiated().ring_payload_bytes()
            + fardisk_fuse::abi::URING_HEADER_BYTES) as u64;
        let depth = SessionConfig::default().uring_queue_depth as u64;
        assert!(stats.uring_queues > 0);
        assert_eq!(stats.uring_buffer_bytes, stats.uring_queues as u64 * depth * entry_bytes);
    } else {
        assert_eq!((stats.uring_queues, stats.uring_buffer_bytes), (0, 0));
    }

    let names: Vec<String> = std::fs::read_dir(&mnt)
        .expect("readdir")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["data".to_owned()]);
    let file =
        std::fs::OpenOptions::new().read(true).write(true).open(mnt.join("data")).expect("open");
    assert_eq!(file.metadata().expect("stat").len(), FILE_BYTES);
    let mut state: u64 = 0x1234_5678;
    let mut model = vec![0u8; FILE_BYTES as usize];
    for step in 0..200 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let length = (state % 70_000) as usize + 1;
        let offset = (state >> 20) % (FILE_BYTES - length as u64);
        if step % 3 == 2 {
            let mut got = vec![0u8; length];
            file.read_exact_at(&mut got, offset).expect("read");
            assert!(
                got == model[offset as usize..offset as usize + length],
                "step {step}: read differs"
            );
        } else {
            let data: Vec<u8> = (0..length).map(|i| (i as u64 ^ state) as u8).collect();
            file.write_all_at(&data, offset).expect("write");
            model[offset as usize..offset as usize + length].copy_from_slice(&data);
        }
    }
    file.sync_all().expect("fsync");
    let mut on_disk = vec![0u8; FILE_BYTES as usize];
    fs.backing.read_exact_at(&mut on_disk, 0).expect("backing");
    assert!(on_disk == model, "the backing file holds what was written");
    drop(file);
    let stats = session.stats();
    if uring {
        assert!(stats.requests_uring > 100, "requests went through io_uring: {stats:?}");
    } else {
        assert_eq!(stats.requests_uring, 0);
        assert!(stats.requests_device > 100, "{stats:?}");
    }
    assert_eq!(stats.malformed_requests, 0);
    mount::unmount(&mnt, false).expect("unmount");
    session.join();
}

#[test]
fn dev_fuse_transport_serves_a_mount() {
    exercise(false);
}

#[test]
fn io_uring_transport_serves_a_mount() {
    if let Some(reason) = common::uring_unavailable() {
        println!("SKIPPED io_uring_transport_serves_a_mount: {reason}");
        return;
    }
    exercise(true);
}
