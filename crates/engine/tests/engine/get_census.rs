//! A census of the GETs of engine-store's cold sequential read (issue #21's "GETs per cold GiB"),
//! without MinIO: the same write (4 writers sharing one sequential stream of 1 MiB writes, txgs
//! synced by the engine's own syncer, a final sync) on a memory store, then a fresh import with
//! an empty 1 GiB ARC, the store 5 ms away, one reader of 1 MiB parts. Prints every GET of the
//! read in order and each segment read in more than one. A tool, not a check (ignored; 4 GiB
//! takes a minute and 5 GiB of RAM):
//! `CENSUS_MIB=4096 cargo test -p fardisk-engine --test engine get_census -- --ignored --nocapture`
#![allow(clippy::disallowed_methods)]

use crate::fresh_pool;
use crate::map_fetch::chunk;
use bytes::Bytes;
use fardisk_engine::clock::SystemClock;
use fardisk_engine::{Env, PoolConfig};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn census() {
    let mib: u64 = std::env::var("CENSUS_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(1024);
    let env = Env { clock: Arc::new(SystemClock::default()), seed: 7, blocking_inline: false };
    let config = PoolConfig::default();
    let (pool, base) = fresh_pool::created("memory://census", &config, &env).await;
    let vol = pool.volume_create("v", mib << 20).expect("volume");
    pool.sync_txg().await.expect("sync");
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let (pool, next) = (pool.clone(), next.clone());
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= mib {
                    return;
                }
                pool.write(vol, i << 20, Bytes::from(chunk(i))).await.expect("write");
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("writer");
    }
    pool.sync_txg().await.expect("sync");
    let st = pool.status();
    println!("written: {} txgs, {} segments", st.txgs_synced, st.segments_uploaded);
    pool.export().await.expect("export");
    let (pool, vol, counting) = fresh_pool::far_import(base, &config, 7, 5, 1 << 30, 1000).await;
    for i in 0..mib {
        let got = pool.read_parts(vol, i << 20, 1 << 20).await.expect("read");
        let joined: Vec<u8> = got.iter().flat_map(|p| p.iter().copied()).collect();
        assert!(joined[..] == chunk(i)[..], "MiB {i}");
    }
    let gets = counting.get_ranges.lock().expect("get ranges").clone();
    let mut per_key: std::collections::BTreeMap<String, Vec<std::ops::Range<u64>>> =
        Default::default();
    for (k, r) in &gets {
        per_key.entry(k.clone()).or_default().push(r.clone());
    }
    let small = gets.iter().filter(|(_, r)| r.end - r.start < 1 << 20).count();
    println!(
        "{mib} MiB read: {} GETs, {small} of them under 1 MiB (map pages), {} segments",
        gets.len(),
        per_key.len()
    );
    for (i, (k, r)) in gets.iter().enumerate() {
        println!("  {i:4} GET {k} {r:?} ({} KiB)", (r.end - r.start) >> 10);
    }
    for (k, rs) in &per_key {
        if rs.len() > 1 {
            println!("  read in {} GETs: {k}: {rs:?}", rs.len());
        }
    }
}
