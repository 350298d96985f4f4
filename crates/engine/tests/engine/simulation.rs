//! The seeded whole-engine simulation (see `sim/mod.rs`): a fixed set of short seeds in CI, a
//! replay check (one seed run twice must do exactly the same), a soak mode by environment, and a
//! single seed for reproducing a failure.
//!
//! * `cargo test -p fardisk-engine --test engine simulation:: -- --nocapture`: the CI seeds.
//! * `FARDISK_SIM_SEEDS=200 FARDISK_SIM_START=1000 FARDISK_SIM_STEPS=2000 cargo test --release
//!   -p fardisk-engine --test engine simulation::soak -- --nocapture --ignored`: a soak.
//! * `FARDISK_SIM_SEED=N [FARDISK_SIM_STEPS=S] cargo test -p fardisk-engine --test engine
//!   simulation::one_seed -- --nocapture`: replays the seed a failure printed.

use crate::sim;

use sim::{run_seed, SimOptions};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

const CI_STEPS: usize = 400;

fn run_and_print(seed: u64, steps: usize) -> sim::Report {
    let (report, counts) = run_seed(SimOptions::for_seed(seed, steps));
    eprintln!("sim {report:?}");
    eprintln!(
        "sim seed {seed}: store injected {} errors, {} lost responses, {} conflicting create-only PUTs, {} outage refusals, {} crash refusals; fingerprint {:016x}",
        counts.injected_errors, counts.lost_responses, counts.conflicts, counts.outage_refusals, counts.crash_refusals, report.fingerprint()
    );
    report
}

#[test]
fn ci_seeds() {
    let mut totals = sim::Report::default();
    for seed in 1..=6u64 {
        let r = run_and_print(seed, CI_STEPS);
        totals.ops += r.ops;
        totals.acks += r.acks;
        totals.crashes += r.crashes;
        totals.crashes_mid_txg += r.crashes_mid_txg;
        totals.crashes_mid_commit += r.crashes_mid_commit;
        totals.imports_cut += r.imports_cut;
        totals.outages += r.outages;
        totals.suspended_seen += r.suspended_seen;
        totals.leg_faults += r.leg_faults;
        totals.leg_hangs += r.leg_hangs;
        totals.cache_damages += r.cache_damages;
        totals.store_corruptions += r.store_corruptions;
        totals.unacked_ops_lost += r.unacked_ops_lost;
        totals.store_power_cuts += r.store_power_cuts;
        totals.store_objects_volatile += r.store_objects_volatile;
        totals.store_objects_reverted += r.store_objects_reverted;
        totals.store_objects_torn += r.store_objects_torn;
        totals.big_frees += r.big_frees;
        totals.snapshot_destroys += r.snapshot_destroys;
        totals.crashes_mid_frees += r.crashes_mid_frees;
    }
    eprintln!(
        "sim totals: 6 seeds x {CI_STEPS} steps, {} ops, {} acknowledged syncs, {} crashes ({} inside a txg's uploads, {} between a log write and its flush, {} followed by an import that died too), {} outages (SUSPENDED seen {} times, every one healed by itself), {} log-leg faults ({} hung legs given up on), {} cache-device damages, {} corrupted store objects, {} unacknowledged ops cut by crashes, {} power cuts of a file:// store's host ({} objects not yet durable: {} reverted, {} torn), 0 acknowledged lost",
        totals.ops, totals.acks, totals.crashes, totals.crashes_mid_txg, totals.crashes_mid_commit, totals.imports_cut, totals.outages, totals.suspended_seen,
        totals.leg_faults, totals.leg_hangs, totals.cache_damages, totals.store_corruptions, totals.unacked_ops_lost, totals.store_power_cuts,
        totals.store_objects_volatile, totals.store_objects_reverted, totals.store_objects_torn
    );
    assert!(
        totals.crashes > 0 && totals.outages > 0 && totals.leg_faults > 0,
        "the CI seeds must exercise crashes, outages and leg faults"
    );
    assert!(totals.leg_hangs > 0, "the CI seeds must hang a log leg mid-commit");
    eprintln!(
        "sim totals: {} big trims and {} snapshot destroys, {} of them cut by a crash with frees still queued or a walk under way",
        totals.big_frees, totals.snapshot_destroys, totals.crashes_mid_frees
    );
    assert!(totals.snapshot_destroys > 0, "the CI seeds must destroy snapshots");
    assert!(
        totals.crashes_mid_frees > 0,
        "the CI seeds must crash a pool half-way through a big trim's frees"
    );
    assert!(
        totals.store_power_cuts > 0,
        "the CI seeds must cut the power of a file:// store's host"
    );
}

/// The same seed twice, on two threads at once so that each disturbs the other's timing: the
/// same steps, the same store mutations in the same order, the same faults injected, the same
/// crash cuts and the same final volumes.
#[test]
fn a_seed_replays_exactly() {
    let seed = env_u64("FARDISK_SIM_SEED").unwrap_or(7);
    let opts = SimOptions { trace: true, ..SimOptions::for_seed(seed, CI_STEPS / 2) };
    let runs: Vec<_> =
        (0..2).map(|_| std::thread::spawn(move || sim::run_seed_traced(opts))).collect();
    let mut results = runs.into_iter().map(|r| r.join().expect("simulation thread"));
    let (a, b) = (results.next().expect("first run"), results.next().expect("second run"));
    eprintln!("sim {:?}\nsim {:?}", a.0, b.0);
    if let Some(diverged) = first_difference(&a.2, &b.2) {
        eprintln!("seed {seed}: the two runs' store requests diverged\n{diverged}");
    }
    assert_eq!(a.0, b.0, "seed {seed} did not replay exactly");
    assert_eq!(a.1, b.1, "seed {seed} replayed with different store faults");
    assert!(a.2 == b.2, "seed {seed} replayed with different store requests");
}

/// Where two traces of the same seed part: the lines before (from the last step note) and the
/// first few of each after.
fn first_difference(a: &[String], b: &[String]) -> Option<String> {
    let at = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i))?;
    let step = a[..at].iter().rposition(|l| l.starts_with("# step")).unwrap_or(0);
    let from = step.max(at.saturating_sub(40));
    let mut out = format!("line {at} of {} and {}:\n", a.len(), b.len());
    if from > step {
        out += &format!("    {}\n    ...\n", a[step]);
    }
    for l in &a[from..at] {
        out += &format!("    {l}\n");
    }
    for (name, t) in [("first", a), ("second", b)] {
        out += &format!("  {name} run:\n");
        for l in t.iter().skip(at).take(12) {
            out += &format!("    {l}\n");
        }
    }
    Some(out)
}

#[test]
fn one_seed() {
    let Some(seed) = env_u64("FARDISK_SIM_SEED") else { return };
    let steps = env_u64("FARDISK_SIM_STEPS").unwrap_or(CI_STEPS as u64) as usize;
    run_and_print(seed, steps);
}

#[test]
#[ignore = "soak: run with --ignored and FARDISK_SIM_SEEDS"]
fn soak() {
    let n = env_u64("FARDISK_SIM_SEEDS").unwrap_or(20);
    let start = env_u64("FARDISK_SIM_START").unwrap_or(1000);
    let steps = env_u64("FARDISK_SIM_STEPS").unwrap_or(2000) as usize;
    for seed in start..start + n {
        run_and_print(seed, steps);
    }
}
