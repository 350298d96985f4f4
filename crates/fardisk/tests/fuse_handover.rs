//! An engine stopping for an upgrade pauses its FUSE mount for the handover; if its export
//! then fails, it leaves with requests still running. Those must not be answered EIO (a
//! database takes an EIO on fsync for lost data and stops): the holder keeps the connection
//! and the next engine gets them resent. Here the test is the holder (it opens and mounts
//! /dev/fuse and keeps the file open) and serves the engine's side in-process through
//! `mount_held`: an fsync waits in the device's flush, the mount is paused and drained (the
//! drain gives up), then the mount is forgotten and the runtime dropped — what
//! `daemon::serve` did when an upgrade's export failed and it returned the error — and the
//! fsync must still be waiting. (That it is then resent to a new engine is the FUSE crate's
//! `handover_drop` test.) Real kernel; needs root and /dev/fuse.

// Real time is the point here: a real kernel connection, waited on with bounds.
#![allow(clippy::disallowed_methods)]

mod fuse_support;
// The FUSE crate's takeover tests' guard (std and `fardisk_fuse` only).
#[path = "../../fuse/tests/common/abort.rs"]
mod abort;

use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use abort::AbortOnDrop;
use fardisk::fuse::{image_mount_options, mount_held, FuseOptions, HeldConnection};
use fuse_support::devices::GatedDevice;
use fuse_support::{open_rw, require_fuse, TempDir, TestProvider};

const MIB: u64 = 1 << 20;
const WAIT: Duration = Duration::from_secs(20);

#[test]
fn a_request_running_when_a_handover_fails_is_not_answered_eio() {
    require_fuse();
    let dir = TempDir::new("handover");
    // The holder's connection: opened and mounted here, kept open to the end.
    let holder_device = fardisk_fuse::mount::open_device().expect("open /dev/fuse");
    fardisk_fuse::mount::mount_with_fd(
        holder_device.as_fd(),
        &dir.path,
        &image_mount_options(false),
    )
    .expect("mount");
    let abort = AbortOnDrop::new(&dir.path);

    let provider = Arc::new(TestProvider::default());
    let device = Arc::new(GatedDevice::new(MIB));
    provider.add("vol", device.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let held = HeldConnection {
        device: holder_device.try_clone().expect("dup the holder's file"),
        negotiated: None,
        unmount: Box::new(|| Ok(())),
    };
    let mount =
        mount_held(&dir.path, provider, runtime.handle().clone(), FuseOptions::default(), held)
            .expect("serve the held connection");

    let image = dir.path.join("vol");
    let syncer = std::thread::spawn(move || {
        let file = open_rw(&image, 0);
        file.write_all_at(b"x", 0).expect("write");
        file.sync_all()
    });
    let deadline = Instant::now() + WAIT;
    while device.flushes_started.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "fsync never reached flush()");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The upgrade: pause and drain, which gives up on the fsync that still waits.
    assert!(!mount.pause_and_drain(Duration::from_millis(100)), "the fsync still runs");
    // The export failed: the engine returned, its mount not dropped (that would unmount)
    // and its runtime dropped with the fsync's task.
    std::mem::forget(mount);
    drop(runtime);
    std::thread::sleep(Duration::from_millis(300));
    if syncer.is_finished() {
        let result = syncer.join().expect("syncer thread");
        panic!("the fsync running at the handover was answered ({result:?}) instead of left in the kernel for the next engine");
    }

    // Nothing will answer it here: end the connection, which ends the fsync too.
    drop(abort);
    let deadline = Instant::now() + WAIT;
    while !syncer.is_finished() {
        assert!(Instant::now() < deadline, "the fsync outlived the connection");
        std::thread::sleep(Duration::from_millis(20));
    }
    let result = syncer.join().expect("syncer thread");
    assert!(result.is_err(), "the aborted connection ends the fsync with an error");
    assert_eq!(device.flushes_finished.load(Ordering::SeqCst), 0);
}
