//! `fardisk iostat [-v] POOL [INTERVAL [COUNT]]`, in the shape of `zpool iostat`: the first
//! report covers the time since import, each later one the last interval.
//!
//! Per vdev (`-v`): the store (GETs are reads, PUTs writes), the intent log (device writes; the
//! log is read only at import), and each cache device (bytes read and written; log blocks
//! written count as write operations).

use super::query::{call, IostatArgs};
use super::size::human;
use crate::config::Config;
use crate::control::Request;
use anyhow::Result;
use std::fmt::Write as _;

macro_rules! outln {
    ($o:expr, $($a:tt)*) => {{
        let _ = writeln!($o, $($a)*);
    }};
}
use serde_json::{json, Value};
use std::time::Duration;

/// One row's counters (cumulative since import).
#[derive(Debug, Clone, Default, PartialEq)]
struct Counters {
    /// pool, store, logs, log_device, cache or cache_device.
    kind: &'static str,
    /// The pool's name, the store URL or the device path (empty for the logs and cache headers).
    device: String,
    state: Option<String>,
    read_ops: Option<u64>,
    write_ops: Option<u64>,
    read_bytes: Option<u64>,
    write_bytes: Option<u64>,
}

impl Counters {
    /// The row's label in the table, indented as zpool iostat -v does.
    fn label(&self) -> String {
        match self.kind {
            "pool" => self.device.clone(),
            "store" => format!("  store {}", self.device),
            "logs" => "  logs".into(),
            "cache" => "  cache".into(),
            _ => match &self.state {
                Some(s) => format!("    {} {s}", self.device),
                None => format!("    {}", self.device),
            },
        }
    }

    /// Identity across reports (a leg changing state is the same row).
    fn same_row(&self, other: &Counters) -> bool {
        self.kind == other.kind && self.device == other.device
    }
}

fn rows(v: &Value, verbose: bool) -> Vec<Counters> {
    let r = &v["store_requests"];
    let u = |x: &Value| x.as_u64();
    let store = |kind: &'static str, device: String| Counters {
        kind,
        device,
        state: None,
        read_ops: u(&r["get"]["requests"]),
        write_ops: u(&r["put"]["requests"]),
        read_bytes: u(&r["get"]["bytes"]),
        write_bytes: u(&r["put"]["bytes"]),
    };
    let mut out = vec![store("pool", v["name"].as_str().unwrap_or("?").to_string())];
    if !verbose {
        return out;
    }
    out.push(store("store", v["store"].as_str().unwrap_or("?").to_string()));
    if v["log"].is_object() {
        let l = &v["log"];
        out.push(Counters {
            kind: "logs",
            write_ops: u(&l["device_writes"]),
            write_bytes: u(&l["bytes_logged"]),
            ..Default::default()
        });
        for d in l["vdevs"].as_array().into_iter().flatten() {
            for leg in d["legs"].as_array().into_iter().flatten() {
                // Every leg of a mirror takes every write; per-leg counters are the vdev's.
                let state = leg["state"].as_str().map(str::to_string);
                out.push(Counters {
                    kind: "log_device",
                    device: leg["path"].as_str().unwrap_or("?").to_string(),
                    state,
                    ..Default::default()
                });
            }
        }
    }
    if let Some(devs) = v["cache"]["devices"].as_array() {
        out.push(Counters { kind: "cache", ..Default::default() });
        for d in devs {
            out.push(Counters {
                kind: "cache_device",
                device: d["path"].as_str().unwrap_or("?").to_string(),
                state: d["state"].as_str().map(|s| s.to_uppercase()),
                read_ops: None,
                write_ops: u(&d["log_blocks_written"]),
                read_bytes: u(&d["bytes_read"]),
                write_bytes: u(&d["bytes_written"]),
            });
        }
    }
    out
}

/// Object-store requests of every kind (PUT, GET, HEAD, DELETE, LIST) since import.
fn store_requests(v: &Value) -> Option<u64> {
    let r = &v["store_requests"];
    ["put", "get", "head", "delete", "list"].iter().map(|k| r[*k]["requests"].as_u64()).sum()
}

/// Per-second rates between two snapshots of the same row (the first report: since import).
fn rate(now: Option<u64>, before: Option<u64>, secs: f64) -> Option<f64> {
    now.map(|n| n.saturating_sub(before.unwrap_or(0)) as f64 / secs)
}

pub async fn iostat(a: IostatArgs, cfg: &Config) -> Result<()> {
    let interval = a.interval.unwrap_or(0);
    let count = a.count.unwrap_or(if interval == 0 { 1 } else { u64::MAX });
    let mut prev: Option<(Vec<Counters>, Option<u64>)> = None;
    let mut printed = 0u64;
    // Bounded by `count`; an interval with no count runs until interrupted, as zpool iostat does.
    while printed < count {
        let v = call(cfg, &a.pool, Request::Status).await?;
        let now = rows(&v, a.verbose);
        let secs = if prev.is_some() { interval.max(1) as f64 } else { 1.0 };
        let find = |row: &Counters| {
            prev.as_ref()
                .and_then(|p| p.0.iter().find(|r| r.same_row(row)).cloned())
                .unwrap_or_default()
        };
        let requests_per_s = rate(store_requests(&v), prev.as_ref().and_then(|p| p.1), secs);
        let rated: Vec<(Counters, [Option<f64>; 4])> = now
            .iter()
            .map(|r| {
                let b = find(r);
                (
                    r.clone(),
                    [
                        rate(r.read_ops, b.read_ops, secs),
                        rate(r.write_ops, b.write_ops, secs),
                        rate(r.read_bytes, b.read_bytes, secs),
                        rate(r.write_bytes, b.write_bytes, secs),
                    ],
                )
            })
            .collect();
        if a.json {
            let pool = &rated[0].1;
            let mut row = json!({"put_ops": pool[1], "put_bytes": pool[3], "get_ops": pool[0], "get_bytes": pool[2],
                "store_requests": requests_per_s, "dirty_bytes": v["dirty_bytes"], "txg": v["published_txg"]});
            if a.verbose {
                row["vdevs"] = rated[1..]
                    .iter()
                    .map(|(r, x)| json!({"kind": r.kind, "name": r.device, "state": r.state, "read_ops": x[0], "write_ops": x[1], "read_bytes": x[2], "write_bytes": x[3]}))
                    .collect();
            }
            println!("{row}");
        } else {
            let mut out = String::new();
            render_table(&mut out, &a.pool, &v, &rated, requests_per_s, a.verbose, printed);
            print!("{out}");
        }
        printed += 1;
        prev = Some((now, store_requests(&v)));
        if printed < count {
            tokio::time::sleep(Duration::from_secs(interval.max(1))).await;
        }
    }
    Ok(())
}

fn render_table(
    out: &mut String,
    pool: &str,
    v: &Value,
    rated: &[(Counters, [Option<f64>; 4])],
    requests_per_s: Option<f64>,
    verbose: bool,
    printed: u64,
) {
    let ops = |x: Option<f64>| x.map(|f| format!("{f:.0}")).unwrap_or_else(|| "-".into());
    let bw = |x: Option<f64>| x.map(|f| human(f as u64)).unwrap_or_else(|| "-".into());
    if !verbose {
        if printed.is_multiple_of(20) {
            outln!(
                out,
                "{:<12} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8} {:>8}",
                "pool",
                "put/s",
                "get/s",
                "req/s",
                "write/s",
                "read/s",
                "dirty",
                "txg"
            );
        }
        let x = &rated[0].1;
        outln!(
            out,
            "{:<12} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8} {:>8}",
            pool,
            ops(x[1]),
            ops(x[0]),
            ops(requests_per_s),
            bw(x[3]),
            bw(x[2]),
            human(v["dirty_bytes"].as_u64().unwrap_or(0)),
            v["published_txg"].as_u64().unwrap_or(0)
        );
        return;
    }
    let width = rated.iter().map(|(r, _)| r.label().len()).max().unwrap_or(10).max(24);
    outln!(out, "{:<width$}  {:>13}  {:>17}", "", "operations", "bandwidth");
    outln!(
        out,
        "{:<width$}  {:>6} {:>6}  {:>8} {:>8}",
        "pool / vdev",
        "read",
        "write",
        "read",
        "write"
    );
    outln!(
        out,
        "{}  {} {}  {} {}",
        "-".repeat(width),
        "-".repeat(6),
        "-".repeat(6),
        "-".repeat(8),
        "-".repeat(8)
    );
    for (r, x) in rated {
        outln!(
            out,
            "{:<width$}  {:>6} {:>6}  {:>8} {:>8}",
            r.label(),
            ops(x[0]),
            ops(x[1]),
            bw(x[2]),
            bw(x[3])
        );
    }
    outln!(out, "{}", "-".repeat(width + 36));
    outln!(out, "store requests/s (PUT, GET, HEAD, DELETE, LIST): {}", ops(requests_per_s));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbose_rows_cover_store_log_legs_and_cache() {
        let v = json!({"name": "tank", "store": "file:///s",
            "store_requests": {"get": {"requests": 10, "bytes": 4096}, "put": {"requests": 3, "bytes": 100},
                "head": {"requests": 0}, "delete": {"requests": 0}, "list": {"requests": 0}},
            "log": {"device_writes": 7, "bytes_logged": 28672, "vdevs": [{"legs": [{"path": "/l0", "state": "ONLINE"}, {"path": "/l1", "state": "FAULTED"}]}]},
            "cache": {"devices": [{"path": "/c0", "state": "Online", "bytes_read": 8192, "bytes_written": 1 << 20, "log_blocks_written": 1}]}});
        let names: Vec<String> = rows(&v, true).into_iter().map(|r| r.label()).collect();
        assert_eq!(
            names,
            [
                "tank",
                "  store file:///s",
                "  logs",
                "    /l0 ONLINE",
                "    /l1 FAULTED",
                "  cache",
                "    /c0 ONLINE"
            ]
        );
        let kinds: Vec<&str> = rows(&v, true).into_iter().map(|r| r.kind).collect();
        assert_eq!(
            kinds,
            ["pool", "store", "logs", "log_device", "log_device", "cache", "cache_device"]
        );
        assert_eq!(rows(&v, false).len(), 1);
        let log = &rows(&v, true)[2];
        assert_eq!((log.write_ops, log.write_bytes, log.read_ops), (Some(7), Some(28672), None));
        assert_eq!(rate(Some(30), Some(10), 2.0), Some(10.0));
        assert_eq!(rate(None, Some(10), 2.0), None);
        assert_eq!(store_requests(&v), Some(13));
        // A leg that changes state is the same row (its rates continue).
        let mut later = rows(&v, true)[3].clone();
        later.state = Some("FAULTED".into());
        assert!(later.same_row(&rows(&v, true)[3]));
        assert!(!later.same_row(&rows(&v, true)[4]));
    }

    /// The first report (rates since import, as zpool iostat's first line) of a real daemon's status.
    fn first_report(verbose: bool) -> String {
        let mut v = crate::cli::snapshot::status_fixture();
        v["cache"] = crate::cli::snapshot::arcstat_fixture()["l2arc"].clone();
        let rated: Vec<(Counters, [Option<f64>; 4])> = rows(&v, verbose)
            .into_iter()
            .map(|r| {
                let x = [
                    rate(r.read_ops, None, 1.0),
                    rate(r.write_ops, None, 1.0),
                    rate(r.read_bytes, None, 1.0),
                    rate(r.write_bytes, None, 1.0),
                ];
                (r, x)
            })
            .collect();
        let mut out = String::new();
        render_table(&mut out, "tank", &v, &rated, rate(store_requests(&v), None, 1.0), verbose, 0);
        out
    }

    #[test]
    fn snapshot_iostat() {
        crate::cli::snapshot::assert_snapshot("iostat.txt", &first_report(false));
        crate::cli::snapshot::assert_snapshot("iostat-v.txt", &first_report(true));
    }
}
