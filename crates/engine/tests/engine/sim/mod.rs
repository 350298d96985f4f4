//! A seeded simulation of the whole engine: workload actors write, trim, read and sync; the store
//! injects latency, errors, lost responses and outages; the process crashes between steps, in the
//! middle of a txg's uploads or with a log commit written but not flushed; log legs fail, vanish
//! or rot; the cache device is torn, rotten, cut short or deleted; store objects are corrupted.
//! After every crash and import an auditor checks that each volume is a prefix of the write
//! history no older than the last acknowledged sync, that every object the maps reference exists
//! and that space adds up.
//!
//! Everything random comes from the seed and time is one `ManualClock` on a current-thread
//! runtime (the engine's, which the store faults, the intent log and the L2ARC all read), so a
//! failing seed replays: `FARDISK_SIM_SEED=N cargo test -p fardisk-engine --test engine
//! simulation::one_seed -- --nocapture`.

mod big_frees;
pub mod devices;
pub mod history;
mod hung_leg;
mod steps;

use bytes::Bytes;
use devices::{CacheDamage, LogDevices};
use fardisk_engine::clock::ManualClock;
use fardisk_engine::objstore::{
    open_store_url, FaultCounts, FaultPlan, FaultyStore, PowerCutStore, Store,
};
use fardisk_engine::pool::{CreateOptions, ImportOptions, PoolHealth};
use fardisk_engine::rng::Rng;
use fardisk_engine::root::VdevEntry;
use fardisk_engine::{Env, Pool, PoolConfig};
use history::History;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub const VOLUMES: [(&str, u64); 2] = [("db", 3 << 20), ("bulk", 2 << 20)];
const POOL: &str = "sim";

#[derive(Debug, Clone, Copy)]
pub struct SimOptions {
    pub seed: u64,
    pub steps: usize,
    pub log: bool,
    pub cache: bool,
    /// The store is a `file://` directory on this host: a crash is a power cut for it too.
    pub file_host: bool,
    /// Record every store request and step (`run_seed_traced`), to compare two replays.
    pub trace: bool,
}

impl SimOptions {
    /// Which devices a seed gets: most seeds run with both, some without a log (sync requests
    /// become txg syncs) or without a cache device.
    pub fn for_seed(seed: u64, steps: usize) -> SimOptions {
        let r = Rng::new(seed ^ 0xc0ff_ee00);
        let (log, cache) = (!r.chance(0.2), !r.chance(0.2));
        SimOptions { seed, steps, log, cache, file_host: r.chance(0.5), trace: false }
    }
}

/// What one seed did; a replay of the seed must give an equal report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub seed: u64,
    pub log: bool,
    pub cache: bool,
    pub file_host: bool,
    pub ops: u64,
    pub acks: u64,
    pub crashes: u64,
    pub crashes_mid_txg: u64,
    pub crashes_mid_commit: u64,
    /// Imports after a crash that died themselves after 0-7 of their store mutations (between
    /// their claim root and their log replay's publish, say), before the import that stays.
    pub imports_cut: u64,
    pub unacked_ops_lost: u64,
    pub unacked_ops_kept: u64,
    pub outages: u64,
    pub suspended_seen: u64,
    pub leg_faults: u64,
    /// Of those, legs that stopped answering mid-commit and were given up on (hung_leg.rs).
    pub leg_hangs: u64,
    pub leg_replacements: u64,
    pub cache_damages: u64,
    pub store_corruptions: u64,
    pub corruptions_caught_by_scrub: u64,
    pub reads_checked: u64,
    pub writes_refused_in_outage: u64,
    pub exports: u64,
    /// Power cuts of a file:// store's host, and what they did to objects not yet durable.
    pub store_power_cuts: u64,
    pub store_objects_volatile: u64,
    pub store_objects_reverted: u64,
    pub store_objects_torn: u64,
    /// Segments of txgs cut by crashes deleted by the last import, and found by a second pass.
    pub orphans_collected: u64,
    pub orphans_collected_late: u64,
    /// Big trims (big_frees.rs), and how many of them a crash cut with frees still queued.
    pub big_frees: u64,
    /// Snapshot destroys the same step made (big_frees.rs).
    pub snapshot_destroys: u64,
    pub crashes_mid_frees: u64,
    pub mutations: u64,
    pub mutation_trace: u64,
    pub final_digest: u64,
}

impl Report {
    pub fn fingerprint(&self) -> u64 {
        xxhash_rust::xxh3::xxh3_64(format!("{self:?}").as_bytes())
    }
}

pub struct World {
    pub opts: SimOptions,
    pub rng: Rng,
    pub clock: Arc<ManualClock>,
    pub env: Env,
    pub base: Arc<dyn Store>,
    /// The file:// store's host (its page cache), when the seed runs on one.
    pub host: Option<Arc<PowerCutStore>>,
    pub faulty: Arc<FaultyStore>,
    /// The store weather between crashes (no crash budget in it).
    pub weather: FaultPlan,
    pub log: Option<LogDevices>,
    pub cache_path: Option<PathBuf>,
    pub dir: PathBuf,
    pub pool: Option<Pool>,
    pub cache: Option<Arc<fardisk_engine::arc_cache::ArcBlockCache>>,
    pub history: History,
    pub report: Report,
    pub step: usize,
    pub guid: u128,
    /// Log legs that are faulted now (index into `log.legs`).
    pub bad_legs: Vec<usize>,
}

/// Store requests and notes a traced run records (`SimOptions::trace`).
const TRACE_LINES_MAX: usize = 2_000_000;

/// Polls of an import that is to die before it is given up on (it normally dies or finishes
/// within a few thousand).
const IMPORT_POLLS_MAX: u64 = 2_000_000;

/// The least `log_leg_timeout_ms`: a hung leg costs a seed this much real waiting.
pub const SIM_LOG_LEG_TIMEOUT_MS: u64 = 100;

pub fn config() -> PoolConfig {
    PoolConfig {
        txg_timeout: None,
        segment_bytes_target: 64 << 10,
        // Writes never wait for dirty space: that would make a write yield to whatever the
        // clock does next, and a seed would depend on thread timing.
        dirty_bytes_max: 256 << 20,
        dirty_sync_bytes: 128 << 20,
        upload_concurrency: 1,
        map_cache_bytes: 0,
        roots_kept: 2,
        compact_live_percent: 60,
        // One queued map page per txg: a big trim's frees span several txgs, and crashes fall
        // between them (big_frees.rs).
        free_pages_per_txg_max: 1,
        log_leg_timeout_ms: SIM_LOG_LEG_TIMEOUT_MS,
        ..PoolConfig::default()
    }
}

impl World {
    pub async fn new(opts: SimOptions) -> World {
        let clock = Arc::new(ManualClock::default());
        let env = Env { clock: clock.clone(), seed: opts.seed, blocking_inline: true };
        static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let disk = open_store_url(&format!("memory://sim-{}-{run}", opts.seed), true)
            .expect("memory store");
        let host = opts.file_host.then(|| Arc::new(PowerCutStore::file_host(disk.clone())));
        let base: Arc<dyn Store> = match &host {
            Some(h) => h.clone(),
            None => disk,
        };
        let mut faulty = FaultyStore::new(base.clone(), FaultPlan::default(), opts.seed)
            .with_clock(clock.clone());
        if opts.trace {
            faulty = faulty.with_request_trace(TRACE_LINES_MAX);
        }
        let faulty = Arc::new(faulty);
        let dir = std::env::temp_dir().join(format!(
            "fardisk-sim-{}-{run}-{}",
            opts.seed,
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let rng = Rng::new(opts.seed);
        let guid = rng.next_u128();
        let mut world = World {
            opts,
            rng,
            clock,
            env,
            base,
            host,
            faulty,
            weather: FaultPlan::default(),
            log: opts.log.then(LogDevices::new),
            cache_path: opts.cache.then(|| dir.join("cache")),
            dir,
            pool: None,
            cache: None,
            history: History::new(&VOLUMES.map(|(_, b)| b)),
            report: Report {
                seed: opts.seed,
                log: opts.log,
                cache: opts.cache,
                file_host: opts.file_host,
                ..Report::default()
            },
            step: 0,
            guid,
            bad_legs: Vec::new(),
        };
        world.create().await;
        world
    }

    async fn create(&mut self) {
        let mut vdevs = Vec::new();
        if let Some(log) = &self.log {
            let mut fo =
                fardisk_slog::FormatOptions::new(Arc::new(log.provider.clone()), self.opts.seed);
            fo.size_bytes = devices::LOG_LEG_BYTES;
            let cfg = fardisk_slog::IntentLog::format(
                POOL,
                self.guid,
                &fardisk_slog::VdevSpec::Mirror(log.legs.clone()),
                &fo,
            )
            .expect("format the log");
            let paths = log.legs.iter().map(|p| p.display().to_string()).collect();
            vdevs.push(VdevEntry {
                role: fardisk_engine::root::VdevRole::Log,
                mirror: true,
                guid: cfg.vdev_guid,
                paths,
            });
        }
        let store: Arc<dyn Store> = self.faulty.clone();
        Pool::create(
            store,
            POOL,
            CreateOptions { vdevs, pool_guid: Some(self.guid), ..Default::default() },
            &self.env,
        )
        .await
        .expect("create");
        self.import().await;
        let pool = self.pool();
        for (name, bytes) in VOLUMES {
            pool.volume_create(name, bytes).expect("volume");
        }
        // Half the seeds write plain writes' records to the log ahead of their flush: a power
        // cut then finds unflushed blocks of any age on the log legs.
        if self.opts.seed % 2 == 1 {
            pool.set_prop("log_write_ahead", "on").expect("log_write_ahead");
        }
        pool.sync_txg().await.expect("first sync");
    }

    pub fn pool(&self) -> Pool {
        self.pool.clone().expect("the pool is imported")
    }

    pub fn vol(&self, index: usize) -> u32 {
        self.pool().volume_id(VOLUMES[index].0).expect("volume exists")
    }

    pub fn fail(&self, what: impl std::fmt::Display) -> ! {
        if let Ok(path) = std::env::var("FARDISK_SIM_TRACE") {
            let _ =
                std::fs::write(format!("{path}.failed"), self.faulty.recent_mutations().join("\n"));
        }
        panic!(
            "simulation seed {} step {}: {what}\nreplay: FARDISK_SIM_SEED={} FARDISK_SIM_STEPS={} cargo test -p fardisk-engine --test engine simulation::one_seed -- --nocapture",
            self.opts.seed, self.step, self.opts.seed, self.opts.steps
        )
    }

    /// Imports as a restarted daemon would: tried again while the store is away (each attempt
    /// spends its retries on the clock), never with an operator's help.
    pub async fn import(&mut self) {
        for attempt in 0..40 {
            self.cache = self.cache_path.as_ref().map(|p| {
                devices::open_cache(p, self.guid, self.opts.seed ^ attempt, self.clock.clone()).0
            });
            let cache: Arc<dyn fardisk_engine::cache::BlockCache> = match &self.cache {
                Some(c) => c.clone(),
                None => Arc::new(fardisk_engine::cache::NoCache),
            };
            let store: Arc<dyn Store> = self.faulty.clone();
            match Pool::import(store, POOL, self.import_options(), self.env.clone(), cache).await {
                Ok(pool) => {
                    // The import-time catalog runs in the background; wait for it so the next
                    // sync deletes (or not) the same segments every time this seed runs.
                    for _ in 0..100_000 {
                        if pool.import_settled() {
                            break;
                        }
                        tokio::task::yield_now().await;
                    }
                    if !pool.import_settled() {
                        self.fail("the import-time catalog did not finish");
                    }
                    self.pool = Some(pool);
                    return;
                }
                Err(e) if self.store_away() => {
                    if attempt >= 38 {
                        eprintln!("import attempt {attempt}: {e}");
                    }
                    self.clock.advance(Duration::from_secs(5));
                }
                Err(e) => self.fail(format!("import failed with the store reachable: {e}")),
            }
        }
        self.fail("the pool could not be imported in 40 attempts");
    }

    pub fn store_away(&self) -> bool {
        self.weather.outage_until_us > self.clock_us() || self.weather.error_rate > 0.0
    }

    pub fn clock_us(&self) -> u64 {
        use fardisk_engine::clock::Clock;
        self.clock.mono_us()
    }

    /// The process dies once the log writer has finished what it was given (heads after a
    /// release, say): the same cut every replay. See `crash_at_once`.
    pub async fn crash_now<T>(&mut self, in_flight: Vec<tokio::task::JoinHandle<T>>) {
        self.wait_log_idle();
        self.crash_at_once(in_flight).await;
    }

    /// The process dies at this instant, whatever the log writer is doing (a commit held at its
    /// flush on purpose). The store refuses every mutation of the dead pool's leftovers, the log
    /// devices keep what a power cut leaves, the cache device may be damaged; then a new process
    /// imports and the auditor checks what it finds.
    pub async fn crash_at_once<T>(&mut self, in_flight: Vec<tokio::task::JoinHandle<T>>) {
        let dead = FaultPlan {
            crash_after_mutations: Some(self.faulty.mutations()),
            ..self.weather.clone()
        };
        self.faulty.set_plan(dead);
        if let Some(log) = &mut self.log {
            log.power_cut(self.rng.next_u64());
        }
        for h in in_flight {
            h.abort();
            let _ = h.await;
        }
        if let Some(host) = self.host.clone() {
            // The store's directory is on the same host: what its page cache held goes too.
            match host.power_cut(&self.rng).await {
                Ok(cut) => {
                    self.report.store_power_cuts += 1;
                    self.report.store_objects_volatile += cut.volatile_at_cut;
                    self.report.store_objects_reverted += cut.reverted;
                    self.report.store_objects_torn += cut.torn;
                }
                Err(e) => self.fail(format!("power cut of the store's host: {e}")),
            }
        }
        self.pool = None;
        if let Some(cache) = self.cache.take() {
            cache.stop_writer();
        }
        for _ in 0..16 {
            tokio::task::yield_now().await;
        }
        self.report.crashes += 1;
        if let Some(path) = self.cache_path.clone() {
            if devices::damage_cache(&path, &self.rng) != CacheDamage::None {
                self.report.cache_damages += 1;
            }
        }
        self.faulty.set_plan(self.weather.clone());
        if self.rng.below(3) == 0 {
            self.import_that_dies().await;
        }
        self.import().await;
        self.audit_after_import().await;
    }

    /// How a restarted daemon imports: taking the pool over from the dead one, with the log.
    fn import_options(&self) -> ImportOptions {
        ImportOptions {
            force: true,
            config: config(),
            log_devices: self.log.as_ref().map(|l| l.engine_devices()).unwrap_or_default(),
            ..Default::default()
        }
    }

    /// One import that dies after 0-7 of its store mutations: a restarted daemon killed again
    /// while it imports (the holder's next engine, the OOM killer), e.g. between its claim root
    /// and its replay's publish. It dies at the first mutation past its budget (its retries
    /// would otherwise go on against a store that refuses a dead process forever); whatever it
    /// got to, the next import must lose nothing.
    async fn import_that_dies(&mut self) {
        let budget = self.faulty.mutations() + self.rng.below(8);
        self.faulty
            .set_plan(FaultPlan { crash_after_mutations: Some(budget), ..self.weather.clone() });
        let refusals = self.faulty.counts().crash_refusals;
        let store: Arc<dyn Store> = self.faulty.clone();
        let cache = Arc::new(fardisk_engine::cache::NoCache);
        let (opts, env) = (self.import_options(), self.env.clone());
        let handle = tokio::spawn(async move { Pool::import(store, POOL, opts, env, cache).await });
        for _ in 0..IMPORT_POLLS_MAX {
            if handle.is_finished() || self.faulty.counts().crash_refusals > refusals {
                break;
            }
            tokio::task::yield_now().await;
        }
        if handle.is_finished() && self.faulty.counts().crash_refusals == refusals {
            if let Ok(Ok(pool)) = handle.await {
                // It got through within its budget: it dies before serving, once its log
                // writer is idle so that a seed replays exactly.
                if let Some(log) = pool.log() {
                    if !log.wait_idle(Duration::from_secs(60)) {
                        self.fail("the log writer did not go idle in 60 s");
                    }
                }
                drop(pool);
            }
        } else {
            handle.abort();
            let _ = handle.await;
        }
        for _ in 0..16 {
            tokio::task::yield_now().await;
        }
        self.report.imports_cut += 1;
        self.faulty.set_plan(self.weather.clone());
    }

    /// Waits for the log writer thread to run out of work (it runs beside the simulation's one
    /// thread, so what it has written at any instant depends on the machine's load).
    pub fn wait_log_idle(&self) {
        if let Some(log) = self.pool.as_ref().and_then(|p| p.log()) {
            if !log.wait_idle(Duration::from_secs(60)) {
                self.fail("the log writer did not go idle in 60 s");
            }
        }
    }

    /// Reads every volume whole, retrying while the store is away.
    pub async fn read_all(&self) -> Vec<Vec<u8>> {
        let pool = self.pool();
        let mut images = Vec::new();
        for (i, (_, bytes)) in VOLUMES.iter().enumerate() {
            let mut image = Vec::with_capacity(*bytes as usize);
            let mut offset = 0u64;
            while offset < *bytes {
                let len = (1u64 << 20).min(bytes - offset);
                let mut got = None;
                for _ in 0..40 {
                    match pool.read(self.vol(i), offset, len as u32).await {
                        Ok(b) => {
                            got = Some(b);
                            break;
                        }
                        Err(e) if self.store_away() => {
                            tracing::debug!(error = %e, "read failed while the store is away");
                            self.clock.advance(Duration::from_secs(5));
                        }
                        Err(e) => self.fail(format!(
                            "read of volume {i} at {offset} failed with the store reachable: {e}"
                        )),
                    }
                }
                let got: Bytes = got.unwrap_or_else(|| self.fail("a read failed 40 times"));
                image.extend_from_slice(&got);
                offset += len;
            }
            images.push(image);
        }
        images
    }

    pub async fn audit_after_import(&mut self) {
        let got = self.read_all().await;
        match self.history.adopt_prefix(&got) {
            Ok(cut) => {
                self.report.unacked_ops_lost += cut.lost as u64;
                self.report.unacked_ops_kept += cut.kept as u64;
            }
            Err(e) => self.fail(format!("after crash {}: {e}", self.report.crashes)),
        }
        if !self.store_away() {
            // The import collected what earlier crashes orphaned; another pass finds what it could
            // not (the store away meanwhile). The space audit after it checks that nothing any
            // root references went with them.
            match self.pool().collect_orphans_now().await {
                Ok(n) => self.report.orphans_collected_late += n,
                Err(e) => tracing::debug!(error = %e, "orphan collection failed"),
            }
            self.report.orphans_collected += self.pool().status().orphans_deleted;
        }
        self.audit_space().await;
    }

    pub async fn audit_space(&self) {
        let pool = self.pool();
        for _ in 0..40 {
            match pool.audit_space().await {
                Ok(_) => return,
                Err(e @ fardisk_engine::Error::Corrupt { .. }) => {
                    self.fail(format!("space audit: {e}"))
                }
                Err(e) if self.store_away() => {
                    tracing::debug!(error = %e, "audit failed while the store is away");
                    self.clock.advance(Duration::from_secs(5));
                }
                Err(e) => self.fail(format!("space audit could not run: {e}")),
            }
        }
        self.fail("the space audit failed 40 times");
    }

    /// After the store came back, a pool must be serving again without help: never SUSPENDED
    /// or FAULTED once a sync has gone through.
    pub fn check_healthy(&self, what: &str) {
        match self.pool().health() {
            PoolHealth::Online | PoolHealth::Degraded(_) => {}
            other => self.fail(format!("{what}: the pool is {other:?} after the store came back")),
        }
    }

    pub fn counts(&self) -> FaultCounts {
        self.faulty.counts()
    }

    /// Clears the weather, syncs, exports and imports cleanly, and checks everything.
    pub async fn finish(mut self) -> Report {
        self.weather = FaultPlan::default();
        self.faulty.set_plan(FaultPlan::default());
        let pool = self.pool();
        let mark = self.history.mark();
        if let Err(e) = pool.sync_txg().await {
            self.fail(format!("final sync: {e}"));
        }
        self.history.ack_through(mark);
        if let Err(e) = pool.export().await {
            self.fail(format!("export: {e}"));
        }
        self.pool = None;
        drop(pool);
        self.import().await;
        // Everything was acknowledged: the only prefix allowed is all of it.
        self.audit_after_import().await;
        let counts = self.counts();
        self.report.ops = self.history.ops_total;
        self.report.acks = self.history.acks;
        self.report.mutations = counts.mutations;
        self.report.mutation_trace = counts.mutation_trace;
        self.report.final_digest = self.history.digest();
        let report = self.report.clone();
        let _ = std::fs::remove_dir_all(&self.dir);
        report
    }
}

/// Runs one seed to the end on a current-thread runtime (one thread: the same seed, the same
/// interleaving) and returns what it did.
pub fn run_seed(opts: SimOptions) -> (Report, FaultCounts) {
    let (report, counts, _) = run_seed_traced(opts);
    (report, counts)
}

/// `run_seed`, and with `opts.trace` every store request and step it made, in order (see
/// `FaultyStore::request_trace`).
pub fn run_seed_traced(opts: SimOptions) -> (Report, FaultCounts, Vec<String>) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async move {
        let mut world = World::new(opts).await;
        for step in 0..opts.steps {
            world.step = step;
            world.run_step().await;
        }
        let counts = world.counts();
        let faulty = world.faulty.clone();
        let report = world.finish().await;
        if let Ok(path) = std::env::var("FARDISK_SIM_TRACE") {
            let _ = std::fs::write(
                format!("{path}.{}", report.fingerprint()),
                faulty.recent_mutations().join("\n"),
            );
        }
        let (mut trace, dropped) = faulty.request_trace();
        if dropped > 0 {
            trace.push(format!("... {dropped} more not recorded"));
        }
        (report, counts, trace)
    })
}
