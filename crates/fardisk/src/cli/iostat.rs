//! `fardisk iostat [-v] POOL [INTERVAL [COUNT]]`, in the shape of `zpool iostat`: the first
//! report covers the time since import, each later one the last interval.
//!
//! Per vdev (`-v`): the store (GETs are reads, PUTs writes), the intent log (device writes; the
//! log is read only at import), and each cache device (bytes read and written; log blocks
//! written count as write operations).

use super::query::{call, IostatArgs};
use super::size::human;
use anyhow::Result;
use serde_json::{json, Value};
use std::time::Duration;

/// One row's counters (cumulative since import).
#[derive(Debug, Clone, Default, PartialEq)]
struct Counters {
    name: String,
    read_ops: Option<u64>,
    write_ops: Option<u64>,
    read_bytes: Option<u64>,
    write_bytes: Option<u64>,
}

fn rows(v: &Value, verbose: bool) -> Vec<Counters> {
    let r = &v["store_requests"];
    let u = |x: &Value| x.as_u64();
    let store = |name: String| Counters {
        name,
        read_ops: u(&r["get"]["requests"]),
        write_ops: u(&r["put"]["requests"]),
        read_bytes: u(&r["get"]["bytes"]),
        write_bytes: u(&r["put"]["bytes"]),
    };
    let mut out = vec![store(v["name"].as_str().unwrap_or("?").to_string())];
    if !verbose {
        return out;
    }
    out.push(store(format!("  store {}", v["store"].as_str().unwrap_or("?"))));
    if v["log"].is_object() {
        let l = &v["log"];
        out.push(Counters { name: "  logs".into(), read_ops: None, write_ops: u(&l["device_writes"]), read_bytes: None, write_bytes: u(&l["bytes_logged"]) });
        for d in l["vdevs"].as_array().into_iter().flatten() {
            for leg in d["legs"].as_array().into_iter().flatten() {
                // Every leg of a mirror takes every write; per-leg counters are the vdev's.
                out.push(Counters { name: format!("    {} {}", leg["path"].as_str().unwrap_or("?"), leg["state"].as_str().unwrap_or("?")), ..Default::default() });
            }
        }
    }
    if let Some(devs) = v["cache"]["devices"].as_array() {
        out.push(Counters { name: "  cache".into(), ..Default::default() });
        for d in devs {
            out.push(Counters {
                name: format!("    {}", d["path"].as_str().unwrap_or("?")),
                read_ops: None,
                write_ops: u(&d["log_blocks_written"]),
                read_bytes: u(&d["bytes_read"]),
                write_bytes: u(&d["bytes_written"]),
            });
        }
    }
    out
}

/// Per-second rates between two snapshots of the same row (the first report: since import).
fn rate(now: Option<u64>, before: Option<u64>, secs: f64) -> Option<f64> {
    now.map(|n| n.saturating_sub(before.unwrap_or(0)) as f64 / secs)
}

pub async fn iostat(a: IostatArgs) -> Result<()> {
    let interval = a.interval.unwrap_or(0);
    let count = a.count.unwrap_or(if interval == 0 { 1 } else { u64::MAX });
    let mut prev: Option<Vec<Counters>> = None;
    let mut printed = 0u64;
    // Bounded by `count`; an interval with no count runs until interrupted, as zpool iostat does.
    while printed < count {
        let v = call(&a.pool, "status", Value::Null).await?;
        let now = rows(&v, a.verbose);
        let secs = if prev.is_some() { interval.max(1) as f64 } else { 1.0 };
        let find = |name: &str| prev.as_ref().and_then(|p| p.iter().find(|r| r.name == name).cloned()).unwrap_or_default();
        let rated: Vec<(String, [Option<f64>; 4])> = now
            .iter()
            .map(|r| {
                let b = find(&r.name);
                (r.name.clone(), [rate(r.read_ops, b.read_ops, secs), rate(r.write_ops, b.write_ops, secs), rate(r.read_bytes, b.read_bytes, secs), rate(r.write_bytes, b.write_bytes, secs)])
            })
            .collect();
        if a.json {
            let pool = &rated[0].1;
            let mut row = json!({"put_ops": pool[1], "put_bytes": pool[3], "get_ops": pool[0], "get_bytes": pool[2],
                "dirty_bytes": v["dirty_bytes"], "txg": v["published_txg"]});
            if a.verbose {
                row["vdevs"] = rated[1..].iter().map(|(n, x)| json!({"name": n.trim(), "read_ops": x[0], "write_ops": x[1], "read_bytes": x[2], "write_bytes": x[3]})).collect();
            }
            println!("{row}");
        } else {
            print_table(&a.pool, &v, &rated, a.verbose, printed);
        }
        printed += 1;
        prev = Some(now);
        if printed < count {
            tokio::time::sleep(Duration::from_secs(interval.max(1))).await;
        }
    }
    Ok(())
}

fn print_table(pool: &str, v: &Value, rated: &[(String, [Option<f64>; 4])], verbose: bool, printed: u64) {
    let ops = |x: Option<f64>| x.map(|f| format!("{f:.0}")).unwrap_or_else(|| "-".into());
    let bw = |x: Option<f64>| x.map(|f| human(f as u64)).unwrap_or_else(|| "-".into());
    if !verbose {
        if printed % 20 == 0 {
            println!("{:<12} {:>8} {:>8} {:>9} {:>9} {:>8} {:>8}", "pool", "put/s", "get/s", "write/s", "read/s", "dirty", "txg");
        }
        let x = &rated[0].1;
        println!("{:<12} {:>8} {:>8} {:>9} {:>9} {:>8} {:>8}", pool, ops(x[1]), ops(x[0]), bw(x[3]), bw(x[2]),
            human(v["dirty_bytes"].as_u64().unwrap_or(0)), v["published_txg"]);
        return;
    }
    let width = rated.iter().map(|(n, _)| n.len()).max().unwrap_or(10).max(24);
    println!("{:<width$}  {:>13}  {:>17}", "", "operations", "bandwidth");
    println!("{:<width$}  {:>6} {:>6}  {:>8} {:>8}", "pool / vdev", "read", "write", "read", "write");
    println!("{}  {} {}  {} {}", "-".repeat(width), "-".repeat(6), "-".repeat(6), "-".repeat(8), "-".repeat(8));
    for (name, x) in rated {
        println!("{name:<width$}  {:>6} {:>6}  {:>8} {:>8}", ops(x[0]), ops(x[1]), bw(x[2]), bw(x[3]));
    }
    println!("{}", "-".repeat(width + 36));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbose_rows_cover_store_log_legs_and_cache() {
        let v = json!({"name": "tank", "store": "file:///s",
            "store_requests": {"get": {"requests": 10, "bytes": 4096}, "put": {"requests": 3, "bytes": 100}},
            "log": {"device_writes": 7, "bytes_logged": 28672, "vdevs": [{"legs": [{"path": "/l0", "state": "ONLINE"}, {"path": "/l1", "state": "FAULTED"}]}]},
            "cache": {"devices": [{"path": "/c0", "bytes_read": 8192, "bytes_written": 1 << 20, "log_blocks_written": 1}]}});
        let names: Vec<String> = rows(&v, true).into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["tank", "  store file:///s", "  logs", "    /l0 ONLINE", "    /l1 FAULTED", "  cache", "    /c0"]);
        assert_eq!(rows(&v, false).len(), 1);
        let log = &rows(&v, true)[2];
        assert_eq!((log.write_ops, log.write_bytes, log.read_ops), (Some(7), Some(28672), None));
        assert_eq!(rate(Some(30), Some(10), 2.0), Some(10.0));
        assert_eq!(rate(None, Some(10), 2.0), None);
    }
}
