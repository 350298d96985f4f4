//! Partial-block writes racing a txg rotation (claim 5 of #17): a write that read its edge block
//! before the txg rotated must not patch onto those stale bytes when another write of the same
//! block went into the txg that rotated out.

use super::super::{CreateOptions, ImportOptions};
use crate::cache::NoCache;
use crate::clock::ManualClock;
use crate::objstore::{open_store_url, DynStore};
use crate::{Env, Pool, PoolConfig};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;

const SECTOR: usize = 512;

async fn pool(name: &str) -> (Pool, DynStore, Env) {
    let store = open_store_url(&format!("memory://write-race-{name}"), true).expect("store");
    let env = Env { clock: Arc::new(ManualClock::default()), seed: 5, blocking_inline: false };
    Pool::create(store.clone(), "tank", CreateOptions::default(), &env).await.expect("create");
    let pool = import(&store, &env).await;
    pool.volume_create("v", 1 << 20).expect("volume");
    pool.sync_txg().await.expect("volume in the store");
    (pool, store, env)
}

async fn import(store: &DynStore, env: &Env) -> Pool {
    let config = PoolConfig { txg_timeout: None, ..PoolConfig::default() };
    Pool::import(
        store.clone(),
        "tank",
        ImportOptions { force: true, config, ..Default::default() },
        env.clone(),
        Arc::new(NoCache),
    )
    .await
    .expect("import")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_block_write_held_across_a_txg_rotation_keeps_the_other_writers_bytes() {
    let (pool, _, _) = pool("held").await;
    let vol = pool.volume_id("v").expect("v");
    pool.write(vol, 0, Bytes::from(vec![0xaa; 4096])).await.expect("whole block");
    pool.sync_txg().await.expect("sync");

    // A reads block 0 for its first sector and is held before the txg lock.
    let go = Arc::new(tokio::sync::Semaphore::new(0));
    *pool.inner.pause_before_write_lock.lock() = Some(go.clone());
    let a = tokio::spawn({
        let pool = pool.clone();
        async move { pool.write(vol, 0, Bytes::from(vec![0x01; SECTOR])).await }
    });
    for _ in 0..10_000 {
        if pool.inner.pause_before_write_lock.lock().is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // B writes the second sector of the same block; its txg rotates out and is published.
    pool.write(vol, SECTOR as u64, Bytes::from(vec![0x02; SECTOR])).await.expect("write B");
    pool.sync_txg().await.expect("rotate and publish B's txg");
    go.add_permits(1);
    a.await.expect("task A").expect("write A");

    let block = pool.read(vol, 0, 4096).await.expect("read");
    assert!(block[..SECTOR].iter().all(|b| *b == 0x01), "A's sector");
    assert!(
        block[SECTOR..2 * SECTOR].iter().all(|b| *b == 0x02),
        "B's sector was lost: A patched onto bytes read before the rotation"
    );
    assert!(block[2 * SECTOR..].iter().all(|b| *b == 0xaa), "the rest of the block");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sector_writes_across_txg_rotations_lose_no_update() {
    const BLOCKS: usize = 4;
    const WRITERS: usize = 8;
    const ROUNDS: u32 = 150;
    let (pool, store, env) = pool("stress").await;
    let vol = pool.volume_id("v").expect("v");
    let sectors = BLOCKS * 4096 / SECTOR;
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let syncer = tokio::spawn({
        let (pool, done) = (pool.clone(), done.clone());
        async move {
            // Bounded: a rotation per round of the writers at most, and never more than this.
            for _ in 0..20_000 {
                if done.load(std::sync::atomic::Ordering::Acquire) == WRITERS {
                    break;
                }
                pool.sync_txg().await.expect("sync");
                tokio::task::yield_now().await;
            }
        }
    });
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (pool, done) = (pool.clone(), done.clone());
        writers.push(tokio::spawn(async move {
            // Writer w owns sectors w, w + WRITERS, ...: interleaved across the same blocks.
            for round in 1..=ROUNDS {
                for s in (w..sectors).step_by(WRITERS) {
                    let fill = (round as usize * 31 + s) as u8 | 1;
                    pool.write(vol, (s * SECTOR) as u64, Bytes::from(vec![fill; SECTOR]))
                        .await
                        .expect("sector write");
                }
                tokio::task::yield_now().await;
            }
            done.fetch_add(1, std::sync::atomic::Ordering::Release);
        }));
    }
    for w in writers {
        w.await.expect("writer");
    }
    syncer.await.expect("syncer");
    let want: Vec<u8> =
        (0..sectors).flat_map(|s| vec![(ROUNDS as usize * 31 + s) as u8 | 1; SECTOR]).collect();
    assert_eq!(
        pool.read(vol, 0, (BLOCKS * 4096) as u32).await.expect("read").to_vec(),
        want,
        "a sector lost its last write"
    );
    pool.export().await.expect("export");
    let pool = import(&store, &env).await;
    assert_eq!(
        pool.read(vol, 0, (BLOCKS * 4096) as u32).await.expect("read").to_vec(),
        want,
        "after export and import"
    );
}
