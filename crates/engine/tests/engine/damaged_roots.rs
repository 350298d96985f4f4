//! A damaged `head` hint never stops an import (it is advisory); a damaged newest root stops it
//! with one line naming the newest intact root and `--rewind`, and changes nothing in the store;
//! `--rewind` then imports at the intact root, says what it discarded in the history, and the
//! next import is an ordinary one.

use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::clock::ManualClock;
use fardisk_engine::objstore::{open_store_url, PutMode, Store};
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::root::root_key;
use fardisk_engine::{Env, ErrorKind, Pool, PoolConfig};
use std::sync::Arc;

const VOL_BYTES: u64 = 1 << 20;

fn env(seed: u64) -> Env {
    Env { clock: Arc::new(ManualClock::default()), seed, blocking_inline: false }
}

fn config() -> PoolConfig {
    PoolConfig { txg_timeout: None, roots_kept: 4, ..PoolConfig::default() }
}

async fn import(store: &Arc<dyn Store>, seed: u64, rewind: bool) -> fardisk_engine::Result<Pool> {
    let opts = ImportOptions { force: true, config: config(), rewind, ..Default::default() };
    Pool::import(store.clone(), "tank", opts, env(seed), Arc::new(NoCache)).await
}

/// A pool whose volume holds `fill` bytes in its first block as of each of three txgs (1, 2, 3);
/// returns the store and the txg each fill was published in.
async fn pool_with_history(name: &str) -> (Arc<dyn Store>, Vec<(u8, u64)>) {
    let store = open_store_url(&format!("memory://damaged-roots-{name}"), true).expect("store");
    Pool::create(store.clone(), "tank", CreateOptions::default(), &env(1)).await.expect("create");
    let pool = import(&store, 2, false).await.expect("import");
    pool.volume_create("v", VOL_BYTES).expect("volume");
    let vol = pool.volume_id("v").expect("v");
    let mut published = Vec::new();
    for fill in 1..=3u8 {
        pool.write(vol, 0, Bytes::from(vec![fill; 4096])).await.expect("write");
        published.push((fill, pool.sync_txg().await.expect("sync")));
    }
    drop(pool); // A crash: no export.
    (store, published)
}

async fn first_byte(pool: &Pool) -> u8 {
    let vol = pool.volume_id("v").expect("v");
    pool.read(vol, 0, 4096).await.expect("read")[0]
}

async fn snapshot(store: &Arc<dyn Store>) -> Vec<(String, Bytes)> {
    let mut out = Vec::new();
    for (key, _) in store.list("").await.expect("list") {
        out.push((key.clone(), store.get(&key).await.expect("get")));
    }
    out
}

#[tokio::test]
async fn a_damaged_head_hint_never_stops_an_import() {
    for (i, damage) in [&b""[..], &b"garbage"[..], &[0u8; 64][..]].into_iter().enumerate() {
        let (store, _) = pool_with_history(&format!("head-{i}")).await;
        store
            .put("head", Bytes::copy_from_slice(damage), PutMode::Overwrite)
            .await
            .expect("damage the hint");
        Pool::peek(store.clone(), &env(3))
            .await
            .expect("peek (status of an exported pool) with a damaged hint");
        let pool = import(&store, 3, false).await.expect("import with a damaged hint");
        assert_eq!(first_byte(&pool).await, 3, "every published write is there");
    }
}

#[tokio::test]
async fn a_damaged_newest_root_is_refused_with_the_way_out_and_rewind_goes_back() {
    let (store, published) = pool_with_history("root").await;
    let (_, newest_txg) = published[2];
    let (second_fill, second_txg) = published[1];
    // Torn: the newest root's tail is zeros (a power cut on a store that did not sync it).
    let key = root_key(newest_txg);
    let mut torn = store.get(&key).await.expect("newest root").to_vec();
    let half = torn.len() / 2;
    torn[half..].fill(0);
    store.put(&key, Bytes::from(torn), PutMode::Overwrite).await.expect("tear it");

    let before = snapshot(&store).await;
    let e = import(&store, 4, false)
        .await
        .map(|_| ())
        .expect_err("a damaged newest root must be refused");
    let line = e.to_string();
    assert_eq!(e.kind(), ErrorKind::DataDamaged, "{line}");
    assert!(
        line.contains(&format!("txg {newest_txg} damaged"))
            && line.contains(&format!("newest intact root is txg {second_txg}"))
            && line.contains("fardisk import tank --rewind"),
        "{line}"
    );
    assert!(!line.contains('\n'), "one line: {line}");
    assert_eq!(snapshot(&store).await, before, "a refused import changed the store");

    let pool = import(&store, 5, true).await.expect("import --rewind");
    assert_eq!(first_byte(&pool).await, second_fill, "rewind opens at the newest intact root");
    assert!(pool.published_txg() > newest_txg, "the claim comes after the damaged key");
    let history = pool.history(10).await.expect("history");
    let event = history
        .iter()
        .map(|e| e.event.as_str())
        .find(|e| e.starts_with("import --rewind"))
        .unwrap_or_else(|| panic!("no rewind event in {history:?}"));
    assert!(
        event.contains(&format!("opened at txg {second_txg}"))
            && event.contains(&format!("txg {newest_txg}-{newest_txg}")),
        "{event}"
    );
    let vol = pool.volume_id("v").expect("v");
    pool.write(vol, 4096, Bytes::from(vec![9u8; 4096])).await.expect("write after rewind");
    pool.sync_txg().await.expect("sync after rewind");
    drop(pool);

    let pool = import(&store, 6, false).await.expect("the next import is an ordinary one");
    assert_eq!(first_byte(&pool).await, second_fill);
    let vol = pool.volume_id("v").expect("v");
    assert_eq!(pool.read(vol, 4096, 4096).await.expect("read")[0], 9);
}
