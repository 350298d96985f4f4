//! cache-reads: what the ARC and the L2ARC buy for reads from a store 40 ms away (issue #4).
//!
//! In one run:
//! * local: random 4 KiB O_DIRECT reads of a local file the size of the working set (the page
//!   cache never serves them: the limit for a read from local flash);
//! * fardisk: the same random reads through the pool, whose working set is larger than its ARC
//!   but fits its L2ARC (a local file), store made far away by `SimulatedStore`;
//! * after export and import with the L2ARC rebuilt from its device: the first pass over the
//!   working set, and how much of it the L2ARC served;
//! * scan resistance, at the cache alone: a hot set's hit ratio before and after one sequential
//!   scan of 4x the cache size, for the ARC and for a plain LRU of the same size.

use crate::data::xorshift64 as next;
use crate::far_store::far_file_store;
use crate::stats::round3;
use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use fardisk_arc::{
    AdaptiveCache, ArcConfig, BlockKey, InsertKind, L2Arc, L2ArcConfig, MonotonicClock,
};
use fardisk_engine::arc_cache::ArcBlockCache;
use fardisk_engine::clock::{Clock, SystemClock};
use fardisk_engine::pool::{CreateOptions, ImportOptions};
use fardisk_engine::{Env, Pool, PoolConfig};
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const BLOCK: u64 = 4096;
const MIB: u64 = 1 << 20;

#[derive(Debug, Clone)]
pub struct Args {
    pub dir: PathBuf,
    pub arc_mib: u64,
    pub working_set_mib: u64,
    pub l2_mib: u64,
    pub readers: usize,
    pub seconds: u64,
    pub latency_ms: u64,
    pub seed: u64,
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[(((sorted.len() - 1) as f64) * p / 100.0).round() as usize] as f64
}

struct Reads {
    latencies_us: Vec<u64>,
    elapsed_us: u64,
    /// The process's CPU time and context switches over the run (all threads).
    usage: Usage,
}

/// CPU time and context switches of this process (getrusage), to compare what each read costs
/// the machine: on a shared host the rate depends on the neighbours, the cost per read much less.
#[derive(Clone, Copy, Default)]
struct Usage {
    cpu_us: u64,
    context_switches: u64,
}

impl Usage {
    fn now() -> Usage {
        // SAFETY: getrusage fills the zeroed struct we pass; no other memory is touched.
        let ru = unsafe {
            let mut ru: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_SELF, &mut ru);
            ru
        };
        let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        Usage {
            cpu_us: us(ru.ru_utime) + us(ru.ru_stime),
            context_switches: (ru.ru_nvcsw + ru.ru_nivcsw) as u64,
        }
    }

    fn since(self, start: Usage) -> Usage {
        Usage {
            cpu_us: self.cpu_us - start.cpu_us,
            context_switches: self.context_switches - start.context_switches,
        }
    }
}

impl Reads {
    fn cpu_us_per_read(&self) -> f64 {
        self.usage.cpu_us as f64 / self.latencies_us.len().max(1) as f64
    }
    fn context_switches_per_read(&self) -> f64 {
        self.usage.context_switches as f64 / self.latencies_us.len().max(1) as f64
    }
    fn ops_per_s(&self) -> f64 {
        self.latencies_us.len() as f64 / (self.elapsed_us.max(1) as f64 / 1e6)
    }
    fn p(&mut self, p: f64) -> f64 {
        self.latencies_us.sort_unstable();
        percentile(&self.latencies_us, p)
    }
}

fn local_reads(path: &Path, blocks: u64, a: &Args, clock: &Arc<dyn Clock>) -> Result<Reads> {
    let file = Arc::new(
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .context("O_DIRECT open")?,
    );
    let t0 = clock.mono_us();
    let usage0 = Usage::now();
    let deadline = t0 + a.seconds * 1_000_000;
    let handles: Vec<_> = (0..a.readers)
        .map(|r| {
            let (file, clock, seed) = (file.clone(), clock.clone(), a.seed + r as u64 + 1);
            std::thread::spawn(move || -> std::io::Result<Vec<u64>> {
                let mut buf = fardisk_slog::AlignedBuf::zeroed(BLOCK as usize);
                let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                let mut out = Vec::new();
                while clock.mono_us() < deadline && out.len() < 5_000_000 {
                    let s = clock.mono_us();
                    file.read_exact_at(&mut buf, next(&mut rng) % blocks * BLOCK)?;
                    out.push(clock.mono_us() - s);
                }
                Ok(out)
            })
        })
        .collect();
    let mut latencies_us = Vec::new();
    for h in handles {
        latencies_us.extend(h.join().map_err(|_| anyhow!("reader panicked"))??);
    }
    Ok(Reads { latencies_us, elapsed_us: clock.mono_us() - t0, usage: Usage::now().since(usage0) })
}

/// Random 4 KiB reads through the pool: for `seconds`, or (`seconds` = 0) one pass over every
/// block in a random order.
async fn pool_reads(
    pool: &Pool,
    blocks: u64,
    readers: usize,
    seconds: u64,
    seed: u64,
    clock: &Arc<dyn Clock>,
) -> Result<Reads> {
    let vol = pool.volume_id("v").ok_or_else(|| anyhow!("no volume"))?;
    let mut order: Vec<u64> = (0..blocks).collect();
    let mut rng = seed | 1;
    for i in (1..order.len()).rev() {
        order.swap(i, (next(&mut rng) % (i as u64 + 1)) as usize);
    }
    let order = Arc::new(order);
    let t0 = clock.mono_us();
    let usage0 = Usage::now();
    let deadline = if seconds == 0 { u64::MAX } else { t0 + seconds * 1_000_000 };
    let mut tasks = tokio::task::JoinSet::new();
    for r in 0..readers {
        let (pool, clock, order) = (pool.clone(), clock.clone(), order.clone());
        tasks.spawn(async move {
            let mut out = Vec::new();
            let mut i = r;
            let mut rng = (seed + r as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            loop {
                let block = if seconds == 0 {
                    match order.get(i) {
                        Some(b) => *b,
                        None => break,
                    }
                } else {
                    next(&mut rng) % blocks
                };
                if clock.mono_us() >= deadline {
                    break;
                }
                let s = clock.mono_us();
                pool.read(vol, block * BLOCK, BLOCK as u32).await?;
                out.push(clock.mono_us() - s);
                i += readers;
            }
            Ok::<_, fardisk_engine::Error>(out)
        });
    }
    let mut latencies_us = Vec::new();
    while let Some(r) = tasks.join_next().await {
        latencies_us.extend(r.map_err(|e| anyhow!("{e}"))?.map_err(|e| anyhow!("read: {e}"))?);
    }
    Ok(Reads { latencies_us, elapsed_us: clock.mono_us() - t0, usage: Usage::now().since(usage0) })
}

fn l2_config() -> L2ArcConfig {
    // Fed faster than the default 32 MiB/s so the working set reaches the device within the
    // setup, not over minutes (the cap protects flash wear in production).
    L2ArcConfig { write_max_bytes_per_s: 512 << 20, ..L2ArcConfig::default() }
}

async fn wait_l2_settled(cache: &ArcBlockCache) {
    let mut last = u64::MAX;
    for _ in 0..60 {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let written = cache.l2().map(|l| l.stats().bytes_written).unwrap_or(0);
        if written == last {
            return;
        }
        last = written;
    }
}

/// L2ARC hits so far.
fn l2_hits(cache: &ArcBlockCache) -> u64 {
    cache.l2().map(|l| l.stats().hits).unwrap_or(0)
}

/// A plain LRU of 4 KiB blocks, for the scan-resistance comparison.
struct Lru {
    capacity: usize,
    stamp: HashMap<u64, u64>,
    clock: u64,
    queue: VecDeque<(u64, u64)>,
}

impl Lru {
    fn new(capacity: usize) -> Lru {
        Lru { capacity, stamp: HashMap::new(), clock: 0, queue: VecDeque::new() }
    }
    /// True on a hit; a miss inserts, evicting the least recently used.
    fn access(&mut self, key: u64) -> bool {
        self.clock += 1;
        let hit = self.stamp.insert(key, self.clock).is_some();
        self.queue.push_back((key, self.clock));
        while self.stamp.len() > self.capacity {
            let Some((k, t)) = self.queue.pop_front() else { break };
            if self.stamp.get(&k) == Some(&t) {
                self.stamp.remove(&k);
            }
        }
        hit
    }
}

/// Hit ratios (%) of one pass over the hot set before and after a scan of 4x the cache.
fn scan_resistance(cache_bytes: u64, seed: u64) -> ((f64, f64), (f64, f64)) {
    let blocks = cache_bytes / BLOCK;
    let hot: Vec<u64> = (0..blocks / 2).collect();
    let value = Bytes::from(vec![0u8; BLOCK as usize]);
    let arc = AdaptiveCache::new(ArcConfig::new(cache_bytes / 8, cache_bytes));
    let mut lru = Lru::new(blocks as usize);
    let key = |k: u64| BlockKey { segment_id: k, offset_bytes: 0 };
    let pass = |arc: &AdaptiveCache, lru: &mut Lru, keys: &[u64]| {
        let (mut a, mut l) = (0u64, 0u64);
        for &k in keys {
            // One value for every key, so one checksum (the policy is what is measured).
            if arc.get(&key(k), 0).is_some() {
                a += 1
            } else {
                arc.insert(key(k), value.clone(), 0, InsertKind::Demand)
            }
            if lru.access(k) {
                l += 1
            }
        }
        (100.0 * a as f64 / keys.len() as f64, 100.0 * l as f64 / keys.len() as f64)
    };
    let mut rng = seed | 1;
    let mut shuffled = hot.clone();
    let mut before = (0.0, 0.0);
    for _ in 0..10 {
        for i in (1..shuffled.len()).rev() {
            shuffled.swap(i, (next(&mut rng) % (i as u64 + 1)) as usize);
        }
        before = pass(&arc, &mut lru, &shuffled);
    }
    let scan: Vec<u64> = (1_000_000..1_000_000 + 4 * blocks).collect();
    pass(&arc, &mut lru, &scan);
    let after = pass(&arc, &mut lru, &shuffled);
    ((before.0, after.0), (before.1, after.1))
}

fn row(
    setup: &str,
    order: i64,
    metrics: Vec<(&str, f64)>,
    params: &Value,
    notes: &str,
    seconds: u64,
) -> Value {
    json!({
        "setup": setup, "order": order, "duration_s": seconds, "notes": notes, "params": params, "series": {},
        "metrics": metrics.iter().map(|(k, v)| json!([k, round3(*v)])).collect::<Vec<_>>(),
    })
}

pub async fn run(a: Args, out: &Path, note: &str) -> Result<()> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
    let _ = std::fs::remove_dir_all(&a.dir);
    std::fs::create_dir_all(&a.dir)?;
    let blocks = a.working_set_mib * MIB / BLOCK;
    let params = json!({"arc_mib": a.arc_mib, "working_set_mib": a.working_set_mib, "l2arc_mib": a.l2_mib,
        "readers": a.readers, "seconds": a.seconds, "store_latency_ms": a.latency_ms, "l2arc_write_max_mib_per_s": 512});
    let mut data = vec![0u8; (a.working_set_mib * MIB) as usize];
    let mut rng = a.seed | 1;
    for chunk in data.chunks_mut(8) {
        let v = next(&mut rng).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }

    // The limit: the same bytes in a local file, read with O_DIRECT.
    let local_path = a.dir.join("local.dat");
    std::fs::write(&local_path, &data)?;
    std::fs::File::open(&local_path)?.sync_all()?;
    let mut local = tokio::task::block_in_place(|| local_reads(&local_path, blocks, &a, &clock))?;
    eprintln!(
        "fardisk-bench: local {:.0} reads/s p99 {:.0} µs, {:.1} µs CPU and {:.2} context switches per read",
        local.ops_per_s(),
        local.p(99.0),
        local.cpu_us_per_read(),
        local.context_switches_per_read()
    );

    // The pool: write the working set, let the L2ARC take what the ARC evicts.
    let env = Env { clock: clock.clone(), seed: a.seed, blocking_inline: false };
    let (_, store) = far_file_store(&a.dir.join("store"), a.latency_ms, clock.clone(), a.seed)?;
    let guid = fardisk_engine::rng::Rng::new(a.seed).next_u128();
    Pool::create(
        store.clone(),
        "bench",
        CreateOptions { pool_guid: Some(guid), ..Default::default() },
        &env,
    )
    .await
    .map_err(|e| anyhow!("{e}"))?;
    let l2_path = a.dir.join("cache0");
    let l2 = L2Arc::new(l2_config(), guid, Arc::new(MonotonicClock::new()), a.seed)
        .map_err(|e| anyhow!("{e}"))?;
    l2.add_device(&l2_path, Some(a.l2_mib * MIB)).map_err(|e| anyhow!("{e}"))?;
    let cache =
        Arc::new(ArcBlockCache::with_l2_config(a.arc_mib * MIB, Some(l2), l2_config(), a.seed));
    let opts = || ImportOptions { config: PoolConfig::default(), ..Default::default() };
    let pool = Pool::import(store.clone(), "bench", opts(), env.clone(), cache.clone())
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let vol = pool.volume_create("v", a.working_set_mib * MIB).map_err(|e| anyhow!("{e}"))?;
    for (i, chunk) in data.chunks(MIB as usize).enumerate() {
        pool.write(vol, i as u64 * MIB, Bytes::copy_from_slice(chunk))
            .await
            .map_err(|e| anyhow!("{e}"))?;
    }
    drop(data);
    pool.sync_txg().await.map_err(|e| anyhow!("{e}"))?;
    wait_l2_settled(&cache).await;
    // One pass in random order brings in whatever the L2ARC did not get (from the store).
    let warm = pool_reads(&pool, blocks, a.readers, 0, a.seed + 7, &clock).await?;
    eprintln!("fardisk-bench: warm-up pass {:.0} reads/s", warm.ops_per_s());
    wait_l2_settled(&cache).await;
    let (l2_0, gets_0) = (l2_hits(&cache), pool.store_stats().snapshot().get.requests);
    let dropped_0 = cache.arc().stats().feed_dropped;
    let mut steady = pool_reads(&pool, blocks, a.readers, a.seconds, a.seed + 11, &clock).await?;
    let (l2_1, gets_1) = (l2_hits(&cache), pool.store_stats().snapshot().get.requests);
    let feed_dropped = cache.arc().stats().feed_dropped - dropped_0;
    let reads = steady.latencies_us.len() as f64;
    let steady_l2_hits = (l2_1 - l2_0) as f64;
    eprintln!(
        "fardisk-bench: fardisk {:.0} reads/s p99 {:.0} µs, {} L2 hits, {} GETs, {} evicted blocks dropped before the L2ARC writer, {:.1} µs CPU and {:.2} context switches per read",
        steady.ops_per_s(),
        steady.p(99.0),
        steady_l2_hits,
        gets_1 - gets_0,
        feed_dropped,
        steady.cpu_us_per_read(),
        steady.context_switches_per_read()
    );

    // Export, import with the L2ARC rebuilt from its device, first pass over the working set.
    pool.export().await.map_err(|e| anyhow!("{e}"))?;
    cache.shutdown();
    drop(pool);
    drop(cache);
    let t_rebuild = clock.mono_us();
    let (l2, failures) = L2Arc::open(
        l2_config(),
        guid,
        Arc::new(MonotonicClock::new()),
        a.seed,
        std::slice::from_ref(&l2_path),
    )
    .map_err(|e| anyhow!("{e}"))?;
    if let Some((p, e)) = failures.first() {
        return Err(anyhow!("cache device {} did not reopen: {e}", p.display()));
    }
    for _ in 0..600 {
        if l2.stats().devices.iter().all(|d| d.rebuild.done) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let rebuild_s = (clock.mono_us() - t_rebuild) as f64 / 1e6;
    let entries = l2.stats().devices.iter().map(|d| d.rebuild.entries).sum::<u64>();
    let cache =
        Arc::new(ArcBlockCache::with_l2_config(a.arc_mib * MIB, Some(l2), l2_config(), a.seed));
    let pool = Pool::import(store, "bench", opts(), env, cache.clone())
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let (l2_2, gets_2) = (l2_hits(&cache), pool.store_stats().snapshot().get.requests);
    let first = pool_reads(&pool, blocks, a.readers, 0, a.seed + 13, &clock).await?;
    let (l2_3, gets_3) = (l2_hits(&cache), pool.store_stats().snapshot().get.requests);
    let first_hits = (l2_3 - l2_2) as f64;
    eprintln!("fardisk-bench: after import: rebuild {rebuild_s:.1} s ({entries} entries), first pass {:.0} reads/s, {first_hits} L2 hits of {blocks}, {} GETs", first.ops_per_s(), gets_3 - gets_2);
    pool.export().await.map_err(|e| anyhow!("{e}"))?;

    let ((arc_before, arc_after), (lru_before, lru_after)) =
        scan_resistance(a.arc_mib * MIB, a.seed);
    eprintln!("fardisk-bench: scan: ARC {arc_before:.1}% -> {arc_after:.1}%, LRU {lru_before:.1}% -> {lru_after:.1}%");
    let _ = std::fs::remove_dir_all(&a.dir);

    let local_ops = local.ops_per_s();
    let rows = vec![
        row(
            "local file, O_DIRECT random 4 KiB reads (the limit)",
            0,
            vec![
                ("reads_per_s", local_ops),
                ("p50_us", local.p(50.0)),
                ("p99_us", local.p(99.0)),
                ("cpu_us_per_read", local.cpu_us_per_read()),
                ("ctx_switches_per_read", local.context_switches_per_read()),
            ],
            &params,
            note,
            a.seconds,
        ),
        row(
            "fardisk, working set > ARC, inside L2ARC",
            1,
            vec![
                ("reads_per_s", steady.ops_per_s()),
                ("p50_us", steady.p(50.0)),
                ("p99_us", steady.p(99.0)),
                ("to_local_pct", 100.0 * steady.ops_per_s() / local_ops.max(1e-9)),
                ("p99_to_local_x", steady.p(99.0) / local.p(99.0).max(1.0)),
                ("cpu_us_per_read", steady.cpu_us_per_read()),
                ("ctx_switches_per_read", steady.context_switches_per_read()),
                ("l2_hit_pct_of_reads", 100.0 * steady_l2_hits / reads.max(1.0)),
                ("store_gets", (gets_1 - gets_0) as f64),
            ],
            &params,
            note,
            a.seconds,
        ),
        row(
            "fardisk, first pass after export/import (L2ARC rebuilt)",
            2,
            vec![
                ("reads_per_s", first.ops_per_s()),
                ("l2_hit_pct_of_reads", 100.0 * first_hits / blocks as f64),
                ("store_gets", (gets_3 - gets_2) as f64),
                ("rebuild_s", rebuild_s),
            ],
            &params,
            note,
            0,
        ),
        row(
            "ARC, hot set before/after a 4x-cache scan",
            3,
            vec![
                ("hot_hit_before_pct", arc_before),
                ("hot_hit_after_pct", arc_after),
                ("kept_pct", 100.0 * arc_after / arc_before.max(1e-9)),
            ],
            &params,
            note,
            0,
        ),
        row(
            "plain LRU of the same size, same access pattern",
            4,
            vec![
                ("hot_hit_before_pct", lru_before),
                ("hot_hit_after_pct", lru_after),
                ("kept_pct", 100.0 * lru_after / lru_before.max(1e-9)),
            ],
            &params,
            note,
            0,
        ),
    ];
    std::fs::write(out, serde_json::to_string_pretty(&json!({ "rows": rows }))?)
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}
