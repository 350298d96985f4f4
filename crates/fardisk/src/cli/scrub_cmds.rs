//! `fardisk scrub` and `fardisk history`, and the `scan:`/`errors:` lines of `status`.

use super::query::call;
use super::size::human;
use super::utc::date_text;
use crate::config::Config;
use crate::control::{Request, ScrubAction};
use anyhow::Result;
use serde_json::{json, Value};

#[derive(Debug, clap::Args)]
pub struct ScrubArgs {
    pub pool: String,
    /// Pause the running scrub (`fardisk scrub POOL` resumes it)
    #[arg(long, conflicts_with = "stop")]
    pub pause: bool,
    /// Cancel the running or paused scrub
    #[arg(long)]
    pub stop: bool,
    /// Wait until the scrub ends, showing progress; exit 3 if it found errors it could not repair
    #[arg(short = 'w', long)]
    pub wait: bool,
}

#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    pub pool: String,
    /// Show only the newest N events
    #[arg(short = 'n', long)]
    pub count: Option<u64>,
    #[arg(long)]
    pub json: bool,
}

pub async fn scrub(a: ScrubArgs, cfg: &Config) -> Result<i32> {
    let action = if a.pause {
        ScrubAction::Pause
    } else if a.stop {
        ScrubAction::Stop
    } else {
        ScrubAction::Start
    };
    let v = call(cfg, &a.pool, Request::Scrub { action }).await?;
    match action {
        ScrubAction::Pause => {
            println!("scrub of pool '{}' paused (resume it with: fardisk scrub {})", a.pool, a.pool)
        }
        ScrubAction::Stop => println!("scrub of pool '{}' canceled", a.pool),
        ScrubAction::Start => println!(
            "scrub of pool '{}' {}; 'fardisk status {}' shows its progress",
            a.pool,
            if v["examined_bytes"].as_u64().unwrap_or(0) > 0 { "resumed" } else { "started" },
            a.pool
        ),
    }
    if !a.wait || action != ScrubAction::Start {
        return Ok(0);
    }
    let last = wait_for_end(cfg, &a.pool).await?;
    println!("{}", scan_text(&last));
    let unrepaired = last["errors"]
        .as_array()
        .map(|e| e.iter().filter(|x| x["repaired"] != true).count())
        .unwrap_or(0) as u64;
    let counted = last["checksum_errors"].as_u64().unwrap_or(0)
        + last["missing_blocks"].as_u64().unwrap_or(0)
        + last["read_errors"].as_u64().unwrap_or(0);
    let repaired = last["repaired_blocks"].as_u64().unwrap_or(0);
    Ok(if last["state"] != "finished" || unrepaired > 0 || counted > repaired { 3 } else { 0 })
}

/// Polls the daemon until the scrub leaves scanning/paused; a progress bar on a terminal.
async fn wait_for_end(cfg: &Config, pool: &str) -> Result<Value> {
    let bar = crate::progress::bar(cfg.progress, "scrub", "bytes");
    loop {
        let st = call(cfg, pool, Request::Status).await?;
        let s = st["scrub"].clone();
        if let Some(bar) = &bar {
            bar.set_length(
                s["to_examine_bytes"]
                    .as_u64()
                    .unwrap_or(0)
                    .max(s["examined_bytes"].as_u64().unwrap_or(0)),
            );
            bar.set_position(s["examined_bytes"].as_u64().unwrap_or(0));
            bar.set_message(format!(
                "{} errors",
                s["checksum_errors"].as_u64().unwrap_or(0)
                    + s["missing_blocks"].as_u64().unwrap_or(0)
                    + s["read_errors"].as_u64().unwrap_or(0)
            ));
        }
        if !matches!(s["state"].as_str(), Some("scanning") | Some("paused")) {
            if let Some(bar) = bar {
                bar.finish_and_clear();
            }
            return Ok(s);
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

fn duration_text(ms: u64) -> String {
    let s = ms / 1000;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// The `scan:` line of `zpool status`, for the current or last scrub.
pub fn scan_text(s: &Value) -> String {
    let u = |k: &str| s[k].as_u64().unwrap_or(0);
    let errors = u("checksum_errors") + u("missing_blocks") + u("read_errors");
    let total = u("to_examine_bytes").max(u("examined_bytes"));
    let pct = if total == 0 { 100.0 } else { 100.0 * u("examined_bytes") as f64 / total as f64 };
    match s["state"].as_str().unwrap_or("none") {
        "none" => "none requested".to_string(),
        "scanning" | "paused" => format!(
            "scrub {} since {}\n\t{} of {} examined ({pct:.1}%), {} blocks, {errors} errors, {} repaired{}",
            if s["state"] == "paused" { "paused" } else { "in progress" }, date_text(u("started_ms")),
            human(u("examined_bytes")), human(total), u("examined_blocks"), human(u("repaired_bytes")),
            if u("rate_bytes_per_s_max") > 0 { format!(", limited to {}/s", human(u("rate_bytes_per_s_max"))) } else { String::new() }),
        "finished" => format!("scrub repaired {} in {} with {errors} errors on {} ({} examined, {} blocks)",
            human(u("repaired_bytes")), duration_text(u("finished_ms").saturating_sub(u("started_ms"))), date_text(u("finished_ms")),
            human(u("examined_bytes")), u("examined_blocks")),
        "canceled" => format!("scrub canceled on {} after {} examined, {errors} errors", date_text(u("finished_ms")), human(u("examined_bytes"))),
        other => format!("scrub {other} on {}: {}", date_text(u("finished_ms")), s["failure"].as_str().unwrap_or("unknown reason")),
    }
}

/// The `errors:` block of `zpool status`: what scrub found, one line per listed block.
pub fn errors_text(s: &Value) -> String {
    let list = s["errors"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        return "No known data errors".to_string();
    }
    let mut out = format!(
        "{} blocks with errors found by the last scrub:",
        s["checksum_errors"].as_u64().unwrap_or(0)
            + s["missing_blocks"].as_u64().unwrap_or(0)
            + s["read_errors"].as_u64().unwrap_or(0)
    );
    for e in list {
        out.push_str(&format!(
            "\n\t{}: {} (segment {}, {}){}",
            e["dataset"].as_str().unwrap_or("?"),
            e["object"].as_str().unwrap_or("?"),
            e["segment"].as_str().unwrap_or("?"),
            e["kind"].as_str().unwrap_or("?"),
            if e["repaired"] == true { " repaired" } else { "" }
        ));
    }
    out
}

pub async fn history(a: HistoryArgs, cfg: &Config) -> Result<()> {
    let limit = a.count.unwrap_or(fardisk_engine::pool::HISTORY_KEPT as u64);
    let v = if crate::control::is_alive(&cfg.paths.control_socket(&a.pool)).await {
        call(cfg, &a.pool, Request::History { limit }).await?
    } else {
        // Exported: the history is in the store; read it without importing.
        let store = super::query::exported_store(cfg, &a.pool)?;
        let events = fardisk_engine::pool::read_history(store.as_ref(), limit as usize)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        serde_json::to_value(events)?
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&json!({"pool": a.pool, "events": v}))?);
        return Ok(());
    }
    println!("History for '{}':", a.pool);
    for e in v.as_array().into_iter().flatten() {
        println!(
            "{} {} [txg {} on {}]",
            date_text(e["time_ms"].as_u64().unwrap_or(0)),
            e["event"].as_str().unwrap_or(""),
            e["txg"].as_u64().unwrap_or(0),
            e["host"].as_str().unwrap_or("?")
        );
    }
    Ok(())
}

/// What is still running in the background of an imported pool: (name, done, total, unit).
fn background_work(st: &Value) -> Vec<(String, u64, u64, &'static str)> {
    let mut out = Vec::new();
    let s = &st["scrub"];
    if matches!(s["state"].as_str(), Some("scanning") | Some("paused")) {
        let done = s["examined_bytes"].as_u64().unwrap_or(0);
        out.push((
            "scrub".to_string(),
            done,
            s["to_examine_bytes"].as_u64().unwrap_or(0).max(done),
            "bytes",
        ));
    }
    for d in st["cache"]["devices"].as_array().into_iter().flatten() {
        let r = &d["rebuild"];
        if r["done"] == false && d["state"] != "faulted" {
            out.push((
                "l2rebuild".to_string(),
                r["slots_scanned"].as_u64().unwrap_or(0),
                r["slots_total"].as_u64().unwrap_or(0),
                "slots",
            ));
        }
    }
    let w = &st["warmup"];
    let total = w["regions_total"].as_u64().unwrap_or(0);
    let done = w["regions_done"].as_u64().unwrap_or(0) + w["regions_skipped"].as_u64().unwrap_or(0);
    if done < total {
        out.push(("warmup".to_string(), done, total, "regions"));
    }
    out
}

/// `fardisk wait POOL`: returns once scrub, L2ARC rebuild and warm-up have all ended (a paused
/// scrub counts as running, as `zpool wait` does).
pub async fn wait(pool: &str, cfg: &Config) -> Result<()> {
    let mut bars: std::collections::HashMap<String, indicatif::ProgressBar> = Default::default();
    let multi = indicatif::MultiProgress::new();
    // Bounded by the work itself: every activity it waits for ends (or the daemon goes away and
    // `call` fails).
    loop {
        let st = call(cfg, pool, Request::Status).await?;
        let work = background_work(&st);
        if work.is_empty() {
            for b in bars.values() {
                b.finish_and_clear();
            }
            println!("pool '{pool}': no background work running");
            return Ok(());
        }
        for (name, done, total, unit) in work {
            if !bars.contains_key(&name) {
                match crate::progress::bar(cfg.progress, &name, unit) {
                    Some(b) => bars.insert(name.clone(), multi.add(b)),
                    None => continue,
                };
            }
            if let Some(b) = bars.get(&name) {
                b.set_length(total);
                b.set_position(done);
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_line_of_a_finished_scrub() {
        let s = json!({"state": "finished", "started_ms": 0, "finished_ms": 75_000, "examined_bytes": 1u64 << 30,
            "examined_blocks": 262144, "to_examine_bytes": 1u64 << 30, "checksum_errors": 1, "repaired_bytes": 4096});
        assert_eq!(scan_text(&s), "scrub repaired 4.0K in 00:01:15 with 1 errors on 1970-01-01 00:01:15 UTC (1.0G examined, 262144 blocks)");
    }
}
