//! The pool with a mirrored intent log on real files: every sync request that returned is
//! readable after a crash (the process "dies" without syncing its txg), also with one mirror leg
//! destroyed; without the log the pool refuses to import unless told to, and then opens at its
//! recovery point.

use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::clock::ManualClock;
use fardisk_engine::objstore::{open_store_url, Store};
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::rng::Rng;
use fardisk_engine::root::VdevEntry;
use fardisk_engine::{Env, Pool, PoolConfig};
use fardisk_slog::{FormatOptions, IntentLog, VdevSpec};
use std::path::PathBuf;
use std::sync::Arc;

const VOL_BYTES: u64 = 4 << 20;

struct Fixture {
    dir: PathBuf,
    store: Arc<dyn Store>,
    env: Env,
    legs: Vec<PathBuf>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn config() -> PoolConfig {
    PoolConfig { txg_timeout: None, sync_attempts_max: Some(1), ..PoolConfig::default() }
}

async fn fixture(name: &str, seed: u64) -> Fixture {
    let dir = std::env::temp_dir().join(format!("fardisk-intent-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let legs = vec![dir.join("log-a"), dir.join("log-b")];
    let guid = Rng::new(seed).next_u128();
    let mut fo = FormatOptions::new(Arc::new(fardisk_slog::FileProvider::default()), seed);
    fo.size_bytes = 64 << 20;
    let cfg = IntentLog::format("tank", guid, &VdevSpec::Mirror(legs.clone()), &fo)
        .expect("format log mirror");
    let vdev = VdevEntry {
        role: fardisk_engine::root::VdevRole::Log,
        mirror: true,
        guid: cfg.vdev_guid,
        paths: legs.iter().map(|p| p.display().to_string()).collect(),
    };
    let env = Env { clock: Arc::new(ManualClock::default()), seed, blocking_inline: false };
    let store = open_store_url(&format!("memory://intent-{name}"), true).expect("store");
    Pool::create(
        store.clone(),
        "tank",
        CreateOptions { vdevs: vec![vdev], pool_guid: Some(guid), ..Default::default() },
        &env,
    )
    .await
    .expect("create");
    Fixture { dir, store, env, legs }
}

async fn import(f: &Fixture, missing_log: bool) -> fardisk_engine::Result<Pool> {
    Pool::import(
        f.store.clone(),
        "tank",
        ImportOptions { force: true, config: config(), missing_log, ..Default::default() },
        f.env.clone(),
        Arc::new(NoCache),
    )
    .await
}

/// Writes at random, acknowledging with sync requests; returns the acknowledged image.
async fn workload(pool: &Pool, rng: &Rng, image: &mut [u8], rounds: usize) -> Vec<u8> {
    let vol = pool.volume_id("v").expect("v");
    let mut acked = image.to_vec();
    for _ in 0..rounds {
        for _ in 0..1 + rng.below(6) {
            let len = 1 + rng.below(20_000);
            let off = rng.below(VOL_BYTES - len);
            let fill = (1 + rng.below(255)) as u8;
            pool.write(vol, off, Bytes::from(vec![fill; len as usize])).await.expect("write");
            image[off as usize..(off + len) as usize].fill(fill);
        }
        if rng.chance(0.15) {
            let off = rng.below(VOL_BYTES / 2);
            pool.zero(vol, off, 64 << 10).await.expect("trim");
            image[off as usize..(off + (64 << 10)) as usize].fill(0);
        }
        pool.sync_request().await.expect("sync request");
        acked.copy_from_slice(image);
    }
    acked
}

async fn assert_image(pool: &Pool, want: &[u8], what: &str) {
    let vol = pool.volume_id("v").expect("v");
    let got = pool.read(vol, 0, VOL_BYTES as u32).await.expect("read");
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!("{what}: byte {i} is {} but an acknowledged write put {}", got[i], want[i]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_crashes_through_the_log() {
    for seed in 1..=4u64 {
        let f = fixture(&format!("crash{seed}"), seed).await;
        let rng = Rng::new(seed);
        let pool = import(&f, false).await.expect("import");
        pool.volume_create("v", VOL_BYTES).expect("volume");
        pool.sync_txg().await.expect("sync");
        let mut image = vec![0u8; VOL_BYTES as usize];
        for crash in 0..3 {
            let pool = import(&f, false).await.expect("import after crash");
            let acked = workload(&pool, &rng, &mut image, 20).await;
            let log = pool.log().expect("the pool has a log");
            assert!(log.stats().sync_requests >= 20, "sync requests went to the log");
            let published = pool.published_txg();
            drop(pool); // Crash: nothing more reaches the store.
            image.copy_from_slice(&acked);
            let again = import(&f, false).await.expect("import replays the log");
            assert!(again.published_txg() > published, "replay committed the records to the store");
            assert_image(&again, &acked, &format!("seed {seed} crash {crash}")).await;
            drop(again);
        }
    }
}

/// A crash, then an import that dies too, after each of its first store mutations in turn:
/// whatever it got to (the claim root published, the replay not yet), the next import replays
/// every acknowledged write. Before the fix an import that died between its claim root and its
/// replay's publish left the claim as the newest root, and the next import replayed only
/// records newer than the claim's txg: the dead writer's records, tagged with that same txg
/// number, were skipped (found by e2e 54 killing engines under `--holder`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_that_dies_after_its_claim_loses_no_acknowledged_write() {
    use fardisk_engine::objstore::{FaultPlan, FaultyStore};
    let mut f = fixture("claim-crash", 17).await;
    let faulty = Arc::new(FaultyStore::new(f.store.clone(), FaultPlan::default(), 17));
    f.store = faulty.clone();
    let rng = Rng::new(17);
    let pool = import(&f, false).await.expect("import");
    pool.volume_create("v", VOL_BYTES).expect("volume");
    pool.sync_txg().await.expect("sync");
    let mut image = vec![0u8; VOL_BYTES as usize];
    let mut pool = pool;
    let mut died_after_some_mutations = 0;
    for budget in 0..10u64 {
        let acked = workload(&pool, &rng, &mut image, 6).await;
        drop(pool); // Crash: the acknowledged writes are in the log only.
        image.copy_from_slice(&acked);
        let published_before = faulty.mutations();
        faulty.set_plan(FaultPlan {
            crash_after_mutations: Some(published_before + budget),
            ..FaultPlan::default()
        });
        match import(&f, false).await {
            Ok(doomed) => drop(doomed), // It got through: it dies before serving.
            Err(_) => died_after_some_mutations += u32::from(faulty.mutations() > published_before),
        }
        faulty.set_plan(FaultPlan::default());
        pool = import(&f, false).await.expect("the import after a dead import");
        assert_image(&pool, &acked, &format!("an import that died after {budget} mutations")).await;
    }
    assert!(died_after_some_mutations > 0, "some dead import had written to the store");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destroyed_mirror_leg_loses_nothing_and_a_missing_log_is_refused() {
    let f = fixture("legs", 9).await;
    let rng = Rng::new(9);
    let pool = import(&f, false).await.expect("import");
    pool.volume_create("v", VOL_BYTES).expect("volume");
    pool.sync_txg().await.expect("sync");
    let mut image = vec![0u8; VOL_BYTES as usize];
    let recovery = workload(&pool, &rng, &mut image, 5).await;
    pool.sync_txg().await.expect("recovery point in the store");
    let acked = workload(&pool, &rng, &mut image, 15).await;
    drop(pool);
    std::fs::remove_file(&f.legs[1]).expect("destroy leg b");
    let pool = import(&f, false).await.expect("one surviving leg is enough");
    assert_image(&pool, &acked, "after losing one mirror leg").await;
    let status = pool.log().expect("log").status();
    assert!(
        format!("{status:?}").to_ascii_uppercase().contains("DEGRADED")
            || format!("{status:?}").contains("Unavail"),
        "status shows the lost leg: {status:?}"
    );
    let more = workload(&pool, &rng, &mut image, 5).await;
    drop(pool);
    // Now the whole log is gone: import refuses and names the recovery point.
    std::fs::remove_file(&f.legs[0]).expect("destroy leg a");
    let err = import(&f, false).await.expect_err("a missing log is refused");
    let msg = err.to_string();
    assert!(
        msg.contains("missing") && msg.contains("recovery point") && msg.contains("--missing-log"),
        "{msg}"
    );
    let pool = import(&f, true).await.expect("--missing-log imports at the recovery point");
    let published_state =
        pool.read(pool.volume_id("v").expect("v"), 0, VOL_BYTES as u32).await.expect("read");
    // The last published txg is the one the degraded import's replay committed: `acked`. The
    // writes acknowledged after it (`more`) lived only on the destroyed log.
    assert!(published_state[..] == acked[..], "the pool opens exactly at its recovery point");
    assert!(more[..] != acked[..] && recovery[..] != acked[..], "the workload changed the image");
}

/// `fardisk add/replace/remove` on a running pool: a log added to a pool that had none takes the
/// sync requests at once and is replayed after a crash; a leg replaced while DEGRADED is
/// resilvered with records only the surviving leg held (the import reads the new leg alone);
/// removing the last log vdev drains it, and the pool then imports with no log device at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_devices_added_replaced_and_removed_at_run_time_lose_nothing() {
    let dir = std::env::temp_dir().join(format!("fardisk-intent-admin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let env = Env { clock: Arc::new(ManualClock::default()), seed: 21, blocking_inline: false };
    let store = open_store_url("memory://intent-admin", true).expect("store");
    Pool::create(store.clone(), "tank", CreateOptions::default(), &env).await.expect("create");
    let f = Fixture {
        dir: dir.clone(),
        store,
        env,
        legs: vec![dir.join("log-a"), dir.join("log-b"), dir.join("log-c")],
    };
    let rng = Rng::new(21);
    let mut image = vec![0u8; VOL_BYTES as usize];

    let pool = import(&f, false).await.expect("import");
    assert!(pool.log().is_none(), "created without a log");
    pool.volume_create("v", VOL_BYTES).expect("volume");
    workload(&pool, &rng, &mut image, 3).await;
    let mut fo = FormatOptions::new(Arc::new(fardisk_slog::FileProvider::default()), 21);
    fo.size_bytes = 64 << 20;
    let mirror = f.legs[..2].to_vec();
    let cfg = IntentLog::format("tank", pool.guid(), &VdevSpec::Mirror(mirror.clone()), &fo)
        .expect("format");
    let paths: Vec<String> = mirror.iter().map(|p| p.display().to_string()).collect();
    pool.add_log_vdev(VdevEntry {
        role: fardisk_engine::root::VdevRole::Log,
        mirror: true,
        guid: cfg.vdev_guid,
        paths: paths.clone(),
    })
    .await
    .expect("add log");
    assert!(pool.check_device_unused(&paths[0]).is_err(), "a device in use is refused");
    let acked = workload(&pool, &rng, &mut image, 10).await;
    assert!(
        pool.log().expect("log attached").stats().sync_requests >= 9,
        "sync requests went to the new log"
    );
    drop(pool);
    let pool = import(&f, false).await.expect("import replays the added log");
    assert_image(&pool, &acked, "after a crash with the added log").await;

    std::fs::remove_file(&f.legs[1]).expect("lose leg b");
    let acked = workload(&pool, &rng, &mut image, 6).await;
    let (b, c) = (f.legs[1].display().to_string(), f.legs[2].display().to_string());
    pool.replace_log_leg(&b, &c, false).await.expect("replace leg b by c");
    let legs: Vec<String> = pool.vdevs().iter().flat_map(|v| v.paths.clone()).collect();
    assert_eq!(legs, vec![paths[0].clone(), c.clone()], "the root names the new leg");
    drop(pool);
    std::fs::remove_file(&f.legs[0]).expect("lose leg a: only the resilvered leg is left");
    let pool = import(&f, false).await.expect("import from the resilvered leg");
    assert_image(&pool, &acked, "records copied by the resilver").await;

    let acked = workload(&pool, &rng, &mut image, 4).await;
    let removed = pool.remove_device(&c).await.expect("remove the last log vdev");
    assert_eq!(removed.role, "log");
    assert!(pool.log().is_none() && pool.vdevs().is_empty(), "no log left");
    assert_image(&pool, &acked, "after removing the log").await;
    let acked = workload(&pool, &rng, &mut image, 3).await;
    drop(pool);
    std::fs::remove_file(&f.legs[2]).expect("the removed device can go");
    let pool = import(&f, false).await.expect("import without any log device");
    assert_image(&pool, &acked, "sync requests without a log went to the store").await;
    assert!(pool.remove_device("/no/such/device").await.is_err(), "an unknown device is refused");
}

/// `log_write_ahead=on`: plain writes' records reach the log devices before any sync request,
/// so the sync request that follows writes nothing and only flushes; the writes it acknowledged
/// survive a crash. With `off` (the default) the sync request writes them itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_request_after_written_ahead_writes_only_flushes_and_they_survive_a_crash() {
    let f = fixture("ahead", 21).await;
    let pool = import(&f, false).await.expect("import");
    pool.volume_create("v", VOL_BYTES).expect("volume");
    pool.sync_txg().await.expect("sync");
    let vol = pool.volume_id("v").expect("v");
    let log = pool.log().expect("the pool has a log");
    let mut image = vec![0u8; VOL_BYTES as usize];
    // Writes are written ahead only while sync requests come: none came yet.
    pool.set_prop("log_write_ahead", "on").expect("set");
    pool.write(vol, VOL_BYTES - 4096, Bytes::from(vec![9u8; 4096])).await.expect("write");
    image[(VOL_BYTES - 4096) as usize..].fill(9);
    assert!(log.wait_idle(std::time::Duration::from_secs(20)), "log writer idle");
    assert_eq!(log.stats().blocks_written_ahead, 0, "no sync request yet: nothing ahead");
    pool.sync_request().await.expect("sync request");
    for (i, ahead) in [(0u64, true), (1, false), (2, true)] {
        pool.set_prop("log_write_ahead", if ahead { "on" } else { "off" }).expect("set");
        for block in 0..8u64 {
            let off = (i * 8 + block) * 4096;
            let fill = (1 + i * 8 + block) as u8;
            pool.write(vol, off, Bytes::from(vec![fill; 4096])).await.expect("write");
            image[off as usize..off as usize + 4096].fill(fill);
        }
        // The writer has done what it was given: with write-ahead, the records are on the legs.
        assert!(log.wait_idle(std::time::Duration::from_secs(20)), "log writer idle");
        let before = log.stats();
        pool.sync_request().await.expect("sync request");
        let after = log.stats();
        if ahead {
            assert!(before.blocks_written_ahead > 0, "round {i}: nothing was written ahead");
            assert_eq!(after.device_writes, before.device_writes, "round {i}: the sync wrote");
            assert_eq!(after.flushes_without_write, before.flushes_without_write + 1);
        } else {
            assert_eq!(after.device_writes, before.device_writes + 1, "round {i}: one block");
            assert_eq!(after.blocks_written_ahead, before.blocks_written_ahead);
        }
    }
    drop(pool); // Crash: nothing more reaches the store.
    let again = import(&f, false).await.expect("import replays the log");
    assert_image(&again, &image, "after the crash").await;
}

async fn import_with_dirty_max(f: &Fixture, dirty_bytes_max: u64) -> Pool {
    let opts = ImportOptions {
        force: true,
        config: PoolConfig { dirty_bytes_max, ..config() },
        ..Default::default()
    };
    Pool::import(f.store.clone(), "tank", opts, f.env.clone(), Arc::new(NoCache))
        .await
        .expect("import")
}

/// Acknowledges 3 MiB of distinct 64 KiB writes from the log, no txg published, then crashes.
async fn crash_with_3_mib_in_the_log(pool: Pool, image: &mut [u8], round: u8) {
    let vol = pool.volume_id("v").expect("v");
    for i in 0..48u64 {
        let fill = round.wrapping_mul(50).wrapping_add(i as u8) | 1;
        pool.write(vol, i << 16, Bytes::from(vec![fill; 1 << 16])).await.expect("write");
        image[(i << 16) as usize..((i + 1) << 16) as usize].fill(fill);
        pool.sync_request().await.expect("sync request");
    }
    drop(pool); // Crash: nothing more reaches the store.
}

/// A replay is not throttled: its records are in the log already, no syncer runs until it is
/// done, and its dirty data is at most what the crashed writer held. Before, every replayed
/// write past 60 % of `dirty_bytes_max` was delayed, and with the limit lowered at import below
/// what the log held the replay waited for a sync that nothing would start: the import hung.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_is_not_throttled_and_imports_under_a_lower_dirty_limit() {
    let f = fixture("throttle", 31).await;
    let pool = import_with_dirty_max(&f, 4 << 20).await;
    pool.volume_create("v", VOL_BYTES).expect("volume");
    pool.sync_txg().await.expect("sync");
    let mut image = vec![0u8; VOL_BYTES as usize];
    crash_with_3_mib_in_the_log(pool, &mut image, 1).await;
    // 3 MiB of 4: 75 % of the limit, past the 60 % where the throttle starts.
    let again = import_with_dirty_max(&f, 4 << 20).await;
    assert_eq!(again.status().throttle_delays, 0, "the replay was throttled");
    assert_image(&again, &image, "after the replay").await;
    crash_with_3_mib_in_the_log(again, &mut image, 2).await;
    #[allow(clippy::disallowed_methods)] // A real bound on a hang, whatever the pool's clock does.
    let lowered = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        import_with_dirty_max(&f, 1 << 20),
    )
    .await
    .expect("the import with dirty_bytes_max below the log's data finishes");
    assert_image(&lowered, &image, "after the replay under a lower limit").await;
}
