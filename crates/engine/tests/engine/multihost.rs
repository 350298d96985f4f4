//! A writer cut off from the store while another host imports the pool with `--force`
//! (shared/design/CLARIFICATIONS.md, #17 claim 6). With `multihost=on` the importer waits out the
//! writer's lease, the cut-off writer stops acknowledging once it cannot prove its lease (before
//! the importer's claim), every txg it published is on the importer, and what it acknowledged
//! and lost lies inside the stated window (acknowledged after its last renewal, within the
//! lease). With `multihost=off` today's behaviour stays: it goes on acknowledging from its log.

// Real time is the point here: real tasks are given real time to reach the stepped clock.
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use fardisk_engine::cache::NoCache;
use fardisk_engine::clock::Clock;
use fardisk_engine::objstore::{open_store_url, FaultPlan, FaultyStore, Store};
use fardisk_engine::pool::{
    CreateOptions, HeldSummary, ImportOptions, LogDevices, LEASE_MARGIN_MS,
};
use fardisk_engine::root::VdevEntry;
use fardisk_engine::{Env, Pool, PoolConfig};
use fardisk_slog::{FormatOptions, IntentLog, MemProvider, VdevSpec};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

const LEASE_MS: u64 = 10_000;

/// Two hosts' clocks, moved only by the test: unlike `ManualClock`, whose `sleep` moves time
/// itself, a sleeper here waits for the test to get there, so background loops (lease renewal)
/// run when their time comes and no sooner.
#[derive(Debug, Default)]
struct SteppedClock {
    now_us: std::sync::atomic::AtomicU64,
    moved: tokio::sync::Notify,
}

impl SteppedClock {
    fn advance(&self, d: Duration) {
        self.now_us.fetch_add(d.as_micros() as u64, std::sync::atomic::Ordering::SeqCst);
        self.moved.notify_waiters();
    }
}

#[async_trait::async_trait]
impl Clock for SteppedClock {
    fn wall_ms(&self) -> u64 {
        1_700_000_000_000 + self.mono_us() / 1000
    }
    fn mono_us(&self) -> u64 {
        self.now_us.load(std::sync::atomic::Ordering::SeqCst)
    }
    async fn sleep(&self, d: Duration) {
        let deadline = self.mono_us() + d.as_micros() as u64;
        loop {
            let moved = self.moved.notified();
            if self.mono_us() >= deadline {
                return;
            }
            moved.await;
        }
    }
}
/// Clock steps a test takes at most while it waits for a task (bounded).
const STEPS_MAX: usize = 2_000;

struct Hosts {
    clock: Arc<SteppedClock>,
    base: Arc<dyn Store>,
    /// Host A's path to the store: the partition is an outage on it.
    a_path: Arc<FaultyStore>,
    log: MemProvider,
}

fn config() -> PoolConfig {
    PoolConfig { txg_timeout: None, ..PoolConfig::default() }
}

async fn hosts(name: &str, multihost: bool) -> Hosts {
    let clock = Arc::new(SteppedClock::default());
    let base = open_store_url(&format!("memory://multihost-{name}"), true).expect("store");
    let a_path = Arc::new(FaultyStore::new(base.clone(), FaultPlan::default(), 1));
    let log = MemProvider::new();
    let legs = vec![PathBuf::from("/a/log-0"), PathBuf::from("/a/log-1")];
    for leg in &legs {
        log.add(leg.clone(), 16 << 20);
    }
    let guid = 0x5eed_u128;
    let mut fo = FormatOptions::new(Arc::new(log.clone()), 1);
    fo.size_bytes = 16 << 20;
    let cfg = IntentLog::format("tank", guid, &VdevSpec::Mirror(legs.clone()), &fo)
        .expect("format the log");
    let vdev = VdevEntry {
        role: fardisk_engine::root::VdevRole::Log,
        mirror: true,
        guid: cfg.vdev_guid,
        paths: legs.iter().map(|p| p.display().to_string()).collect(),
    };
    let mut props = BTreeMap::new();
    props.insert("multihost".to_string(), if multihost { "on" } else { "off" }.to_string());
    props.insert("multihost_lease_ms".to_string(), LEASE_MS.to_string());
    let env = Env { clock: clock.clone(), seed: 1, blocking_inline: false };
    Pool::create(
        base.clone(),
        "tank",
        CreateOptions { vdevs: vec![vdev], pool_guid: Some(guid), props },
        &env,
    )
    .await
    .expect("create");
    Hosts { clock, base, a_path, log }
}

/// Runs `fut` to completion: first without touching the shared clock (up to 0.3 s of real time:
/// work that does not wait on the clock finishes at the same clock instant), then advancing it
/// 100 ms at a time (bounded), for work that waits on it (a lease, a retry).
async fn drive<T: Send + 'static>(
    clock: &SteppedClock,
    fut: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    let task = tokio::spawn(fut);
    for _ in 0..300 {
        if task.is_finished() {
            return task.await.expect("task");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    for _ in 0..STEPS_MAX {
        if task.is_finished() {
            break;
        }
        clock.advance(Duration::from_millis(100));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(task.is_finished(), "a task did not finish within {STEPS_MAX} clock steps");
    task.await.expect("task")
}

/// What the cut-off writer A acknowledged (clock ms) and what B, which took over, found.
struct Outcome {
    partition_ms: u64,
    b_start_ms: u64,
    claim_ms: u64,
    acked_ms: Vec<u64>,
    refused_after_claim: bool,
    b_reads_published: bool,
    /// (offset, fill byte) of every write whose flush A acknowledged after the partition.
    acked_writes: Vec<(u64, u8)>,
    /// Host A itself, and where it writes held records once fenced.
    a: Pool,
    held_dir: PathBuf,
}

async fn partition_and_take_over(h: Hosts) -> Outcome {
    let env_a = Env { clock: h.clock.clone(), seed: 2, blocking_inline: false };
    let a_store: Arc<dyn Store> = h.a_path.clone();
    // One directory per run of this function: the tests run at once in one process.
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let held_dir =
        std::env::temp_dir().join(format!("fardisk-multihost-held-{}-{run}", std::process::id()));
    let a_opts = ImportOptions {
        force: true,
        config: PoolConfig { held_records_dir: Some(held_dir.clone()), ..config() },
        log_devices: LogDevices(Arc::new(h.log.clone())),
        ..Default::default()
    };
    let a = drive(&h.clock, Pool::import(a_store, "tank", a_opts, env_a, Arc::new(NoCache)))
        .await
        .expect("import on host A");
    a.volume_create("v", 1 << 20).expect("volume");
    let vol = a.volume_id("v").expect("v");
    a.write(vol, 0, Bytes::from(vec![1u8; 4096])).await.expect("write");
    let pa = a.clone();
    drive(&h.clock, async move { pa.sync_txg().await }).await.expect("A publishes a txg");

    // The network between A and the store goes; A's database keeps writing and flushing.
    h.a_path.set_plan(FaultPlan { outage: true, ..FaultPlan::default() });
    let partition_ms = h.clock.mono_us() / 1000;
    let mut acked_ms = Vec::new();
    let mut acked_writes = Vec::new();
    for i in 0..(LEASE_MS / 1000 + 3) {
        let (offset, fill) = ((1 + i % 200) * 4096, (i % 250) as u8 + 2);
        a.write(vol, offset, Bytes::from(vec![fill; 4096])).await.expect("write (in memory)");
        let pa = a.clone();
        if drive(&h.clock, async move { pa.sync_request().await }).await.is_ok() {
            acked_ms.push(h.clock.mono_us() / 1000);
            acked_writes.push((offset, fill));
        }
        h.clock.advance(Duration::from_millis(1000));
    }

    // Host B imports with --force; with multihost=on it waits the lease out first.
    let env_b = Env { clock: h.clock.clone(), seed: 3, blocking_inline: false };
    let b_start_ms = h.clock.mono_us() / 1000;
    let b_opts =
        ImportOptions { force: true, config: config(), missing_log: true, ..Default::default() };
    let b = drive(&h.clock, Pool::import(h.base.clone(), "tank", b_opts, env_b, Arc::new(NoCache)))
        .await
        .expect("import on host B");
    let claim_ms = h.clock.mono_us() / 1000;
    let vol_b = b.volume_id("v").expect("v on B");
    let b_reads_published = b.read(vol_b, 0, 4096).await.expect("read on B")[0] == 1;

    // A keeps writing, and the network comes back.
    let mut refused_after_claim = true;
    for i in 0..5u64 {
        if i == 2 {
            h.a_path.set_plan(FaultPlan::default());
        }
        a.write(vol, 300 * 4096, Bytes::from(vec![9u8; 4096])).await.ok();
        let pa = a.clone();
        if drive(&h.clock, async move { pa.sync_request().await }).await.is_ok() {
            acked_ms.push(h.clock.mono_us() / 1000);
            refused_after_claim = false;
        }
        h.clock.advance(Duration::from_millis(LEASE_MS / 2));
    }
    Outcome {
        partition_ms,
        b_start_ms,
        claim_ms,
        acked_ms,
        refused_after_claim,
        b_reads_published,
        acked_writes,
        a,
        held_dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_multihost_a_cut_off_writer_stops_acknowledging_before_the_takeover() {
    let h = hosts("on", true).await;
    let clock = h.clock.clone();
    let o = partition_and_take_over(h).await;
    assert!(o.b_reads_published, "a txg the first writer published is missing on the second");
    assert!(o.refused_after_claim, "the first writer acknowledged a flush after the second claimed the pool: {:?} (claim at {} ms)", o.acked_ms, o.claim_ms);
    assert!(o.claim_ms >= o.b_start_ms + LEASE_MS, "the importer did not wait the lease out");
    let window_ms = LEASE_MS - LEASE_MARGIN_MS;
    for t in &o.acked_ms {
        assert!(*t < o.claim_ms, "acknowledged at {t} ms, after the claim at {} ms", o.claim_ms);
        assert!(*t <= o.partition_ms + window_ms, "acknowledged at {t} ms, outside the stated window ({window_ms} ms from the last renewal at or before {} ms)", o.partition_ms);
    }
    eprintln!(
        "multihost=on: partition at {} ms, {} flushes acknowledged after it (last at {:?} ms, window {window_ms} ms), claim at {} ms, none acknowledged after the claim",
        o.partition_ms,
        o.acked_ms.len(),
        o.acked_ms.last(),
        o.claim_ms
    );
    // The fenced writer goes on to write what it held into its directory: let it finish before
    // the directory goes (removed under a writer still at work, it was left behind in /tmp).
    wait_for_held(&o, &clock).await;
    std::fs::remove_dir_all(&o.held_dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_multihost_a_cut_off_writer_keeps_acknowledging_as_before() {
    let o = partition_and_take_over(hosts("off", false).await).await;
    assert!(o.b_reads_published);
    assert!(o.claim_ms < o.b_start_ms + LEASE_MS, "without multihost the import does not wait");
    assert!(
        o.acked_ms.iter().any(|t| *t > o.claim_ms),
        "multihost=off keeps today's behaviour (acknowledging from the log): {:?}",
        o.acked_ms
    );
    std::fs::remove_dir_all(&o.held_dir).ok();
}

/// Waits (bounded) until the fenced writer of `o` has written its held records file; returns
/// its last status and how many statuses said it was being written.
async fn wait_for_held(o: &Outcome, clock: &SteppedClock) -> (Option<HeldSummary>, usize) {
    let mut held = None;
    let mut seen_writing = 0;
    for _ in 0..STEPS_MAX {
        let status = o.a.status();
        held = status.held;
        // Writing the held records takes a while (seconds for a big log): a status that says
        // FENCED in the meantime must already say what is held is being written.
        if matches!(status.health, fardisk_engine::pool::PoolHealth::Fenced(_)) {
            let h = held.as_ref().expect("status says FENCED and has no `held`");
            seen_writing += usize::from(h.writing);
        }
        if held.as_ref().is_some_and(|s| s.path.is_some()) {
            break;
        }
        clock.advance(Duration::from_millis(100));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    (held, seen_writing)
}

/// CLARIFICATIONS #17.6 point 4: once it sees it was fenced, the first writer says what it held
/// and keeps it readable: every write it acknowledged and never published is in a held records
/// file with its bytes, and status names the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_writer_holds_what_it_acknowledged_and_never_published() {
    let h = hosts("held", true).await;
    let clock = h.clock.clone();
    let o = partition_and_take_over(h).await;
    assert!(!o.acked_writes.is_empty(), "the test needs flushes acknowledged after the cut");
    // A learns it was fenced at its next lease renewal (the network is back by now).
    let (held, seen_writing) = wait_for_held(&o, &clock).await;
    let held = held.expect("status names what the fenced writer held");
    assert!(!held.writing, "a written held file still says `writing`");
    let path = PathBuf::from(held.path.clone().expect("a held records file was written"));
    assert!(
        path.starts_with(&o.held_dir),
        "{} is outside the configured directory",
        path.display()
    );
    let file = fardisk_engine::pool::HeldRecords::read(&path).expect("the held file verifies");
    assert_eq!(file.records.len() as u64, held.records, "status and file disagree");
    assert!(file.records.iter().all(|r| r.record.txg > file.published_txg));
    let v = file.volumes.iter().find(|(_, n)| n.as_str() == "v").map(|(id, _)| *id).expect("v");
    for (offset, fill) in &o.acked_writes {
        let newest = file
            .records
            .iter()
            .filter(|r| r.record.volume_id == v && r.record.offset_bytes == *offset)
            .max_by_key(|r| r.seq)
            .unwrap_or_else(|| panic!("acknowledged write at {offset} is not in the held file"));
        assert!(
            newest.record.data.iter().all(|b| b == fill),
            "the held copy of the write at {offset} has other bytes"
        );
    }
    eprintln!(
        "held: {} records, {} bytes, txgs {}..={} in {} ({seen_writing} statuses said `writing`)",
        held.records,
        held.data_bytes,
        held.txg_first,
        held.txg_last,
        path.display()
    );
    std::fs::remove_dir_all(&o.held_dir).ok();
}
