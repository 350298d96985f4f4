//! The pool engine against a real MinIO on loopback, through toxiproxy. Started by
//! tests/e2e/30_engine_minio.sh (which starts the servers and exports AWS_* and
//! FARDISK_TOXIPROXY); run by hand with `cargo test -p fardisk-engine --test s3_minio -- --ignored`
//! after `eval "$(scripts/toxiproxy.sh env)"`.

// Real time is the point here: a real MinIO server answers in real time.
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::objstore::open_store_url;
use fardisk_engine::pool::{CreateOptions, ImportOptions, PoolHealth};
use fardisk_engine::{Env, Pool, PoolConfig};
use std::sync::Arc;
use std::time::Duration;

fn url(prefix: &str) -> String {
    let bucket = std::env::var("FARDISK_BUCKET")
        .expect("FARDISK_BUCKET: run through tests/e2e/30_engine_minio.sh");
    format!("s3://{bucket}/{prefix}-{}", std::process::id())
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
#[ignore = "needs MinIO: run by tests/e2e/30_engine_minio.sh"]
async fn minio_round_trip_export_import() {
    let env = Env::system();
    let u = url("roundtrip");
    let store = open_store_url(&u, true).expect("s3 store");
    Pool::create(store.clone(), "tank", CreateOptions::default(), &env)
        .await
        .expect("create in MinIO");
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
#[ignore = "needs MinIO: run by tests/e2e/30_engine_minio.sh"]
async fn minio_fences_a_second_writer() {
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
    let err = a.sync_txg().await.expect_err("old writer fenced by MinIO's If-None-Match");
    assert!(err.to_string().contains("fenced"), "{err}");
    let vb = b.volume_id("v").expect("v");
    assert!(
        b.read(vb, 0, 4096).await.expect("read").iter().all(|&x| x == 0),
        "the fenced write never landed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MinIO: run by tests/e2e/30_engine_minio.sh"]
async fn minio_outage_in_the_middle_of_a_write_stream() {
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
    let mut saw_suspended = false;
    for _ in 0..150 {
        saw_suspended |= matches!(pool.health(), PoolHealth::Suspended(_));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    toxiproxy(&["outage", "off"]);
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
