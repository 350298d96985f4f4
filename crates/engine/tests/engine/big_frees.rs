//! Trims, rollbacks and destroyed volumes of any size cost a bounded amount per txg (issue #21,
//! docs/design/0006-free-queue.md): a trim cuts whole map subtrees at their parent and queues them
//! in the root; each txg then reads at most `free_pages_per_txg_max` of their pages. The trimmed
//! range reads as zeros at once, the space auditor agrees after every step and after a crash
//! half-way, and the freed segments leave the space table.
//!
//! Before the free queue, the first txg after the trim below read all 1,024 leaf pages of the
//! volume (`walk_range` of the whole range in `apply_trims_and_grows`) and dirtied each of them,
//! so its GET count was above 1,024, not under `PAGES_PER_TXG + OTHER_GETS_MAX` (26).

use crate::counting_store::CountingStore;
use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::clock::ManualClock;
use fardisk_engine::objstore::{open_store_url, Store};
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::{Env, Pool, PoolConfig};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// 1,024 leaf pages of map (one per MiB) under 4 level-1 pages and a level-2 top.
pub(crate) const VOL_BYTES: u64 = 1 << 30;
pub(crate) const MIB: u64 = 1 << 20;
pub(crate) const PAGES_PER_TXG: u64 = 16;
/// What a txg reads besides the queue's pages: the space table's pages, a tree indexed by segment
/// id (the writer's epoch in the top bits), so up to 8 pages from its top to the leaf of each of
/// the two epochs' segments, the map cache being at its minimum.
pub(crate) const OTHER_GETS_MAX: u64 = 10;

pub(crate) fn env() -> Env {
    Env { clock: Arc::new(ManualClock::default()), seed: 21, blocking_inline: false }
}

fn config() -> PoolConfig {
    PoolConfig {
        txg_timeout: None,
        map_cache_bytes: 0,
        roots_kept: 2,
        free_pages_per_txg_max: PAGES_PER_TXG,
        ..PoolConfig::default()
    }
}

pub(crate) async fn import(store: Arc<dyn Store>) -> Pool {
    let opts = ImportOptions { force: true, config: config(), ..Default::default() };
    let pool = Pool::import(store, "tank", opts, env(), Arc::new(NoCache)).await.expect("import");
    // The import's background work (the space table walk, the root listing) reads too: it ends
    // before GETs are counted.
    for _ in 0..1_000_000 {
        if pool.import_settled() {
            return pool;
        }
        tokio::task::yield_now().await;
    }
    panic!("the import's background work did not end");
}

/// One 4 KiB block at the start of every MiB, each with its own bytes: every leaf page of the map
/// holds one block.
pub(crate) async fn write_every_mib(pool: &Pool, vol: u32, tag: u8) {
    for mib in 0..VOL_BYTES / MIB {
        let data = Bytes::from(vec![tag ^ (mib as u8) | 1; 4096]);
        pool.write(vol, mib * MIB, data).await.expect("write");
    }
    pool.sync_txg().await.expect("sync");
}

pub(crate) async fn block_at(pool: &Pool, vol: u32, mib: u64) -> Vec<u8> {
    pool.read(vol, mib * MIB, 4096).await.expect("read").to_vec()
}

/// Commits txgs until the free queue is empty and no tree is being destroyed, checking the
/// bound on each; returns the txgs it took and the most entries the queue held.
pub(crate) async fn drain(pool: &Pool, counting: &CountingStore) -> (u64, usize) {
    let (mut txgs, mut entries_max) = (0u64, pool.free_queue_entries());
    while pool.free_queue_entries() > 0 || !pool.trees_being_destroyed().is_empty() {
        counting.gets.store(0, Ordering::SeqCst);
        pool.sync_step().await.expect("sync step").expect("frees queued make a txg");
        let gets = counting.gets.load(Ordering::SeqCst);
        assert!(
            gets <= PAGES_PER_TXG + OTHER_GETS_MAX,
            "txg {} read {gets} blocks and pages, more than {PAGES_PER_TXG} queued pages + {OTHER_GETS_MAX}",
            pool.published_txg()
        );
        entries_max = entries_max.max(pool.free_queue_entries());
        txgs += 1;
        assert!(txgs <= 2 * VOL_BYTES / MIB, "the queue does not shrink");
        if txgs % 16 == 0 {
            pool.audit_space().await.expect("audit while freeing");
        }
    }
    (txgs, entries_max)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_volume_trim_frees_a_bounded_number_of_pages_per_txg() {
    let base = open_store_url("memory://big-trim", true).expect("store");
    Pool::create(base.clone(), "tank", CreateOptions::default(), &env()).await.expect("create");
    let pool = import(base.clone()).await;
    let vol = pool.volume_create("v", VOL_BYTES).expect("volume");
    write_every_mib(&pool, vol, 0x40).await;
    let before = pool.status();
    pool.export().await.expect("export");

    // A fresh import: no map page is cached, so each page the commit needs is a GET.
    let counting = Arc::new(CountingStore::new(base));
    let pool = import(counting.clone()).await;
    let vol = pool.volume_id("v").expect("v");
    pool.zero(vol, 0, VOL_BYTES).await.expect("whole-device discard");
    assert_eq!(block_at(&pool, vol, 7).await, vec![0u8; 4096], "zeros before the txg");
    counting.gets.store(0, Ordering::SeqCst);
    pool.sync_txg().await.expect("the trim's txg");
    let gets = counting.gets.load(Ordering::SeqCst);
    assert!(gets <= PAGES_PER_TXG + OTHER_GETS_MAX, "the trim's txg read {gets} blocks and pages");
    assert!(pool.free_queue_entries() > 0, "the cut subtrees wait in the root's queue");
    assert_eq!(block_at(&pool, vol, 900).await, vec![0u8; 4096], "zeros in the trim's txg");
    pool.audit_space().await.expect("audit after the cut");

    counting.in_flight_max.store(0, Ordering::SeqCst);
    let (txgs, entries_max) = drain(&pool, &counting).await;
    // Leaf pages share round trips: each txg's 16 pages in one (read_concurrency is 32). Read one
    // by one, as before, this was 1, and a far store made freeing one round trip per page.
    let in_flight_max = counting.in_flight_max.load(Ordering::SeqCst);
    assert_eq!(in_flight_max, PAGES_PER_TXG, "page reads in flight at once while freeing");
    // 1,024 leaf pages and 4 level-1 pages at 16 a txg, the trim's txg included.
    assert!(txgs >= (1028 / PAGES_PER_TXG) - 1, "{txgs} txgs freed 1,028 pages");
    // Depth first: the 4 level-1 subtrees, then at most 255 leaves of one of them.
    assert!(entries_max <= 4 + 255, "the queue held {entries_max} entries");
    pool.audit_space().await.expect("audit after the queue drained");
    let after = pool.status();
    assert!(
        after.space.live_bytes * 50 < before.space.live_bytes,
        "live bytes {} -> {}",
        before.space.live_bytes,
        after.space.live_bytes
    );
    for mib in [0, 1, 511, 1023] {
        assert_eq!(block_at(&pool, vol, mib).await, vec![0u8; 4096], "MiB {mib}");
    }
    println!(
        "1 GiB trim: {txgs} txgs to free, at most {entries_max} queued entries, {in_flight_max} page reads at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_trim_cuts_the_middle_and_keeps_the_edges() {
    let base = open_store_url("memory://edge-trim", true).expect("store");
    Pool::create(base.clone(), "tank", CreateOptions::default(), &env()).await.expect("create");
    let pool = import(base.clone()).await;
    let vol = pool.volume_create("v", VOL_BYTES).expect("volume");
    write_every_mib(&pool, vol, 0x10).await;
    // Unaligned at both ends: MiB 3 keeps its first block (before the range), MiB 700 its own.
    pool.zero(vol, 3 * MIB + 4096, 697 * MIB - 4096).await.expect("trim");
    pool.sync_txg().await.expect("sync");
    let counting = CountingStore::new(base);
    drain(&pool, &counting).await;
    pool.audit_space().await.expect("audit");
    for mib in [0u64, 3, 700, 1023] {
        let want = vec![0x10 ^ (mib as u8) | 1; 4096];
        assert_eq!(block_at(&pool, vol, mib).await, want, "MiB {mib} kept");
    }
    for mib in [4u64, 5, 255, 256, 699] {
        assert_eq!(block_at(&pool, vol, mib).await, vec![0u8; 4096], "MiB {mib} trimmed");
    }
}

/// A trim of data a snapshot holds frees nothing the snapshot reads; a rollback past writes in
/// every leaf page queues the volume's former map; a crash half-way through the queue resumes
/// from the root, with the auditor agreeing after the import.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_survive_trims_and_a_rollback_resumes_its_frees_after_a_crash() {
    let base = open_store_url("memory://big-rollback", true).expect("store");
    Pool::create(base.clone(), "tank", CreateOptions::default(), &env()).await.expect("create");
    let counting = Arc::new(CountingStore::new(base.clone()));
    let pool = import(counting.clone()).await;
    let vol = pool.volume_create("v", VOL_BYTES).expect("volume");
    write_every_mib(&pool, vol, 0x20).await;
    pool.snapshot_create("v", "s").await.expect("snapshot");
    let snap = pool.snapshot_id("v", "s").expect("s");
    // Overwrite every MiB, then trim half of it: the snapshot keeps reading its own bytes.
    write_every_mib(&pool, vol, 0x60).await;
    pool.zero(vol, 0, VOL_BYTES / 2).await.expect("trim");
    pool.sync_txg().await.expect("sync");
    drain(&pool, &counting).await;
    pool.audit_space().await.expect("audit after the trim");
    for mib in [0u64, 600] {
        let want = vec![0x20 ^ (mib as u8) | 1; 4096];
        assert_eq!(block_at(&pool, snap, mib).await, want, "snapshot MiB {mib}");
    }
    assert_eq!(block_at(&pool, vol, 600).await, vec![0x60 ^ 88 | 1; 4096], "MiB 600 kept");

    pool.rollback("v", "s", false).await.expect("rollback");
    assert!(pool.free_queue_entries() > 0, "the former map waits in the queue");
    for _ in 0..3 {
        pool.sync_step().await.expect("step");
    }
    let queued = pool.free_queue_entries();
    assert!(queued > 0, "still frees to do when the writer dies");
    drop(pool); // A crash: no export.

    let pool = import(counting.clone()).await;
    assert_eq!(pool.free_queue_entries(), queued, "the queue comes back from the root");
    pool.audit_space().await.expect("audit after the crash");
    drain(&pool, &counting).await;
    pool.audit_space().await.expect("audit after the rollback's frees");
    let vol = pool.volume_id("v").expect("v");
    for mib in [0u64, 600, 1023] {
        let want = vec![0x20 ^ (mib as u8) | 1; 4096];
        assert_eq!(block_at(&pool, vol, mib).await, want, "rolled back MiB {mib}");
    }
    // A destroyed volume goes the same way.
    pool.snapshot_destroy("v", "s").await.expect("destroy snapshot");
    pool.volume_destroy("v").expect("destroy volume");
    pool.sync_txg().await.expect("sync");
    drain(&pool, &counting).await;
    pool.audit_space().await.expect("audit after the volume's frees");
}
