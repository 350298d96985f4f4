//! Scrub against a store damaged on purpose: a flipped byte in a data block is found, reported
//! with its volume offset, and repaired from the ARC when the ARC holds a verified copy; a
//! missing segment is reported; a read of a damaged block is an error, never wrong bytes; pause,
//! resume and stop do what they say.

// Real time is the point here: scrub rate limits and pauses are observed in real time.
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use fardisk_engine::arc_cache::ArcBlockCache;
use fardisk_engine::blkptr::BlockPtr;
use fardisk_engine::clock::ManualClock;
use fardisk_engine::objstore::{open_store_url, PutMode, Store};
use fardisk_engine::pool::{CreateOptions, ImportOptions, ScrubProgress, ScrubState};
use fardisk_engine::rng::Rng;
use fardisk_engine::segment::{parse_segment, segment_key, BlockOwner};
use fardisk_engine::{Env, Pool, PoolConfig};
use std::sync::Arc;
use std::time::Duration;

const MIB: u64 = 1 << 20;
const BLOCK: u64 = 4096;

fn data(len: u64, seed: u64) -> Bytes {
    // Incompressible, so every block is stored as is and has its own range.
    let mut bytes = vec![0u8; len as usize];
    Rng::new(seed).fill(&mut bytes);
    Bytes::from(bytes)
}

async fn import(store: &Arc<dyn Store>, env: &Env, arc_bytes: u64) -> Pool {
    let cache = Arc::new(ArcBlockCache::new(arc_bytes, None));
    let opts = ImportOptions {
        force: true,
        config: PoolConfig { txg_timeout: None, ..PoolConfig::default() },
        ..Default::default()
    };
    Pool::import(store.clone(), "tank", opts, env.clone(), cache).await.expect("import")
}

async fn scrub_to_end(pool: &Pool) -> ScrubProgress {
    pool.scrub_start().expect("scrub starts");
    for _ in 0..2000 {
        let p = pool.scrub_progress();
        if !matches!(p.state, ScrubState::Scanning | ScrubState::Paused) {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("scrub did not end: {:?}", pool.scrub_progress());
}

/// The segment and pointer holding data block `block` of volume `tree_id`.
pub(crate) async fn locate(
    store: &Arc<dyn Store>,
    guid: u128,
    tree_id: u32,
    block: u64,
) -> (u64, BlockPtr) {
    for (key, _) in store.list("segments/").await.expect("list") {
        let seg =
            u64::from_str_radix(key.trim_start_matches("segments/"), 16).expect("segment key");
        let bytes = store.get(&key).await.expect("get");
        let index = parse_segment(&bytes, guid, seg).expect("segment parses");
        for e in index.entries {
            if e.owner == (BlockOwner::Data { tree_id, block }) {
                return (seg, e.ptr);
            }
        }
    }
    panic!("block {block} of tree {tree_id} is in no segment");
}

pub(crate) async fn flip_byte(store: &Arc<dyn Store>, seg: u64, at: u64) {
    let key = segment_key(seg);
    let mut bytes = store.get(&key).await.expect("get").to_vec();
    bytes[at as usize] ^= 0x40;
    store.put(&key, Bytes::from(bytes), PutMode::Overwrite).await.expect("overwrite");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrub_finds_a_flipped_byte_and_repairs_it_from_the_arc() {
    let env = Env { clock: Arc::new(ManualClock::default()), seed: 11, blocking_inline: false };
    let store = open_store_url("memory://scrub-repair", true).expect("store");
    Pool::create(store.clone(), "tank", CreateOptions::default(), &env).await.expect("create");
    let pool = import(&store, &env, 64 * MIB).await;
    let vol = pool.volume_create("v", 8 * MIB).expect("volume");
    let written = data(4 * MIB, 1);
    pool.write(vol, 0, written.clone()).await.expect("write");
    pool.sync_txg().await.expect("sync");

    let clean = scrub_to_end(&pool).await;
    assert_eq!(clean.state, ScrubState::Finished);
    assert_eq!(clean.errors_total(), 0, "a clean pool scrubs clean: {clean:?}");
    assert!(clean.examined_blocks >= 4 * MIB / BLOCK, "every written block examined: {clean:?}");

    // Damage block 10 in the store; the ARC still holds the copy the txg sync put there.
    let guid = u128::from_str_radix(&pool.status().guid, 16).expect("guid");
    let (seg, ptr) = locate(&store, guid, vol, 10).await;
    flip_byte(&store, seg, ptr.range().start + 100).await;

    let found = scrub_to_end(&pool).await;
    assert_eq!(found.checksum_errors, 1, "exactly the damaged block: {found:?}");
    assert_eq!(found.repaired_blocks, 1, "repaired from the ARC: {found:?}");
    assert_eq!(found.errors[0].object, format!("block at {}", 10 * BLOCK));
    assert_eq!(found.errors[0].kind, "checksum");
    assert!(found.errors[0].repaired);
    pool.sync_txg().await.expect("the repair is written by the next txg");
    let after = scrub_to_end(&pool).await;
    assert_eq!(after.errors_total(), 0, "the map now points at the rewritten copy: {after:?}");
    pool.export().await.expect("export");
    drop(pool);

    // A fresh import with an empty cache reads the repaired copy from the store.
    let pool = import(&store, &env, 64 * MIB).await;
    let back = pool.read(vol, 0, (4 * MIB) as u32).await.expect("read back");
    assert!(back == written, "the volume reads back exactly as written");
    pool.export().await.expect("export");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_good_copy_the_error_is_reported_and_reads_fail_not_lie() {
    let env = Env { clock: Arc::new(ManualClock::default()), seed: 12, blocking_inline: false };
    let store = open_store_url("memory://scrub-unrepaired", true).expect("store");
    Pool::create(store.clone(), "tank", CreateOptions::default(), &env).await.expect("create");
    let pool = import(&store, &env, 64 * MIB).await;
    let vol = pool.volume_create("v", 8 * MIB).expect("volume");
    pool.write(vol, 0, data(2 * MIB, 2)).await.expect("write");
    pool.sync_txg().await.expect("sync");
    pool.write(vol, 4 * MIB, data(2 * MIB, 3)).await.expect("write"); // a second txg, a second segment
    pool.sync_txg().await.expect("sync");
    pool.export().await.expect("export");
    drop(pool);

    let guid = {
        let root = Pool::peek(store.clone(), &env).await.expect("peek");
        root.pool_guid
    };
    let (seg, ptr) = locate(&store, guid, vol, 3).await;
    flip_byte(&store, seg, ptr.range().start).await;

    // A fresh import: nothing cached, so nothing to repair from.
    let pool = import(&store, &env, 64 * MIB).await;
    let p = scrub_to_end(&pool).await;
    assert_eq!(p.state, ScrubState::Finished);
    assert_eq!((p.checksum_errors, p.repaired_blocks), (1, 0), "{p:?}");
    assert_eq!(p.errors[0].object, format!("block at {}", 3 * BLOCK));
    assert!(
        pool.read(vol, 3 * BLOCK, BLOCK as u32).await.is_err(),
        "a damaged block is an error, never data"
    );
    assert!(pool.read(vol, 4 * BLOCK, BLOCK as u32).await.is_ok(), "its neighbours still read");
    assert!(pool.status().checksum_errors >= 1, "the pool counts it in status");

    // Remove the other data segment entirely: every block it held is reported missing.
    let (seg2, _) = locate(&store, guid, vol, (4 * MIB) / BLOCK).await;
    assert_ne!(seg2, seg, "two txgs wrote two segments");
    store.delete(&segment_key(seg2)).await.expect("delete");
    let p = scrub_to_end(&pool).await;
    // The txg's one segment held its 512 data blocks and its map pages.
    assert!(
        p.missing_blocks >= 2 * MIB / BLOCK,
        "every block of the missing segment is reported: {p:?}"
    );
    assert!(p.errors.iter().any(|e| e.kind == "missing"));
    assert!(
        pool.read(vol, 4 * MIB, BLOCK as u32).await.is_err(),
        "a block of a missing segment is an error"
    );
    drop(pool);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_and_stop() {
    let env = Env::system();
    let store = open_store_url("memory://scrub-pause", true).expect("store");
    Pool::create(store.clone(), "tank", CreateOptions::default(), &env).await.expect("create");
    let pool = import(&store, &env, 64 * MIB).await;
    let vol = pool.volume_create("v", 8 * MIB).expect("volume");
    // Blocks far apart, so each is its own request, and a rate of one block per second.
    for i in 0..16u64 {
        pool.write(vol, i * 512 * 1024, data(BLOCK, 10 + i)).await.expect("write");
        pool.sync_txg().await.expect("sync");
    }
    pool.set_prop("scrub_rate_max", "4096").expect("set rate");
    pool.scrub_start().expect("start");
    assert!(pool.scrub_start().is_err(), "a second start while scanning is refused");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    pool.scrub_pause().expect("pause");
    assert_eq!(pool.scrub_progress().state, ScrubState::Paused);
    tokio::time::sleep(Duration::from_millis(1200)).await; // let an in-flight request land
    let at_pause = pool.scrub_progress().examined_blocks;
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert_eq!(pool.scrub_progress().examined_blocks, at_pause, "a paused scrub reads nothing");
    pool.scrub_start().expect("resume");
    assert_eq!(pool.scrub_progress().state, ScrubState::Scanning);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(pool.scrub_progress().examined_blocks > at_pause, "resumed where it was");
    pool.scrub_stop().expect("stop");
    for _ in 0..300 {
        if pool.scrub_progress().state == ScrubState::Canceled {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(pool.scrub_progress().state, ScrubState::Canceled);
    assert!(pool.scrub_stop().is_err(), "nothing left to stop");
    pool.set_prop("scrub_rate_max", "0").expect("unlimited");
    let full = scrub_to_end(&pool).await;
    assert_eq!((full.state, full.errors_total()), (ScrubState::Finished, 0));
    pool.export().await.expect("export");
}
