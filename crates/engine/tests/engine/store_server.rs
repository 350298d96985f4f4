//! The pool engine against a real store server on loopback, through toxiproxy: MinIO, the Versity
//! S3 gateway or Azurite (az://). Started by tests/e2e/30_engine_minio.sh (which starts the servers
//! and exports the server's variables, FARDISK_STORE_URL_BASE and FARDISK_TOXIPROXY; the store is
//! chosen by FARDISK_E2E_STORE); by hand: `scripts/minio.sh start`, `scripts/toxiproxy.sh start`,
//! `eval "$(scripts/toxiproxy.sh env)"`, then
//! `cargo test -p fardisk-engine --test engine store_server:: -- --ignored`.

// Real time is the point here: a real MinIO server answers in real time.
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::objstore::{
    check_store_capabilities, open_store_url, PutMode, StoreErrorKind, StoreUse, RACERS,
};
use fardisk_engine::pool::{CreateOptions, ImportOptions, PoolHealth};
use fardisk_engine::{Env, Pool, PoolConfig};
use std::sync::Arc;
use std::time::Duration;

/// `s3://BUCKET` or `az://CONTAINER` (FARDISK_STORE_URL_BASE), else `s3://$FARDISK_BUCKET`.
fn url(prefix: &str) -> String {
    let base = std::env::var("FARDISK_STORE_URL_BASE").unwrap_or_else(|_| {
        let bucket = std::env::var("FARDISK_BUCKET")
            .expect("FARDISK_BUCKET: run through tests/e2e/30_engine_minio.sh");
        format!("s3://{bucket}")
    });
    format!("{}/{prefix}-{}", base.trim_end_matches('/'), std::process::id())
}

fn toxiproxy(args: &[&str]) {
    let cmd =
        std::env::var("FARDISK_TOXIPROXY").expect("FARDISK_TOXIPROXY names scripts/toxiproxy.sh");
    let ok =
        std::process::Command::new(cmd).args(args).status().expect("toxiproxy.sh runs").success();
    assert!(ok, "toxiproxy.sh {args:?} failed");
}

fn config() -> PoolConfig {
    PoolConfig { txg_timeout: None, ..PoolConfig::default() }
}

fn pattern(i: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|j| ((i * 131 + j * 7) % 251) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a store server: run by tests/e2e/30_engine_minio.sh"]
async fn store_round_trip_export_import() {
    let env = Env::system();
    let u = url("roundtrip");
    let store = open_store_url(&u, true).expect("s3 store");
    Pool::create(store.clone(), "tank", CreateOptions::default(), &env)
        .await
        .expect("create on the server");
    let pool = Pool::import(
        store.clone(),
        "tank",
        ImportOptions { force: false, config: config(), missing_log: false, ..Default::default() },
        env.clone(),
        Arc::new(NoCache),
    )
    .await
    .expect("import");
    let vol = pool.volume_create("v", 256 << 20).expect("volume");
    for i in 0..32u64 {
        pool.write(vol, i * (1 << 20) + 512, Bytes::from(pattern(i, 1 << 20)))
            .await
            .expect("write");
    }
    pool.export().await.expect("export");
    let again = Pool::import(
        store,
        "tank",
        ImportOptions { force: false, config: config(), missing_log: false, ..Default::default() },
        env,
        Arc::new(NoCache),
    )
    .await
    .expect("reimport");
    let vol = again.volume_id("v").expect("volume survives");
    for i in 0..32u64 {
        let got = again.read(vol, i * (1 << 20) + 512, 1 << 20).await.expect("read");
        assert!(got[..] == pattern(i, 1 << 20)[..], "chunk {i} reads back");
    }
    let s = again.status();
    assert_eq!(s.space.logical_bytes, (32 << 20) + 4096, "32 MiB + one partial block allocated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a store server: run by tests/e2e/30_engine_minio.sh"]
async fn store_fences_a_second_writer() {
    let env = Env::system();
    let store = open_store_url(&url("fence"), true).expect("s3 store");
    Pool::create(store.clone(), "tank", CreateOptions::default(), &env).await.expect("create");
    let a = Pool::import(
        store.clone(),
        "tank",
        ImportOptions { force: false, config: config(), missing_log: false, ..Default::default() },
        env.clone(),
        Arc::new(NoCache),
    )
    .await
    .expect("import");
    let vol = a.volume_create("v", 1 << 20).expect("volume");
    a.sync_txg().await.expect("sync");
    let refused = Pool::import(
        store.clone(),
        "tank",
        ImportOptions { force: false, config: config(), missing_log: false, ..Default::default() },
        env.clone(),
        Arc::new(NoCache),
    )
    .await;
    assert!(refused
        .expect_err("second import refused")
        .to_string()
        .contains("is imported by host"));
    let b = Pool::import(
        store.clone(),
        "tank",
        ImportOptions { force: true, config: config(), missing_log: false, ..Default::default() },
        env.clone(),
        Arc::new(NoCache),
    )
    .await
    .expect("forced import");
    a.write(vol, 0, Bytes::from(vec![1u8; 4096])).await.expect("buffered");
    let err = a.sync_txg().await.expect_err("old writer fenced by the server's If-None-Match");
    assert!(err.to_string().contains("fenced"), "{err}");
    let vb = b.volume_id("v").expect("v");
    assert!(
        b.read(vb, 0, 4096).await.expect("read").iter().all(|&x| x == 0),
        "the fenced write never landed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a store server: run by tests/e2e/30_engine_minio.sh"]
async fn store_outage_in_the_middle_of_a_write_stream() {
    let env = Env::system();
    let store = open_store_url(&url("outage"), true).expect("s3 store");
    Pool::create(store.clone(), "tank", CreateOptions::default(), &env).await.expect("create");
    let mut cfg = PoolConfig {
        txg_timeout: Some(Duration::from_secs(1)),
        dirty_bytes_max: 64 << 20,
        dirty_sync_bytes: 8 << 20,
        ..PoolConfig::default()
    };
    cfg.retry.budget_ms = 2_000;
    let pool = Pool::import(
        store.clone(),
        "tank",
        ImportOptions {
            force: false,
            config: cfg.clone(),
            missing_log: false,
            ..Default::default()
        },
        env.clone(),
        Arc::new(NoCache),
    )
    .await
    .expect("import");
    let vol = pool.volume_create("v", 1 << 30).expect("volume");
    // A MiB only the store holds (no cache here): read during the outage, it waits for the store
    // (failmode=wait) instead of failing after the 2 s retry budget.
    const COLD_AT: u64 = 512 << 20;
    pool.write(vol, COLD_AT, Bytes::from(pattern(999, 1 << 20))).await.expect("cold MiB");
    pool.sync_txg().await.expect("sync");
    let writer = {
        let p = pool.clone();
        tokio::spawn(async move {
            for i in 0..96u64 {
                p.write(vol, i << 20, Bytes::from(pattern(i, 1 << 20)))
                    .await
                    .expect("writes never fail inside an outage");
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(700)).await;
    toxiproxy(&["outage", "on"]);
    let reader = {
        let p = pool.clone();
        tokio::spawn(async move { p.read(vol, COLD_AT, 1 << 20).await })
    };
    let mut saw_suspended = false;
    let mut reads_waiting_max = 0;
    for _ in 0..150 {
        saw_suspended |= matches!(pool.health(), PoolHealth::Suspended(_));
        reads_waiting_max = reads_waiting_max.max(pool.status().reads_waiting_for_store);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!reader.is_finished(), "7.5 s into the outage the read still waits: {:?}", {
        if reader.is_finished() {
            Some(reader.await)
        } else {
            None
        }
    });
    assert_eq!(reads_waiting_max, 1, "status counted the waiting read");
    toxiproxy(&["outage", "off"]);
    let cold = tokio::time::timeout(Duration::from_secs(120), reader)
        .await
        .expect("the read ends after the outage")
        .expect("join")
        .expect("the read that waited succeeds");
    assert!(cold[..] == pattern(999, 1 << 20)[..], "the read that waited returns the stored bytes");
    tokio::time::timeout(Duration::from_secs(300), writer)
        .await
        .expect("the stream finishes after the outage")
        .expect("writer");
    pool.sync_txg().await.expect("sync after the outage");
    assert!(saw_suspended, "status showed SUSPENDED during the outage");
    assert_eq!(pool.health(), PoolHealth::Online, "the pool came back by itself");
    pool.export().await.expect("export");
    let again = Pool::import(
        store,
        "tank",
        ImportOptions { force: false, config: cfg, missing_log: false, ..Default::default() },
        env,
        Arc::new(NoCache),
    )
    .await
    .expect("reimport");
    let vol = again.volume_id("v").expect("v");
    for i in 0..96u64 {
        assert!(
            again.read(vol, i << 20, 1 << 20).await.expect("read")[..] == pattern(i, 1 << 20)[..],
            "MiB {i}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a store server: run by tests/e2e/30_engine_minio.sh"]
async fn store_passes_the_capability_check_and_every_race_has_one_winner() {
    let store = open_store_url(&url("capability"), true).expect("store");
    check_store_capabilities(store.as_ref(), 0x5eed, StoreUse::Create)
        .await
        .expect("the server has every capability");
    assert!(store.list("").await.expect("list").is_empty(), "the check keeps nothing");
    // Races straight to the server (no retry layer between): exactly one winner each time, and
    // the object holds its bytes.
    for round in 0..10u8 {
        let key = format!("race/{round}");
        let payloads: Vec<Bytes> =
            (0..RACERS as u8).map(|i| Bytes::from(vec![round * 16 + i; 8192])).collect();
        let answers = futures::future::join_all(
            payloads.iter().map(|p| store.put(&key, p.clone(), PutMode::Create)),
        )
        .await;
        let winners: Vec<usize> =
            answers.iter().enumerate().filter(|(_, a)| a.is_ok()).map(|(i, _)| i).collect();
        for a in answers.iter().filter_map(|a| a.as_ref().err()) {
            assert_eq!(a.kind, StoreErrorKind::AlreadyExists, "round {round}: {a}");
        }
        assert_eq!(winners.len(), 1, "round {round}: one winner of {RACERS}");
        let kept = store.get(&key).await.expect("get");
        assert!(kept == payloads[winners[0]], "round {round}: the object is the winner's");
        store.delete(&key).await.expect("delete");
    }
}
