//! Snapshots, clones, promote, rollback, destroys and compaction against an in-memory model, with
//! crashes and re-imports: every volume and snapshot reads back exactly as the model says, every
//! refused operation is one the model refuses, and the space auditor finds the space table equal
//! to what the maps reference. A fixed set of seeds runs in CI; `FARDISK_SOAK_SEEDS=N` runs more.

use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::clock::ManualClock;
use fardisk_engine::objstore::{open_store_url, Store};
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::rng::Rng;
use fardisk_engine::{Env, Pool, PoolConfig};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Four leaf pages of map per volume, so the space walks cross pages and levels.
const VOL_BYTES: u64 = 4 << 20;
const VOLUMES_MAX: usize = 6;

#[derive(Clone)]
struct MVol {
    data: Vec<u8>,
    /// Unique snapshot name this volume was cloned from.
    origin: Option<String>,
}

#[derive(Clone)]
struct MSnap {
    vol: String,
    seq: u64,
    data: Vec<u8>,
}

#[derive(Clone, Default)]
struct Model {
    vols: BTreeMap<String, MVol>,
    /// By snapshot name, unique across the pool in this test.
    snaps: BTreeMap<String, MSnap>,
}

impl Model {
    fn has_clones(&self, snap: &str) -> bool {
        self.vols.values().any(|v| v.origin.as_deref() == Some(snap))
    }
    fn snaps_of(&self, vol: &str) -> Vec<String> {
        let mut v: Vec<(u64, String)> = self
            .snaps
            .iter()
            .filter(|(_, s)| s.vol == vol)
            .map(|(n, s)| (s.seq, n.clone()))
            .collect();
        v.sort();
        v.into_iter().map(|(_, n)| n).collect()
    }
}

fn config() -> PoolConfig {
    PoolConfig {
        txg_timeout: None,
        segment_bytes_target: 64 << 10,
        map_cache_bytes: 0,
        roots_kept: 2,
        compact_live_percent: 70,
        ..PoolConfig::default()
    }
}

async fn import(store: Arc<dyn Store>, env: &Env) -> Pool {
    let opts = ImportOptions { force: true, config: config(), ..Default::default() };
    Pool::import(store, "snaps", opts, env.clone(), Arc::new(NoCache)).await.expect("import")
}

fn pick<'a, T>(rng: &Rng, items: &'a [T]) -> Option<&'a T> {
    if items.is_empty() {
        None
    } else {
        Some(&items[rng.below(items.len() as u64) as usize])
    }
}

async fn check_volume(pool: &Pool, name: &str, want: &[u8], what: &str) {
    let id = pool.volume_id(name).unwrap_or_else(|| panic!("{what}: volume {name} missing"));
    let got = pool
        .read(id, 0, VOL_BYTES as u32)
        .await
        .unwrap_or_else(|e| panic!("{what}: read {name}: {e}"));
    if let Some(pos) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!("{what}: volume {name} byte {pos} is {} but the model says {}", got[pos], want[pos]);
    }
}

async fn check_snapshot(pool: &Pool, m: &Model, snap: &str, what: &str) {
    let s = &m.snaps[snap];
    let info = pool.snapshot(&s.vol, snap).unwrap_or_else(|| {
        panic!(
            "{what}: snapshot {}@{snap} missing; have {:?}",
            s.vol,
            pool.snapshots().iter().map(|x| x.full_name.clone()).collect::<Vec<_>>()
        )
    });
    let got = pool
        .read(info.id, 0, VOL_BYTES as u32)
        .await
        .unwrap_or_else(|e| panic!("{what}: read {snap}: {e}"));
    if let Some(pos) = got.iter().zip(&s.data).position(|(a, b)| a != b) {
        panic!(
            "{what}: snapshot {snap} byte {pos} is {} but the model says {}",
            got[pos], s.data[pos]
        );
    }
}

async fn check_all(pool: &Pool, m: &Model, what: &str) {
    let names: Vec<String> = pool.volume_entries().into_iter().map(|v| v.name).collect();
    assert_eq!(names.len(), m.vols.len(), "{what}: volumes {names:?}");
    for (n, v) in &m.vols {
        check_volume(pool, n, &v.data, what).await;
    }
    assert_eq!(pool.snapshots().len(), m.snaps.len(), "{what}: snapshot count");
    for n in m.snaps.keys() {
        check_snapshot(pool, m, n, what).await;
    }
}

async fn run_seed(seed: u64, ops: usize) {
    let rng = Rng::new(seed);
    let env = Env { clock: Arc::new(ManualClock::default()), seed, blocking_inline: false };
    let store: Arc<dyn Store> =
        open_store_url(&format!("memory://snaps-{seed}"), true).expect("memory store");
    Pool::create(store.clone(), "snaps", CreateOptions::default(), &env).await.expect("create");
    let mut pool = import(store.clone(), &env).await;
    pool.volume_create("v0", VOL_BYTES).expect("volume");
    pool.sync_txg().await.expect("sync");
    let mut m = Model::default();
    m.vols.insert("v0".into(), MVol { data: vec![0; VOL_BYTES as usize], origin: None });
    let mut durable = m.clone();
    let (mut seq, mut next_name) = (0u64, 0u64);
    let mut counts = BTreeMap::<&str, u32>::new();
    for step in 0..ops {
        let what = format!("seed {seed} step {step}");
        let vols: Vec<String> = m.vols.keys().cloned().collect();
        let snaps: Vec<String> = m.snaps.keys().cloned().collect();
        let op = rng.below(100);
        match op {
            0..=39 => {
                let Some(v) = pick(&rng, &vols) else { continue };
                let len = 1 + rng.below(48 << 10);
                let off =
                    if rng.chance(0.5) { rng.below(256 << 10) } else { rng.below(VOL_BYTES - len) };
                let off = off.min(VOL_BYTES - len);
                let data = if rng.chance(0.1) {
                    vec![0u8; len as usize]
                } else {
                    vec![(rng.below(255) + 1) as u8; len as usize]
                };
                pool.write(pool.volume_id(v).unwrap(), off, Bytes::from(data.clone()))
                    .await
                    .expect("write");
                m.vols.get_mut(v).unwrap().data[off as usize..(off + len) as usize]
                    .copy_from_slice(&data);
                *counts.entry("write").or_default() += 1;
            }
            40..=47 => {
                pool.sync_txg().await.expect("sync");
                durable = m.clone();
            }
            48..=57 => {
                let Some(v) = pick(&rng, &vols) else { continue };
                next_name += 1;
                let name = format!("s{next_name}");
                let info = pool.snapshot_create(v, &name).await.expect("snapshot");
                assert_eq!(info.full_name, format!("{v}@{name}"));
                seq += 1;
                let data = m.vols[v].data.clone();
                m.snaps.insert(name, MSnap { vol: v.clone(), seq, data });
                durable = m.clone();
                *counts.entry("snapshot").or_default() += 1;
            }
            58..=64 => {
                let Some(s) = pick(&rng, &snaps) else { continue };
                let vol = m.snaps[s].vol.clone();
                let r = pool.snapshot_destroy(&vol, s).await;
                if m.has_clones(s) {
                    let e = r.expect_err("destroying a snapshot with clones must fail").to_string();
                    assert!(e.contains("dependent clones"), "{what}: {e}");
                } else {
                    r.unwrap_or_else(|e| panic!("{what}: destroy {vol}@{s}: {e}"));
                    m.snaps.remove(s);
                    durable = m.clone();
                    *counts.entry("destroy").or_default() += 1;
                }
            }
            65..=71 => {
                let Some(s) = pick(&rng, &snaps) else { continue };
                if m.vols.len() >= VOLUMES_MAX {
                    continue;
                }
                next_name += 1;
                let name = format!("c{next_name}");
                let vol = m.snaps[s].vol.clone();
                pool.clone_volume(&vol, s, &name)
                    .await
                    .unwrap_or_else(|e| panic!("{what}: clone {vol}@{s}: {e}"));
                m.vols
                    .insert(name, MVol { data: m.snaps[s].data.clone(), origin: Some(s.clone()) });
                durable = m.clone();
                *counts.entry("clone").or_default() += 1;
            }
            72..=75 => {
                let clones: Vec<String> = m
                    .vols
                    .iter()
                    .filter(|(_, v)| v.origin.is_some())
                    .map(|(n, _)| n.clone())
                    .collect();
                let Some(c) = pick(&rng, &clones) else { continue };
                let o = m.vols[c].origin.clone().unwrap();
                let parent = m.snaps[&o].vol.clone();
                pool.promote(c).await.unwrap_or_else(|e| panic!("{what}: promote {c}: {e}"));
                let moved: Vec<String> = m
                    .snaps
                    .iter()
                    .filter(|(_, s)| s.vol == parent && s.seq <= m.snaps[&o].seq)
                    .map(|(n, _)| n.clone())
                    .collect();
                for n in moved {
                    m.snaps.get_mut(&n).unwrap().vol = c.clone();
                }
                let parent_origin = m.vols[&parent].origin.clone();
                m.vols.get_mut(&parent).unwrap().origin = Some(o);
                m.vols.get_mut(c).unwrap().origin = parent_origin;
                durable = m.clone();
                *counts.entry("promote").or_default() += 1;
            }
            76..=80 => {
                let Some(v) = pick(&rng, &vols) else { continue };
                let own = m.snaps_of(v);
                let Some(target) = pick(&rng, &own).cloned() else { continue };
                let newer: Vec<String> =
                    own.iter().skip_while(|n| **n != target).skip(1).cloned().collect();
                let r = pool.rollback(v, &target, true).await;
                if newer.iter().any(|n| m.has_clones(n)) {
                    r.expect_err("rollback past a snapshot with clones must fail");
                    continue;
                }
                r.unwrap_or_else(|e| panic!("{what}: rollback {v}@{target}: {e}"));
                for n in newer {
                    m.snaps.remove(&n);
                }
                m.vols.get_mut(v).unwrap().data = m.snaps[&target].data.clone();
                durable = m.clone();
                *counts.entry("rollback").or_default() += 1;
            }
            81..=84 => {
                let Some(v) = pick(&rng, &vols) else { continue };
                if m.vols.len() == 1 {
                    continue;
                }
                let own = m.snaps_of(v);
                let r = pool.volume_destroy_recursive(v).await;
                if own.iter().any(|n| m.has_clones(n)) {
                    r.expect_err("destroying a volume whose snapshot has clones must fail");
                    continue;
                }
                r.unwrap_or_else(|e| panic!("{what}: destroy -r {v}: {e}"));
                for n in own {
                    m.snaps.remove(&n);
                }
                m.vols.remove(v);
                durable = m.clone();
                *counts.entry("volume destroy").or_default() += 1;
            }
            85..=89 => {
                pool.compact_now().await.expect("compaction");
                durable = m.clone();
                *counts.entry("compact").or_default() += 1;
            }
            90..=94 => {
                let Some(s) = pick(&rng, &snaps) else { continue };
                check_snapshot(&pool, &m, s, &what).await;
                let Some(v) = pick(&rng, &vols) else { continue };
                check_volume(&pool, v, &m.vols[v].data, &what).await;
            }
            95..=97 => {
                pool.sync_txg().await.expect("sync");
                durable = m.clone();
                pool.audit_space().await.unwrap_or_else(|e| panic!("{what}: {e}"));
                *counts.entry("audit").or_default() += 1;
            }
            98..=99 => {
                // A crash: the pool goes away without export; what was published is what remains.
                drop(pool);
                pool = import(store.clone(), &env).await;
                m = durable.clone();
                check_all(&pool, &m, &format!("{what} after crash")).await;
                *counts.entry("crash").or_default() += 1;
            }
            _ => unreachable!("below 100"),
        }
        // After every change of structure (and every compaction), every volume and snapshot.
        let structural = (48..=89).contains(&op);
        if structural
            && (m.snaps.len() != snaps.len()
                || m.vols.len() != vols.len()
                || !(58..=64).contains(&op))
        {
            check_all(&pool, &m, &format!("{what} after op {op}")).await;
        }
    }
    pool.sync_txg().await.expect("final sync");
    pool.compact_now().await.expect("final compaction");
    pool.audit_space().await.unwrap_or_else(|e| panic!("seed {seed} final audit: {e}"));
    pool.export().await.expect("export");
    let pool = import(store.clone(), &env).await;
    check_all(&pool, &m, &format!("seed {seed} after export/import")).await;
    let audit =
        pool.audit_space().await.unwrap_or_else(|e| panic!("seed {seed} audit after import: {e}"));
    // Every snapshot and clone destroyed, then every volume: the pool holds nothing.
    for s in pool.snapshots().iter().filter(|s| !s.clones.is_empty()) {
        for c in &s.clones {
            pool.promote(c).await.ok();
        }
    }
    let mut left = pool.volume_entries().len();
    for _ in 0..VOLUMES_MAX * 2 {
        if left == 0 {
            break;
        }
        for v in pool.volume_entries() {
            let _ = pool.volume_destroy_recursive(&v.name).await;
        }
        left = pool.volume_entries().len();
    }
    assert_eq!(left, 0, "seed {seed}: volumes left after destroying all");
    pool.sync_txg().await.expect("sync after destroying all");
    pool.audit_space()
        .await
        .unwrap_or_else(|e| panic!("seed {seed} audit after destroying all: {e}"));
    let st = pool.status();
    eprintln!("seed {seed}: {ops} ops {counts:?}; audit {audit:?}; after destroying all: live {} B, logical {} B",
        st.space.live_bytes, st.space.logical_bytes);
    assert_eq!(
        st.space.logical_bytes, 0,
        "seed {seed}: nothing allocated once everything is destroyed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_fixed_seeds() {
    for seed in 1..=4u64 {
        run_seed(seed, 300).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_soak() {
    let n: u64 = std::env::var("FARDISK_SOAK_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    let start: u64 =
        std::env::var("FARDISK_SOAK_START").ok().and_then(|s| s.parse().ok()).unwrap_or(1000);
    for seed in start..start + n {
        run_seed(seed, 1500).await;
    }
}
