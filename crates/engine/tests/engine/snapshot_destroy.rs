//! A snapshot destroy of any size costs a bounded amount per txg (issue #21, docs/design/
//! 0006-free-queue.md): the snapshot leaves at once and joins the root's trees being destroyed,
//! whose walk frees what it alone held a slice per txg from a cursor in the volume's blocks. The
//! volume keeps taking writes and trims on both sides of the cursor, snapshots are taken,
//! destroyed and rolled back to meanwhile, a crash half-way resumes from the root, and the
//! auditor agrees after every step.
//!
//! Before, the destroy's txg walked everything the snapshot alone held: for the volume below,
//! its 1,024 leaf pages and the volume's 1,024 beside them, all inside one txg (more than 2,000
//! GETs, where the bound checked below is `PAGES_PER_TXG + OTHER_GETS_MAX` = 26), while every
//! other writer's sync waited (27 s for a 256 GiB volume, `big_volume.rs`).

use crate::big_frees::{
    block_at, drain, env, import, write_every_mib, MIB, OTHER_GETS_MAX, PAGES_PER_TXG, VOL_BYTES,
};
use crate::counting_store::CountingStore;
use bytes::Bytes;
use fardisk_engine::objstore::open_store_url;
use fardisk_engine::pool::CreateOptions;
use fardisk_engine::Pool;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// `tag`'s bytes for MiB `mib`, as `write_every_mib` writes them.
fn pattern(tag: u8, mib: u64) -> Vec<u8> {
    vec![tag ^ (mib as u8) | 1; 4096]
}

async fn write_mibs(pool: &Pool, vol: u32, mibs: std::ops::Range<u64>, tag: u8) {
    for mib in mibs {
        pool.write(vol, mib * MIB, Bytes::from(pattern(tag, mib))).await.expect("write");
    }
    pool.sync_txg().await.expect("sync");
}

/// The cursor of the first tree being destroyed.
fn cursor(pool: &Pool) -> u64 {
    pool.trees_being_destroyed().first().expect("a tree being destroyed").2
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_destroy_frees_a_bounded_slice_per_txg_and_resumes_after_a_crash() {
    let base = open_store_url("memory://destroy-walk", true).expect("store");
    Pool::create(base.clone(), "tank", CreateOptions::default(), &env()).await.expect("create");
    let pool = import(base.clone()).await;
    let vol = pool.volume_create("v", VOL_BYTES).expect("volume");
    write_every_mib(&pool, vol, 0x10).await;
    pool.snapshot_create("v", "s").await.expect("snapshot");
    // Every leaf page and block of the snapshot is its own: the volume rewrote each.
    write_every_mib(&pool, vol, 0x20).await;
    let before = pool.status();
    pool.export().await.expect("export");

    // A fresh import: no map page is cached, so each page a txg needs is a GET.
    let counting = Arc::new(CountingStore::new(base));
    let pool = import(counting.clone()).await;
    let vol = pool.volume_id("v").expect("v");
    counting.gets.store(0, Ordering::SeqCst);
    pool.snapshot_destroy("v", "s").await.expect("destroy");
    let gets = counting.gets.load(Ordering::SeqCst);
    assert!(gets <= PAGES_PER_TXG + OTHER_GETS_MAX, "the destroy's txg read {gets} pages");
    assert!(pool.snapshot("v", "s").is_none(), "the snapshot is gone at once");
    assert_eq!(pool.trees_being_destroyed().len(), 1, "its space is freed by later txgs");
    pool.snapshot_create("v", "s").await.expect("its name is free again");
    pool.snapshot_destroy("v", "s").await.expect("and that one goes behind it");
    pool.audit_space().await.expect("audit after the destroy");

    let mut last = cursor(&pool);
    for _ in 0..4 {
        pool.sync_step().await.expect("step").expect("a tree being destroyed makes a txg");
        assert!(cursor(&pool) > last, "each txg moves the cursor: {last} -> {}", cursor(&pool));
        last = cursor(&pool);
        pool.audit_space().await.expect("audit while destroying");
    }
    // Writes below and above the cursor, and a trim across it.
    let at_mib = last / 256;
    assert!(at_mib > 6 && at_mib < 1000, "the cursor is at MiB {at_mib}");
    write_mibs(&pool, vol, 0..4, 0x30).await;
    write_mibs(&pool, vol, 1000..1004, 0x30).await;
    pool.audit_space().await.expect("audit after writes on both sides of the cursor");
    let trim = (at_mib - 2)..(at_mib + 6);
    let (start, end) = (trim.start * MIB, trim.end * MIB);
    pool.zero(vol, start, end - start).await.expect("trim across the cursor");
    pool.sync_txg().await.expect("sync");
    pool.audit_space().await.expect("audit after a trim across the cursor");
    assert!(cursor(&pool) > last, "the walk went on meanwhile");
    let at_crash = cursor(&pool);
    drop(pool); // A crash: no export.

    let pool = import(counting.clone()).await;
    assert_eq!(cursor(&pool), at_crash, "the walk resumes where the root left it");
    assert_eq!(pool.trees_being_destroyed().len(), 2);
    pool.audit_space().await.expect("audit after the crash");
    // The first txg after an import also reads the space table's paths cold, to the segments of
    // three epochs now (before the export, before the crash, this one): more than `drain`'s
    // allowance for other reads, with the walk's own pages still at 16.
    counting.gets.store(0, Ordering::SeqCst);
    pool.sync_step().await.expect("step").expect("a txg");
    let gets = counting.gets.load(Ordering::SeqCst);
    assert!(gets <= PAGES_PER_TXG + 2 * OTHER_GETS_MAX, "the first txg read {gets} pages");
    counting.in_flight_max.store(0, Ordering::SeqCst);
    drain(&pool, &counting).await;
    let in_flight_max = counting.in_flight_max.load(Ordering::SeqCst);
    assert!(in_flight_max >= 4, "leaf pages read together: {in_flight_max} in flight at most");
    pool.audit_space().await.expect("audit after the destroys");
    let after = pool.status();
    assert!(
        after.space.live_bytes * 3 < before.space.live_bytes * 2,
        "the snapshot's blocks are freed: live bytes {} -> {}",
        before.space.live_bytes,
        after.space.live_bytes
    );
    let vol = pool.volume_id("v").expect("v");
    for mib in [0, 3, 1000, 1003] {
        assert_eq!(block_at(&pool, vol, mib).await, pattern(0x30, mib), "rewritten MiB {mib}");
    }
    for mib in trim {
        assert_eq!(block_at(&pool, vol, mib).await, vec![0u8; 4096], "trimmed MiB {mib}");
    }
    for mib in [4, 511, 999, 1023] {
        assert_eq!(block_at(&pool, vol, mib).await, pattern(0x20, mib), "MiB {mib}");
    }
}

/// Snapshots taken and destroyed, a rollback past them, a trim across the cursor, a clone's
/// volume destroyed and a recursive destroy, all while a walk is under way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_changes_interleave_with_a_destroy_under_way() {
    let base = open_store_url("memory://destroy-interleave", true).expect("store");
    Pool::create(base.clone(), "tank", CreateOptions::default(), &env()).await.expect("create");
    let counting = Arc::new(CountingStore::new(base));
    let pool = import(counting.clone()).await;
    let vol = pool.volume_create("v", VOL_BYTES).expect("volume");
    for (tag, snap) in [(0x10, "a"), (0x20, "b"), (0x30, "c")] {
        write_every_mib(&pool, vol, tag).await;
        pool.snapshot_create("v", snap).await.expect("snapshot");
    }
    write_every_mib(&pool, vol, 0x40).await;
    let c = pool.snapshot_id("v", "c").expect("c");

    pool.snapshot_destroy("v", "b").await.expect("destroy b");
    pool.sync_step().await.expect("step");
    assert!(cursor(&pool) > 0, "b's walk is under way");
    pool.snapshot_create("v", "d").await.expect("a snapshot while b is destroyed");
    pool.snapshot_destroy("v", "a").await.expect("destroy a behind b");
    let trees = pool.trees_being_destroyed();
    assert_eq!((trees.len(), trees[1].2), (2, 0), "a waits at 0 behind b: {trees:?}");
    pool.sync_step().await.expect("step");
    pool.audit_space().await.expect("audit with two trees being destroyed");

    // Back to c: d is destroyed first, then the volume's former map joins the trees.
    pool.rollback("v", "c", true).await.expect("rollback past d");
    assert_eq!(pool.trees_being_destroyed().len(), 4, "b, a, d and the former map");
    pool.audit_space().await.expect("audit after the rollback");
    assert_eq!(block_at(&pool, vol, 7).await, pattern(0x30, 7), "rolled back to c");
    write_mibs(&pool, vol, 0..8, 0x50).await;
    let at_mib = cursor(&pool) / 256;
    pool.zero(vol, (at_mib.max(2) - 2) * MIB, 8 * MIB).await.expect("trim across b's cursor");
    pool.sync_txg().await.expect("sync");
    pool.audit_space().await.expect("audit after a trim across the cursor");
    drain(&pool, &counting).await;
    pool.audit_space().await.expect("audit after every walk");
    assert_eq!(block_at(&pool, vol, 3).await, pattern(0x50, 3));
    assert_eq!(block_at(&pool, vol, 900).await, pattern(0x30, 900));
    assert_eq!(block_at(&pool, c, 900).await, pattern(0x30, 900), "c reads its own bytes");

    // A clone of c whose volume is destroyed while its own snapshot's walk is under way: c is
    // its origin until that walk is done.
    let x = pool.clone_volume("v", "c", "x").await.expect("clone");
    write_mibs(&pool, x, 0..300, 0x60).await;
    pool.snapshot_create("x", "x1").await.expect("snapshot of the clone");
    write_mibs(&pool, x, 0..300, 0x70).await;
    pool.snapshot_destroy("x", "x1").await.expect("destroy x1");
    pool.volume_destroy("x").expect("destroy the clone");
    pool.sync_txg().await.expect("sync");
    let refused = pool.snapshot_destroy("v", "c").await.expect_err("c is still an origin");
    assert!(refused.to_string().contains("still being freed"), "{refused}");
    drain(&pool, &counting).await;
    pool.audit_space().await.expect("audit after the clone's walks");

    // A recursive destroy while c's walk is under way.
    pool.snapshot_create("v", "e").await.expect("e");
    write_every_mib(&pool, vol, 0x80).await;
    pool.snapshot_destroy("v", "c").await.expect("destroy c");
    pool.sync_step().await.expect("step");
    pool.volume_destroy_recursive("v").await.expect("destroy v and e");
    drain(&pool, &counting).await;
    pool.audit_space().await.expect("audit after everything is destroyed");
    let live = pool.status().space.live_bytes;
    assert!(live < 1 << 20, "only the space table is left: {live} live bytes");
}

/// Trees of one level (a 1 MiB volume: its top page is its only leaf), and a volume grown after
/// its snapshot (the next tree has more levels than the destroyed one): the walk compares at the
/// same place all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_level_trees_and_a_volume_grown_after_its_snapshot() {
    let base = open_store_url("memory://destroy-levels", true).expect("store");
    Pool::create(base.clone(), "tank", CreateOptions::default(), &env()).await.expect("create");
    let counting = Arc::new(CountingStore::new(base));
    let pool = import(counting.clone()).await;
    let vol = pool.volume_create("small", MIB).expect("volume");
    let block = |tag: u8, n: u64| Bytes::from(vec![tag ^ n as u8 | 1; 4096]);
    for n in 0..256 {
        pool.write(vol, n * 4096, block(0x10, n)).await.expect("write");
    }
    pool.snapshot_create("small", "a").await.expect("a");
    for n in (0..256).step_by(2) {
        pool.write(vol, n * 4096, block(0x20, n)).await.expect("write");
    }
    pool.snapshot_create("small", "b").await.expect("b");
    pool.volume_resize("small", VOL_BYTES).expect("grow past one leaf page");
    pool.write(vol, VOL_BYTES - 4096, block(0x30, 0)).await.expect("write at the end");
    for n in (1..256).step_by(4) {
        pool.write(vol, n * 4096, block(0x40, n)).await.expect("write");
    }
    pool.sync_txg().await.expect("sync");
    let before = pool.status().space.live_bytes;
    // No map page cached: the walk finds the next tree's pages through its parents.
    pool.export().await.expect("export");
    let pool = import(counting.clone()).await;
    let vol = pool.volume_id("small").expect("small");
    for snap in ["a", "b"] {
        pool.snapshot_destroy("small", snap).await.expect("destroy");
        drain(&pool, &counting).await;
        pool.audit_space().await.expect("audit after the destroy");
    }
    assert!(pool.status().space.live_bytes < before, "the snapshots' blocks are freed");
    for n in [0u64, 1, 2, 3, 5, 254, 255] {
        let want = match n {
            n if n % 4 == 1 => block(0x40, n),
            n if n % 2 == 0 => block(0x20, n),
            n => block(0x10, n),
        };
        let got = pool.read(vol, n * 4096, 4096).await.expect("read");
        assert_eq!(got, want, "block {n}");
    }
    let end = pool.read(vol, VOL_BYTES - 4096, 4096).await.expect("read the end");
    assert_eq!(end, block(0x30, 0));
}

/// A snapshot's USED (what destroying it would free) is walked a bounded number of pages per hold
/// of the commit lock, so commits run beside it; and it is what the destroy then frees. Before,
/// the walk held the lock throughout: no sync finished while it ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshots_used_bytes_lets_commits_run_and_is_what_its_destroy_frees() {
    let base = open_store_url("memory://destroy-used", true).expect("store");
    Pool::create(base.clone(), "tank", CreateOptions::default(), &env()).await.expect("create");
    let counting = Arc::new(CountingStore::new(base));
    let pool = import(counting.clone()).await;
    let vol = pool.volume_create("v", VOL_BYTES).expect("volume");
    let other = pool.volume_create("other", MIB).expect("volume");
    write_every_mib(&pool, vol, 0x10).await;
    pool.snapshot_create("v", "s").await.expect("snapshot");
    write_every_mib(&pool, vol, 0x20).await;
    let id = pool.snapshot_id("v", "s").expect("s");

    let walker = pool.clone();
    let used = tokio::spawn(async move { walker.snapshot_unique_bytes(id).await });
    let mut syncs_during = 0;
    for n in 0..10_000u64 {
        if used.is_finished() {
            break;
        }
        pool.write(other, 0, Bytes::from(vec![n as u8 | 1; 4096])).await.expect("write");
        pool.sync_txg().await.expect("sync");
        syncs_during += 1;
    }
    let used = used.await.expect("task").expect("used bytes");
    assert!(syncs_during >= 3, "{syncs_during} syncs finished while the walk ran");
    // 1,024 leaf pages (one slot each: about 110 B compressed) and 1,024 blocks of one byte
    // repeated (a few dozen bytes compressed), and its level-1 pages.
    assert!(used > 1024 * 100, "used {used}");

    pool.sync_txg().await.expect("sync");
    let before = pool.status().space.live_bytes;
    pool.snapshot_destroy("v", "s").await.expect("destroy");
    drain(&pool, &counting).await;
    pool.audit_space().await.expect("audit");
    let freed = before - pool.status().space.live_bytes;
    // The txgs of the walk also rewrite space-table pages: a few KiB either way.
    assert!(freed.abs_diff(used) < used / 50, "used {used}, the destroy freed {freed}");
}
