//! Turns the runs of the engine-store benchmark into result rows, one per configuration, in the
//! shape `bench/lib/result.py` takes (bench/README.md, schema fardisk-bench/1). Metric names end
//! in their unit. Pure: unit-tested without a store.

use crate::cold_reads::ColdReads;
use crate::engine::WriteFacts;
use crate::stats::{median, per_gib, percent, round3, Sample, GIB, MIB};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Series {
    pub x: Vec<f64>,
    pub y: Vec<f64>,
    pub x_label: String,
    pub y_label: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Row {
    pub setup: String,
    pub order: i64,
    pub duration_s: f64,
    /// Serialized as [name, value] pairs in `COLUMNS` order, which becomes the table's order.
    #[serde(serialize_with = "in_column_order")]
    pub metrics: BTreeMap<String, f64>,
    pub params: BTreeMap<String, Value>,
    pub series: BTreeMap<String, Series>,
    pub notes: String,
}

/// Everything one invocation measured.
#[derive(Debug, Clone, Default)]
pub struct Runs {
    pub raw_writes: Vec<Sample>,
    pub raw_reads: Vec<Sample>,
    pub engine_writes: Vec<(Sample, WriteFacts)>,
    pub engine_reads: Vec<Sample>,
    pub engine_reads_arc: Vec<Sample>,
    pub compressible: Option<(Sample, WriteFacts, crate::data::DataKind)>,
    /// Cold random 4 KiB reads per round: raw ranged GETs, the engine with leaf hints, without.
    pub cold_raw: Vec<ColdReads>,
    pub cold_hinted: Vec<ColdReads>,
    pub cold_plain: Vec<ColdReads>,
}

/// The knobs shared by every row (they become the table's parameter line).
#[derive(Debug, Clone)]
pub struct Knobs {
    pub object_bytes: usize,
    pub upload_concurrency: usize,
    pub read_concurrency: usize,
    pub writers: usize,
    pub arc_max_bytes: u64,
    pub params: BTreeMap<String, Value>,
    pub notes: String,
}

impl Knobs {
    pub fn raw_write_setup(&self) -> String {
        format!("raw PUT {} MiB objects x{}", self.object_bytes >> 20, self.upload_concurrency)
    }
    pub fn raw_read_setup(&self) -> String {
        format!("raw GET {} MiB objects x{}", self.object_bytes >> 20, self.read_concurrency)
    }
}

pub const ENGINE_WRITE_SETUP: &str = "fardisk engine seq write";
pub const ENGINE_COMPRESSIBLE_SETUP: &str = "fardisk engine seq write (compressible data)";
pub const ENGINE_READ_SETUP: &str = "fardisk engine seq read (cold, no cache)";

impl Knobs {
    pub fn engine_read_arc_setup(&self) -> String {
        format!("fardisk engine seq read (cold, empty {} MiB ARC)", self.arc_max_bytes >> 20)
    }
}

fn rates(samples: &[Sample]) -> Vec<f64> {
    samples.iter().map(Sample::mib_per_s).collect()
}

/// The median of per-round ratios: each engine run against the raw run next to it in time, so a
/// slow phase of a shared machine hits both sides of a pair.
pub fn paired_ratio_pct(engine: &[f64], raw: &[f64]) -> f64 {
    let ratios: Vec<f64> = engine.iter().zip(raw).map(|(e, r)| percent(*e, *r)).collect();
    median(&ratios).unwrap_or(0.0)
}

/// The table's columns, in order: the headline rate and ratio first, then request costs.
pub const COLUMNS: &[&str] = &[
    "write_mib_per_s",
    "read_mib_per_s",
    "ratio_to_raw_pct",
    "puts_per_gib",
    "put_mib_per_gib",
    "gets_per_gib",
    "get_mib_per_gib",
    "get_in_flight_mib",
    "get_in_flight_low_pct",
    "txgs_per_gib",
    "compress_ratio_x",
    "read_p50_ms",
    "read_mean_ms",
    "read_max_ms",
    "p50_to_raw_get_x",
    "gets_per_read",
];

fn in_column_order<S: serde::Serializer>(
    metrics: &BTreeMap<String, f64>,
    s: S,
) -> Result<S::Ok, S::Error> {
    let rank = |name: &str| COLUMNS.iter().position(|c| *c == name).unwrap_or(COLUMNS.len());
    let mut pairs: Vec<(&String, &f64)> = metrics.iter().collect();
    pairs.sort_by_key(|(name, _)| rank(name)); // Stable: unknown names keep their sorted order.
    s.collect_seq(pairs)
}

/// The median rate over rounds (the per-round values go to the notes and a series).
fn rate(metrics: &mut BTreeMap<String, f64>, stem: &str, values: &[f64]) {
    metrics.insert(format!("{stem}_mib_per_s"), round3(median(values).unwrap_or(0.0)));
}

/// Request counts summed over all runs, per GiB of logical data moved.
fn request_metrics(metrics: &mut BTreeMap<String, f64>, samples: &[&Sample], write: bool) {
    let bytes: u64 = samples.iter().map(|s| s.logical_bytes).sum();
    let sum = |f: fn(&Sample) -> u64| samples.iter().map(|s| f(s)).sum::<u64>();
    let (count, moved) = if write {
        (sum(|s| s.requests.puts), sum(|s| s.requests.put_bytes))
    } else {
        (sum(|s| s.requests.gets), sum(|s| s.requests.get_bytes))
    };
    let (count_name, bytes_name) = if write {
        ("puts_per_gib", "put_mib_per_gib")
    } else {
        ("gets_per_gib", "get_mib_per_gib")
    };
    metrics.insert(count_name.into(), round3(per_gib(count, bytes)));
    metrics.insert(bytes_name.into(), round3(moved as f64 / MIB * GIB / bytes.max(1) as f64));
}

fn by_round(values: &[f64], y_label: &str) -> Series {
    Series {
        x: (1..=values.len()).map(|r| r as f64).collect(),
        y: values.iter().map(|v| round3(*v)).collect(),
        x_label: "round".into(),
        y_label: y_label.into(),
    }
}

fn over_time(sample: &Sample, y_label: &str) -> Series {
    Series {
        x: sample.progress.iter().map(|p| round3(p.0)).collect(),
        y: sample.progress.iter().map(|p| round3(p.1)).collect(),
        x_label: "time since the first request (s)".into(),
        y_label: y_label.into(),
    }
}

fn row(knobs: &Knobs, setup: String, order: i64, samples: &[&Sample], notes: String) -> Row {
    let errors: u64 = samples.iter().map(|s| s.requests.errors).sum();
    Row {
        setup,
        order,
        duration_s: round3(samples.iter().map(|s| s.elapsed_s()).sum()),
        metrics: BTreeMap::new(),
        params: knobs.params.clone(),
        series: BTreeMap::new(),
        notes: format!("{notes} Store request errors: {errors}. {}", knobs.notes)
            .trim()
            .to_string(),
    }
}

fn list(values: &[f64]) -> String {
    values.iter().map(|v| format!("{v:.1}")).collect::<Vec<_>>().join(", ")
}

pub fn build(runs: &Runs, knobs: &Knobs) -> Vec<Row> {
    let raw_w = rates(&runs.raw_writes);
    let eng_samples: Vec<Sample> = runs.engine_writes.iter().map(|(s, _)| s.clone()).collect();
    let eng_w = rates(&eng_samples);
    let raw_r = rates(&runs.raw_reads);
    let raw_median = median(&raw_w).unwrap_or(0.0);
    let mut rows = Vec::new();
    let up = "uploaded (MiB)";

    let refs: Vec<&Sample> = runs.raw_writes.iter().collect();
    let mut r = row(
        knobs,
        knobs.raw_write_setup(),
        0,
        &refs,
        format!("per-round MiB/s: {}.", list(&raw_w)),
    );
    rate(&mut r.metrics, "write", &raw_w);
    request_metrics(&mut r.metrics, &refs, true);
    r.series.insert("write_mib_per_s_by_round".into(), by_round(&raw_w, "MiB/s"));
    if let Some(last) = runs.raw_writes.last() {
        r.series.insert("uploaded_mib_over_time".into(), over_time(last, up));
    }
    rows.push(r);

    let refs: Vec<&Sample> = eng_samples.iter().collect();
    let pairs: Vec<f64> = eng_w.iter().zip(&raw_w).map(|(e, w)| percent(*e, *w)).collect();
    let facts: Vec<&WriteFacts> = runs.engine_writes.iter().map(|(_, f)| f).collect();
    let mut r = row(knobs, ENGINE_WRITE_SETUP.into(), 1, &refs, format!(
        "{} writers of 1 MiB chunks; per-round MiB/s: {}; per-round % of the raw run before it: {}; {}.",
        knobs.writers, list(&eng_w), list(&pairs), facts_note(&facts)));
    rate(&mut r.metrics, "write", &eng_w);
    r.metrics.insert("ratio_to_raw_pct".into(), round3(paired_ratio_pct(&eng_w, &raw_w)));
    request_metrics(&mut r.metrics, &refs, true);
    write_facts(&mut r.metrics, &facts, &refs);
    r.series.insert("write_mib_per_s_by_round".into(), by_round(&eng_w, "MiB/s"));
    if let Some((last, _)) = runs.engine_writes.last() {
        r.series.insert("uploaded_mib_over_time".into(), over_time(last, up));
    }
    rows.push(r);

    if let Some((s, f, kind)) = &runs.compressible {
        let mut r = row(knobs, ENGINE_COMPRESSIBLE_SETUP.into(), 2, &[s], format!(
            "One run, logical MiB/s, compared with the median raw PUT rate of incompressible data; {}.",
            facts_note(&[f])));
        rate(&mut r.metrics, "write", &[s.mib_per_s()]);
        r.metrics.insert("ratio_to_raw_pct".into(), round3(percent(s.mib_per_s(), raw_median)));
        request_metrics(&mut r.metrics, &[s], true);
        write_facts(&mut r.metrics, &[f], &[s]);
        r.metrics.insert("compress_ratio_x".into(), round3(f.compress_ratio));
        r.series.insert("uploaded_mib_over_time".into(), over_time(s, up));
        r.params.insert("data".into(), Value::from(kind.label()));
        rows.push(r);
    }

    let refs: Vec<&Sample> = runs.raw_reads.iter().collect();
    let mut r = row(
        knobs,
        knobs.raw_read_setup(),
        3,
        &refs,
        format!("Whole-object GETs; per-round MiB/s: {}.", list(&raw_r)),
    );
    rate(&mut r.metrics, "read", &raw_r);
    request_metrics(&mut r.metrics, &refs, false);
    if let Some(last) = runs.raw_reads.last() {
        r.series.insert("downloaded_mib_over_time".into(), over_time(last, "downloaded (MiB)"));
    }
    rows.push(r);

    let arc_note = format!(
        "Fresh import with an empty ARC of {} MiB (the daemon's default cache, no L2ARC)",
        knobs.arc_max_bytes >> 20
    );
    let reads = [
        (
            ENGINE_READ_SETUP.to_string(),
            &runs.engine_reads,
            "Fresh import with NoCache (readahead results are not kept)".to_string(),
        ),
        (knobs.engine_read_arc_setup(), &runs.engine_reads_arc, arc_note),
    ];
    for (order, (setup, samples, what)) in (4..).zip(reads) {
        if samples.is_empty() {
            continue;
        }
        let rates_r = rates(samples);
        let refs: Vec<&Sample> = samples.iter().collect();
        let mut r = row(
            knobs,
            setup,
            order,
            &refs,
            format!(
                "{what}, one reader of 1 MiB chunks, every byte checked; per-round MiB/s: {}.",
                list(&rates_r)
            ),
        );
        rate(&mut r.metrics, "read", &rates_r);
        r.metrics.insert("ratio_to_raw_pct".into(), round3(paired_ratio_pct(&rates_r, &raw_r)));
        request_metrics(&mut r.metrics, &refs, false);
        in_flight_metrics(&mut r.metrics, &refs);
        if let Some(last) = samples.last() {
            r.series.insert("downloaded_mib_over_time".into(), over_time(last, "downloaded (MiB)"));
        }
        rows.push(r);
    }
    rows.extend(cold_rows(runs, knobs));
    rows
}

pub const COLD_RAW_SETUP: &str = "raw ranged 4 KiB GET, one at a time";
pub const COLD_HINTED_SETUP: &str = "fardisk engine cold random 4 KiB read (leaf hints)";
pub const COLD_PLAIN_SETUP: &str = "fardisk engine cold random 4 KiB read (cold_read_bytes_max=0)";

/// The cold random reads: latencies over every round's reads, and the engine's p50 against raw's
/// (a round trip), so 1.0x is one round trip and about 2x two in sequence.
fn cold_rows(runs: &Runs, knobs: &Knobs) -> Vec<Row> {
    let all = |sides: &[ColdReads]| -> Vec<f64> {
        sides.iter().flat_map(|c| c.latencies_ms.iter().copied()).collect()
    };
    let raw_p50 = median(&all(&runs.cold_raw)).unwrap_or(0.0);
    let sides = [
        (COLD_RAW_SETUP, &runs.cold_raw, "The floor: one ranged GET of the same 4 KiB of the raw objects, one round trip."),
        (COLD_HINTED_SETUP, &runs.cold_hinted, "Fresh import, empty ARC, interior map pages loaded (map_warm), leaf pages not: each read asks for its leaf and the range its level-1 page's hint names at once."),
        (COLD_PLAIN_SETUP, &runs.cold_plain, "The same without the hints' GET: the leaf, then the block."),
    ];
    let mut rows = Vec::new();
    for (order, (setup, samples, what)) in (10..).zip(sides) {
        let latencies = all(samples);
        if latencies.is_empty() {
            continue;
        }
        let gets: u64 = samples.iter().map(|c| c.gets).sum();
        let mut r = Row {
            setup: setup.to_string(),
            order,
            duration_s: round3(latencies.iter().sum::<f64>() / 1000.0),
            metrics: BTreeMap::new(),
            params: knobs.params.clone(),
            series: BTreeMap::new(),
            notes: format!(
                "{what} One read at a time, each in a 64 MiB of the volume of its own, every byte checked; {} reads over {} rounds. {}",
                latencies.len(),
                samples.len(),
                knobs.notes
            )
            .trim()
            .to_string(),
        };
        let p50 = median(&latencies).unwrap_or(0.0);
        r.metrics.insert("read_p50_ms".into(), round3(p50));
        r.metrics.insert(
            "read_mean_ms".into(),
            round3(latencies.iter().sum::<f64>() / latencies.len() as f64),
        );
        r.metrics
            .insert("read_max_ms".into(), round3(latencies.iter().copied().fold(0.0, f64::max)));
        if raw_p50 > 0.0 {
            r.metrics.insert("p50_to_raw_get_x".into(), round3(p50 / raw_p50));
        }
        r.metrics.insert("gets_per_read".into(), round3(gets as f64 / latencies.len() as f64));
        rows.push(r);
    }
    rows
}

/// How busy the reader kept the store: the median over runs of the mean MiB of ranged GETs under
/// way, and of the share of the time with less than `IN_FLIGHT_LOW_MIB` under way.
fn in_flight_metrics(metrics: &mut BTreeMap<String, f64>, samples: &[&Sample]) {
    let got: Vec<crate::progress::InFlight> = samples.iter().filter_map(|s| s.in_flight).collect();
    if got.is_empty() {
        return;
    }
    let means: Vec<f64> = got.iter().map(|f| f.mean_mib).collect();
    let lows: Vec<f64> = got.iter().map(|f| f.low_pct).collect();
    metrics.insert("get_in_flight_mib".into(), round3(median(&means).unwrap_or(0.0)));
    metrics.insert("get_in_flight_low_pct".into(), round3(median(&lows).unwrap_or(0.0)));
}

fn write_facts(metrics: &mut BTreeMap<String, f64>, facts: &[&WriteFacts], samples: &[&Sample]) {
    let bytes: u64 = samples.iter().map(|s| s.logical_bytes).sum();
    let txgs: u64 = facts.iter().map(|f| f.txgs).sum();
    metrics.insert("txgs_per_gib".into(), round3(per_gib(txgs, bytes)));
}

fn facts_note(facts: &[&WriteFacts]) -> String {
    let each: Vec<String> = facts
        .iter()
        .map(|f| format!("{} txgs, {} segments ({:.0} MiB), {} throttle delays, {} stalls, final sync {:.2} s",
            f.txgs, f.segments, f.segment_bytes as f64 / MIB, f.throttle_delays, f.throttle_stalls, f.final_sync_us as f64 / 1e6))
        .collect();
    format!("engine per round: [{}]", each.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Requests;

    fn sample(mib: u64, secs: u64, puts: u64, gets: u64) -> Sample {
        let bytes = mib << 20;
        let requests =
            Requests { puts, put_bytes: bytes, gets, get_bytes: bytes, ..Default::default() };
        Sample::new(bytes, secs * 1_000_000, requests, vec![(0.0, 0.0), (1.0, mib as f64)])
    }

    fn knobs() -> Knobs {
        Knobs {
            object_bytes: 16 << 20,
            upload_concurrency: 8,
            read_concurrency: 8,
            writers: 4,
            arc_max_bytes: 1 << 30,
            params: BTreeMap::new(),
            notes: "shared machine".into(),
        }
    }

    #[test]
    fn paired_ratio_is_the_median_of_pairs_not_of_totals() {
        // Round 2 ran in a slow phase for both sides: paired, it still says 90 %, while the
        // ratio of the medians (50 / 100) would blame the engine for the machine.
        assert_eq!(paired_ratio_pct(&[90.0, 27.0, 50.0], &[100.0, 30.0, 100.0]), 90.0);
        assert_eq!(paired_ratio_pct(&[], &[]), 0.0);
    }

    #[test]
    fn cold_random_rows_compare_each_side_with_one_raw_round_trip() {
        let cold = |ms: &[f64], gets: u64| ColdReads { latencies_ms: ms.to_vec(), gets };
        let runs = Runs {
            cold_raw: vec![cold(&[40.0, 44.0, 42.0], 3)],
            cold_hinted: vec![cold(&[45.0, 43.0], 4), cold(&[47.0], 2)],
            cold_plain: vec![cold(&[88.0, 90.0, 84.0], 6)],
            ..Runs::default()
        };
        let rows = cold_rows(&runs, &knobs());
        let setups: Vec<&str> = rows.iter().map(|r| r.setup.as_str()).collect();
        assert_eq!(setups, [COLD_RAW_SETUP, COLD_HINTED_SETUP, COLD_PLAIN_SETUP]);
        let (raw, hinted, plain) = (&rows[0].metrics, &rows[1].metrics, &rows[2].metrics);
        assert_eq!(
            (raw["read_p50_ms"], raw["p50_to_raw_get_x"], raw["gets_per_read"]),
            (42.0, 1.0, 1.0)
        );
        assert_eq!(hinted["read_p50_ms"], 45.0, "over both rounds' reads");
        assert_eq!((hinted["read_max_ms"], hinted["gets_per_read"]), (47.0, 2.0));
        assert_eq!(plain["p50_to_raw_get_x"], 2.095, "88 ms against 42: two round trips");
        assert!(rows[1].notes.contains("3 reads over 2 rounds"), "{}", rows[1].notes);
        assert!(cold_rows(&Runs::default(), &knobs()).is_empty(), "no cold reads, no rows");
    }

    #[test]
    fn rows_carry_the_issue_metrics_with_units_last() {
        let runs = Runs {
            raw_writes: vec![sample(1024, 4, 64, 0), sample(1024, 2, 64, 0)],
            raw_reads: vec![sample(1024, 2, 0, 64), sample(1024, 2, 0, 64)],
            engine_writes: vec![
                (sample(1024, 8, 100, 0), WriteFacts { txgs: 10, ..Default::default() }),
                (sample(1024, 4, 90, 0), WriteFacts { txgs: 12, ..Default::default() }),
            ],
            engine_reads: vec![sample(1024, 4, 0, 1100), sample(1024, 4, 0, 1100)],
            engine_reads_arc: vec![Sample {
                in_flight: Some(crate::progress::InFlight { mean_mib: 45.5, low_pct: 52.0 }),
                ..sample(1024, 2, 0, 300)
            }],
            compressible: Some((
                sample(1024, 4, 50, 0),
                WriteFacts { compress_ratio: 1.8, ..Default::default() },
                crate::data::DataKind::Compressible { zero_percent: 50 },
            )),
            ..Runs::default()
        };
        let rows = build(&runs, &knobs());
        let setups: Vec<&str> = rows.iter().map(|r| r.setup.as_str()).collect();
        assert_eq!(
            setups,
            [
                "raw PUT 16 MiB objects x8",
                ENGINE_WRITE_SETUP,
                ENGINE_COMPRESSIBLE_SETUP,
                "raw GET 16 MiB objects x8",
                ENGINE_READ_SETUP,
                "fardisk engine seq read (cold, empty 1024 MiB ARC)"
            ]
        );
        let raw = &rows[0].metrics;
        assert_eq!(raw["write_mib_per_s"], 384.0, "median of 256 and 512");
        assert_eq!(raw["puts_per_gib"], 64.0);
        let eng = &rows[1].metrics;
        assert_eq!(eng["write_mib_per_s"], 192.0);
        assert_eq!(eng["ratio_to_raw_pct"], 50.0, "each round the engine did half the raw rate");
        assert_eq!(eng["puts_per_gib"], 95.0);
        assert_eq!(eng["txgs_per_gib"], 11.0);
        let comp = &rows[2].metrics;
        assert_eq!(comp["ratio_to_raw_pct"], 66.667, "256 MiB/s against the raw median of 384");
        assert_eq!(comp["compress_ratio_x"], 1.8);
        assert!(rows[2].params["data"].as_str().is_some_and(|d| d.contains("50% zeros")));
        assert_eq!(rows[4].metrics["gets_per_gib"], 1100.0);
        assert_eq!(rows[4].metrics["ratio_to_raw_pct"], 50.0);
        assert_eq!(
            (rows[5].metrics["read_mib_per_s"], rows[5].metrics["gets_per_gib"]),
            (512.0, 300.0)
        );
        assert_eq!(rows[5].order, 5);
        let busy = (rows[5].metrics["get_in_flight_mib"], rows[5].metrics["get_in_flight_low_pct"]);
        assert_eq!(busy, (45.5, 52.0), "how busy the reader kept the store");
        assert!(!rows[4].metrics.contains_key("get_in_flight_mib"), "not sampled, not shown");
        assert!(
            rows.iter().all(|r| r.notes.ends_with("Store request errors: 0. shared machine")),
            "{}",
            rows[0].notes
        );
        let json = serde_json::to_value(&rows[1]).expect("serializes");
        let names: Vec<&str> = json["metrics"]
            .as_array()
            .expect("pairs")
            .iter()
            .map(|p| p[0].as_str().expect("name"))
            .collect();
        assert_eq!(
            names,
            [
                "write_mib_per_s",
                "ratio_to_raw_pct",
                "puts_per_gib",
                "put_mib_per_gib",
                "txgs_per_gib"
            ]
        );
        for r in &rows {
            for name in r.metrics.keys() {
                let unit_last = ["_per_s", "_per_gib", "_pct", "_s", "_count", "_x", "_mib"]
                    .iter()
                    .any(|u| name.ends_with(u));
                assert!(unit_last, "metric {name} must end in its unit");
            }
        }
    }
}
