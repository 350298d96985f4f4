//! The exposition of a real daemon's `status --json` and `arcstat --json` (captured from a pool
//! with a mirrored log and a cache device, in `testdata/`).

use super::*;

fn fixture() -> String {
    let status: Value = serde_json::from_str(include_str!("testdata/status.json")).unwrap();
    let arc: Value = serde_json::from_str(include_str!("testdata/arcstat.json")).unwrap();
    // 2.5 s after the txg was published.
    let now_ms = status["published_time_ms"].as_u64().unwrap() + 2_500;
    encode("tank", &status, &arc, now_ms)
}

fn sample(text: &str, prefix: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no sample {prefix} in\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn pool_and_store_counters_match_the_status_snapshot() {
    let t = fixture();
    assert_eq!(sample(&t, r#"fardisk_pool_state{pool="tank",state="ONLINE"}"#), 1.0);
    assert_eq!(sample(&t, r#"fardisk_txg_published{pool="tank"}"#), 3.0);
    assert_eq!(sample(&t, r#"fardisk_txg_published_age_seconds{pool="tank"}"#), 2.5);
    assert_eq!(sample(&t, r#"fardisk_dirty_bytes_max{pool="tank"}"#), 536870912.0);
    assert_eq!(sample(&t, r#"fardisk_txgs_synced_total{pool="tank"}"#), 2.0);
    assert_eq!(sample(&t, r#"fardisk_store_requests_total{pool="tank",op="put"}"#), 12.0);
    assert_eq!(sample(&t, r#"fardisk_store_requests_total{pool="tank",op="list"}"#), 3.0);
    assert_eq!(
        sample(&t, r#"fardisk_store_transferred_bytes_total{pool="tank",op="put"}"#),
        3976.0
    );
    assert_eq!(sample(&t, r#"fardisk_volume_size_bytes{pool="tank",volume="v"}"#), 67108864.0);
    // 12 PUTs and 3 LISTs at $0.005 per 1,000, 4 GETs at $0.0004 per 1,000.
    let cost: f64 = ["put", "get", "head", "delete", "list"]
        .iter()
        .map(|op| {
            sample(
                &t,
                &format!(
                    r#"fardisk_store_request_cost_usd_estimate_total{{pool="tank",op="{op}"}}"#
                ),
            )
        })
        .sum();
    assert!((cost - (15.0 * 0.005 + 4.0 * 0.0004) / 1000.0).abs() < 1e-12, "{cost}");
}

#[test]
fn histograms_are_cumulative_and_end_at_the_count() {
    let t = fixture();
    // PUT buckets in the fixture: 9 under 250 µs, 2 more under 500 µs, 1 more under 1 ms.
    assert_eq!(
        sample(
            &t,
            r#"fardisk_store_request_latency_seconds_bucket{le="0.00025",pool="tank",op="put"}"#
        ),
        9.0
    );
    assert_eq!(
        sample(
            &t,
            r#"fardisk_store_request_latency_seconds_bucket{le="0.0005",pool="tank",op="put"}"#
        ),
        11.0
    );
    assert_eq!(
        sample(
            &t,
            r#"fardisk_store_request_latency_seconds_bucket{le="+Inf",pool="tank",op="put"}"#
        ),
        12.0
    );
    assert_eq!(
        sample(&t, r#"fardisk_store_request_latency_seconds_count{pool="tank",op="put"}"#),
        12.0
    );
    assert_eq!(
        sample(&t, r#"fardisk_store_request_latency_seconds_sum{pool="tank",op="put"}"#),
        0.003
    );
    // The log's last bucket (u64::MAX in the JSON) is +Inf.
    assert_eq!(
        sample(&t, r#"fardisk_log_commit_latency_seconds_bucket{le="0.000025",pool="tank"}"#),
        3.0
    );
    assert_eq!(
        sample(&t, r#"fardisk_log_commit_latency_seconds_bucket{le="+Inf",pool="tank"}"#),
        4.0
    );
    assert_eq!(sample(&t, r#"fardisk_log_commit_latency_seconds_sum{pool="tank"}"#), 0.001234);
}

#[test]
fn log_legs_and_cache_devices_are_labelled_by_path() {
    let t = fixture();
    assert_eq!(
        sample(
            &t,
            r#"fardisk_log_device_online{pool="tank",vdev="9beed356c3b4a301",device="/tmp/fdm/log1"}"#
        ),
        1.0
    );
    assert_eq!(
        sample(
            &t,
            r#"fardisk_log_device_write_errors_total{pool="tank",vdev="9beed356c3b4a301",device="/tmp/fdm/log0"}"#
        ),
        0.0
    );
    assert_eq!(
        sample(
            &t,
            r#"fardisk_log_device_timeouts_total{pool="tank",vdev="9beed356c3b4a301",device="/tmp/fdm/log1"}"#
        ),
        0.0
    );
    assert_eq!(sample(&t, r#"fardisk_log_capacity_bytes{pool="tank"}"#), 268419072.0);
    assert_eq!(
        sample(&t, r#"fardisk_l2arc_device_online{pool="tank",device="/tmp/fdm/cache0"}"#),
        1.0
    );
    assert_eq!(sample(&t, r#"fardisk_l2arc_read_bytes_total{pool="tank"}"#), 16320.0);
    assert_eq!(sample(&t, r#"fardisk_arc_max_bytes{pool="tank"}"#), 1073741824.0);
    assert_eq!(sample(&t, r#"fardisk_scrub_state{pool="tank",state="none"}"#), 1.0);
}

#[test]
fn every_family_has_help_and_type_and_the_text_ends_with_eof() {
    let t = fixture();
    assert!(t.ends_with("# EOF\n"));
    let types = t.lines().filter(|l| l.starts_with("# TYPE ")).count();
    let helps = t.lines().filter(|l| l.starts_with("# HELP ")).count();
    assert_eq!(types, helps);
    assert!(types >= 80, "only {types} families");
    // Every sample belongs to a family declared above it, with the pool label.
    for l in t.lines().filter(|l| !l.starts_with('#')) {
        assert!(l.starts_with("fardisk_") && l.contains(r#"pool="tank""#), "{l}");
    }
}

#[test]
fn a_pool_without_log_or_cache_leaves_their_families_out() {
    let mut status: Value = serde_json::from_str(include_str!("testdata/status.json")).unwrap();
    status["log"] = Value::Null;
    let mut arc: Value = serde_json::from_str(include_str!("testdata/arcstat.json")).unwrap();
    arc["l2arc"] = Value::Null;
    let t = encode("tank", &status, &arc, 0);
    assert!(!t.contains("fardisk_log_"), "{t}");
    assert!(!t.contains("fardisk_l2arc_"), "{t}");
    assert!(t.contains("fardisk_arc_hits_total"));
}

#[test]
fn a_log_leg_waiting_on_its_device_shows_how_long() {
    let mut status: Value = serde_json::from_str(include_str!("testdata/status.json")).unwrap();
    status["log"]["vdevs"][0]["legs"][1]["io_waiting_ms"] = serde_json::json!(12_345);
    let arc: Value = serde_json::from_str(include_str!("testdata/arcstat.json")).unwrap();
    let t = encode("tank", &status, &arc, 0);
    let leg = |n: u32| {
        format!(
            r#"fardisk_log_device_io_waiting_seconds{{pool="tank",vdev="9beed356c3b4a301",device="/tmp/fdm/log{n}"}}"#
        )
    };
    assert_eq!(sample(&t, &leg(1)), 12.345);
    assert_eq!(sample(&t, &leg(0)), 0.0, "no cycle under way (the fixture has no field)");
}
