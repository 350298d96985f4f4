//! Read-only views: status, list, iostat, get; and set. An imported pool answers through its
//! daemon; an exported one from its newest root in the store.

macro_rules! outln {
    ($o:expr) => {
        $o.push('\n')
    };
    ($o:expr, $($a:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($o, $($a)*);
    }};
}

use super::size::human;
use crate::config::Config;
use crate::control::{self, Request};
use crate::store::open_store;
use anyhow::{bail, Context, Result};
use fardisk_engine::{Env, Pool};
use serde_json::{json, Value};

/// Why a command found no engine for `pool`: it names the run directory it looked in, since an
/// import made with another `FARDISK_RUN_DIR` (or `run_dir` in another config file) is not
/// found from here.
pub(crate) fn not_imported(pool: &str, socket: &std::path::Path) -> String {
    let dir = socket.parent().unwrap_or(socket).display();
    format!(
        "pool '{pool}' is not imported on this host: no engine answers in the run directory {dir} \
         (FARDISK_RUN_DIR or run_dir in the config file; the import may have used another)"
    )
}

/// Sends `request` to the daemon of `pool` on this host.
pub async fn call(cfg: &Config, pool: &str, request: Request) -> Result<Value> {
    let socket = cfg.paths.control_socket(pool);
    if !socket.exists() {
        bail!("{}; to import it: fardisk import {pool} STORE_URL", not_imported(pool, &socket));
    }
    control::call(&socket, request).await
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    pub pool: Option<String>,
    #[arg(short = 'v')]
    pub verbose: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct IostatArgs {
    pub pool: String,
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Seconds between reports
    pub interval: Option<u64>,
    /// Number of reports (default: 1 without an interval, unbounded with one)
    pub count: Option<u64>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// A property name or `all`
    pub property: String,
    /// POOL or POOL/VOLUME
    pub target: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct SetArgs {
    /// PROP=VALUE
    pub assignment: String,
    /// POOL or POOL/VOLUME
    pub target: String,
}

/// Status of one pool: from the daemon when imported, else from the store.
/// The store of a pool this host knows (created or imported here), as it was last opened.
pub(crate) fn exported_store(
    cfg: &Config,
    pool: &str,
) -> Result<std::sync::Arc<dyn fardisk_engine::objstore::Store>> {
    let rec = cfg
        .paths
        .load_record(pool)
        .with_context(|| format!("no pool named '{pool}' is known on this host"))?;
    let simulate = rec
        .simulate
        .as_deref()
        .map(fardisk_engine::objstore::SimulateSpec::parse)
        .transpose()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let key = crate::keys::resolve(cfg, None, rec.key_file.as_deref())?.map(|k| k.key);
    open_store(cfg, &rec.store_url, &simulate, &Env::system(), false, key.as_ref())
}

async fn pool_status(cfg: &Config, pool: &str) -> Result<Value> {
    if control::is_alive(&cfg.paths.control_socket(pool)).await {
        return call(cfg, pool, Request::Status).await;
    }
    // A holder whose engine is restarting (or that gave up) says so; the store would only
    // show the pool as imported.
    let holder_state = crate::holder::state::read(&crate::holder::state::path(&cfg.paths, pool));
    if let Some(s) = holder_state {
        // A holder that gave up left its reason behind; one that runs is restarting its engine.
        if s.stopped.is_some() || crate::holder::is_held(&cfg.paths, pool) {
            let state = if s.stopped.is_some() { "Faulted" } else { "Restarting" };
            return Ok(json!({
                "name": pool,
                "health": {"state": state, "reason": s.line(pool)},
                "engine_holder": {"pid": s.holder_pid, "generation": s.generation, "restarts": s.restarts, "upgrades": s.upgrades, "stopped": s.stopped, "last_exit": s.last_exit, "no_engine_since_ms": s.no_engine_since_ms, "reimport_wait_s": s.reimport_wait_s},
            }));
        }
    }
    let rec = cfg
        .paths
        .load_record(pool)
        .with_context(|| format!("no pool named '{pool}' is known on this host"))?;
    let env = Env::system();
    let store = exported_store(cfg, pool)?;
    let root = Pool::peek(store, &env).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(json!({
        "name": root.pool_name, "guid": format!("{:032x}", root.pool_guid),
        "health": {"state": if root.holder.active { "ImportedElsewhere" } else { "Exported" }},
        "store": rec.store_url, "published_txg": root.txg, "published_time_ms": root.time_ms,
        "space": root.totals, "garbage_bytes": root.totals.garbage_bytes(), "compress_ratio": root.totals.compress_ratio(),
        "volumes": root.volumes.iter().map(|v| json!({"name": v.name, "id": v.id, "size_bytes": v.size_bytes, "allocated_bytes": v.allocated_blocks * 4096})).collect::<Vec<_>>(),
        "holder": {"hostname": root.holder.hostname, "pid": root.holder.pid, "since_ms": root.holder.since_ms, "active": root.holder.active},
    }))
}

fn health_text(v: &Value) -> String {
    let state = v["health"]["state"].as_str().unwrap_or("UNKNOWN").to_ascii_uppercase();
    match v["health"]["reason"].as_str() {
        Some(r) => format!("{state} ({r})"),
        None => state,
    }
}

fn age_text(time_ms: u64, now_ms: u64) -> String {
    format!("{:.1}s ago", now_ms.saturating_sub(time_ms) as f64 / 1000.0)
}

/// A leg whose write cycle has gone unanswered for a while: commits wait for it until the
/// cycle gives up on it (`log_leg_timeout_ms`, when a mirror's other leg answered), so this
/// names why sync writes stall; and a leg that was given up on, which is out of service.
fn stalled_text(leg: &Value) -> String {
    let timeouts = leg["timeouts"].as_u64().unwrap_or(0);
    let waiting_s = leg["io_waiting_ms"].as_u64().map(|ms| ms as f64 / 1000.0);
    if leg["state"] == "FAULTED" && timeouts > 0 {
        let out = waiting_s
            .map(|s| format!(", its last write unanswered for {s:.1} s"))
            .unwrap_or_default();
        let times = if timeouts == 1 { "once".to_string() } else { format!("{timeouts} times") };
        return format!(
            "  (stopped answering {times}{out}: out of service, sync writes go on without it; 'fardisk replace' it)"
        );
    }
    match waiting_s {
        Some(s) if leg["io_stalled"] == true => {
            format!("  (a log write unanswered for {s:.1} s: sync writes wait for this device)")
        }
        _ => String::new(),
    }
}

/// The vdev tree in the shape of `zpool status`, then the volumes.
fn render_config(out: &mut String, v: &Value) {
    let st = |x: &Value| x.as_str().unwrap_or("?").to_string();
    outln!(out, "config:\n");
    outln!(out, "\t{:<44} {:<9} {:>5} {:>5} {:>5}", "NAME", "STATE", "READ", "WRITE", "CKSUM");
    outln!(
        out,
        "\t{:<44} {:<9}",
        v["name"].as_str().unwrap_or("?"),
        health_text(v).split(' ').next().unwrap_or("")
    );
    outln!(
        out,
        "\t  {:<42} {:<9} {:>5} {:>5} {:>5}",
        format!("store {}", v["store"].as_str().unwrap_or("?")),
        if v["health"]["state"] == "Suspended" { "SUSPENDED" } else { "ONLINE" },
        v["store_requests"]["get"]["errors"].as_u64().unwrap_or(0),
        v["store_requests"]["put"]["errors"].as_u64().unwrap_or(0),
        v["checksum_errors"].as_u64().unwrap_or(0)
    );
    if let Some(vdevs) = v["log"]["vdevs"].as_array() {
        outln!(out, "\tlogs");
        for (i, d) in vdevs.iter().enumerate() {
            let legs = d["legs"].as_array().cloned().unwrap_or_default();
            let indent = if d["kind"] == "mirror" {
                outln!(out, "\t  {:<42} {:<9}", format!("mirror-{i}"), st(&d["state"]));
                "    "
            } else {
                "  "
            };
            for l in legs {
                outln!(
                    out,
                    "\t{indent}{:<width$} {:<9} {:>5} {:>5} {:>5}{}{}",
                    st(&l["path"]),
                    st(&l["state"]),
                    l["read_errors"].as_u64().unwrap_or(0),
                    l["write_errors"].as_u64().unwrap_or(0),
                    l["checksum_errors"].as_u64().unwrap_or(0),
                    if l["volatile"] == true { "  (volatile)" } else { "" },
                    stalled_text(&l),
                    width = 44 - indent.len()
                );
            }
        }
    }
    if let Some(devs) = v["cache"]["devices"].as_array() {
        outln!(out, "\tcache");
        for d in devs {
            let state = d["state"]
                .as_str()
                .map(|s| s.to_ascii_uppercase())
                .unwrap_or_else(|| format!("{}", d["state"]).to_ascii_uppercase());
            outln!(
                out,
                "\t  {:<42} {:<9} {:>5} {:>5} {:>5}",
                st(&d["path"]),
                state.trim_matches('"'),
                d["io_errors"].as_u64().unwrap_or(0),
                "-",
                d["checksum_errors"].as_u64().unwrap_or(0)
            );
        }
    }
    let volumes = v["volumes"].as_array().cloned().unwrap_or_default();
    // The DEVICE column only for pools imported with --block-devices.
    let devices = v["block_devices"] == true;
    let header = format!("\n\t{:<24} {:>8} {:>8}", "VOLUME", "SIZE", "ALLOC");
    outln!(out, "{header}{}", if devices { "  DEVICE" } else { "" });
    for vol in &volumes {
        let row = format!(
            "\t{:<24} {:>8} {:>8}",
            vol["name"].as_str().unwrap_or("?"),
            human(vol["size_bytes"].as_u64().unwrap_or(0)),
            human(vol["allocated_bytes"].as_u64().unwrap_or(0))
        );
        match devices {
            true => outln!(out, "{row}  {}", block_device_text(&vol["block_device"])),
            false => outln!(out, "{row}"),
        }
    }
    if v["log"]["volatile"] == true {
        outln!(out, "\nwarning: a log device is volatile (tmpfs or RAM disk): a power cut loses acknowledged writes.");
    }
    if v["log"].is_object() && v["log"]["healthy"] == false {
        outln!(out, "\nwarning: no healthy log device: sync requests wait for txgs to reach the store (slow, still durable).");
    }
}

/// A volume's block device: `/dev/fardisk/POOL/VOL -> /dev/loopN`, and what is wrong with it.
fn block_device_text(d: &Value) -> String {
    let (Some(path), Some(device)) = (d["path"].as_str(), d["device"].as_str()) else {
        return "none (see the daemon's log)".into();
    };
    let note = match (d["bound"].as_bool(), d["direct_io"].as_bool()) {
        (Some(false), _) => " (NOT BOUND)",
        (_, Some(false)) => " (direct I/O off)",
        _ => "",
    };
    format!("{path} -> {device}{note}")
}

/// The `held:` line of a fenced pool: what it acknowledged and never published, and where.
fn held_text(h: &Value) -> String {
    if h["writing"].as_bool() == Some(true) {
        return "being counted and written to a held records file (the log keeps them meanwhile)"
            .into();
    }
    let n = h["records"].as_u64().unwrap_or(0);
    if n == 0 {
        return match h["error"].as_str() {
            Some(e) => format!("unknown ({e}); the log keeps whatever it held"),
            None => "nothing: every acknowledged write was in a published txg".into(),
        };
    }
    let what = format!(
        "{n} log records ({}, txgs {}..{}) acknowledged here and not in the store",
        human(h["data_bytes"].as_u64().unwrap_or(0)),
        h["txg_first"].as_u64().unwrap_or(0),
        h["txg_last"].as_u64().unwrap_or(0)
    );
    match (h["path"].as_str(), h["error"].as_str()) {
        (Some(p), _) => format!("{what}; in {p} (fardisk held show {p})"),
        (None, Some(e)) => format!("{what}; only in the log ({e})"),
        (None, None) => format!("{what}; only in the log"),
    }
}

pub(crate) fn render_status(out: &mut String, v: &Value, verbose: bool, now_ms: u64) {
    let u = |k: &str| v[k].as_u64().unwrap_or(0);
    outln!(out, "  pool: {}", v["name"].as_str().unwrap_or("?"));
    outln!(out, " state: {}", health_text(v));
    if v.get("store").is_none() && v.get("engine_holder").is_some() {
        // Only the holder answered (its engine is restarting, or it stopped).
        return;
    }
    outln!(out, " store: {}", v["store"].as_str().unwrap_or("?"));
    match v["read_only_txg"].as_u64() {
        Some(t) => outln!(
            out,
            "   txg: {t} published {}; imported READ-ONLY at this txg (nothing is written)",
            age_text(u("published_time_ms"), now_ms)
        ),
        None => outln!(
            out,
            "   txg: {} published {} (recovery point without the log)",
            u("published_txg"),
            age_text(u("published_time_ms"), now_ms)
        ),
    }
    if v.get("open_txg").is_some() {
        outln!(
            out,
            " dirty: {} of {} max, open txg {}{}",
            human(u("dirty_bytes")),
            human(u("dirty_bytes_max")),
            u("open_txg"),
            if v["syncing"].as_bool() == Some(true) { ", a txg is uploading" } else { "" }
        );
    }
    let sp = &v["space"];
    let g = |k: &str| sp[k].as_u64().unwrap_or(0);
    outln!(
        out,
        " space: {} logical, {} stored ({} live, {} garbage), compressratio {:.2}x",
        human(g("logical_bytes")),
        human(g("physical_bytes")),
        human(g("live_bytes")),
        human(u("garbage_bytes")),
        v["compress_ratio"].as_f64().unwrap_or(1.0)
    );
    let f = &v["freeing"];
    let (trees, subtrees) = (
        f["trees_being_destroyed"].as_u64().unwrap_or(0),
        f["queued_subtrees"].as_u64().unwrap_or(0),
    );
    if trees + subtrees > 0 {
        outln!(
            out,
            " freeing: {trees} destroyed snapshot(s) being walked (the first {:.0} % through its volume), {subtrees} map subtree(s) queued; space comes back over the next txgs",
            f["destroy_done_percent"].as_f64().unwrap_or(0.0)
        );
    }
    if let Some(m) = v["mount"].as_str() {
        match v["fuse"]["transport"].as_str() {
            Some(t) => match v["fuse"]["uring_buffer_bytes"].as_u64().filter(|b| *b > 0) {
                Some(bytes) => outln!(
                    out,
                    " mount: {m} (FUSE over {t}, {} queue(s), {} of ring buffers)",
                    v["fuse"]["uring_queues"].as_u64().unwrap_or(0),
                    human(bytes)
                ),
                None => outln!(out, " mount: {m} (FUSE over {t})"),
            },
            None => outln!(out, " mount: {m}"),
        }
    }
    if let Some(h) = v.get("engine_holder").filter(|h| h.is_object()) {
        outln!(out, "holder: {}", holder_text(h));
    }
    if let Some(h) = v.get("held").filter(|h| h.is_object()) {
        outln!(out, "  held: {}", held_text(h));
    }
    let w = &v["warmup"];
    if w["regions_total"].as_u64().unwrap_or(0) > 0 {
        let (total, done, skipped) = (
            w["regions_total"].as_u64().unwrap_or(0),
            w["regions_done"].as_u64().unwrap_or(0),
            w["regions_skipped"].as_u64().unwrap_or(0),
        );
        let state = if done + skipped >= total { "finished" } else { "in progress" };
        outln!(out, "warmup: {state}, {done} of {total} hot regions read back into the cache ({skipped} skipped)");
    }
    if let Some(scrub) = v.get("scrub") {
        outln!(out, "  scan: {}", super::scrub_cmds::scan_text(scrub));
    }
    render_config(out, v);
    if let Some(scrub) = v.get("scrub") {
        outln!(out, "\nerrors: {}", super::scrub_cmds::errors_text(scrub));
    }
    if verbose && v["log"].is_object() {
        let l = &v["log"];
        outln!(out, "\nintent log: {} sync requests, {} device writes (group commit {:.1}x; {} written ahead, {} commits that only flushed), {} logged, {} txg fallbacks, {} of {} in use",
            l["sync_requests"], l["device_writes"], l["group_commit_ratio"].as_f64().unwrap_or(0.0),
            l["blocks_written_ahead"].as_u64().unwrap_or(0), l["flushes_without_write"].as_u64().unwrap_or(0), human(l["bytes_logged"].as_u64().unwrap_or(0)),
            l["txg_fallbacks"], human(l["space_used_bytes"].as_u64().unwrap_or(0)), human(l["space_total_bytes"].as_u64().unwrap_or(0)));
    }
    if verbose && v.get("store_requests").is_some() {
        let r = &v["store_requests"];
        outln!(
            out,
            "\nstore requests: {} PUT ({}), {} GET ({}), {} DELETE, {} errors",
            r["put"]["requests"],
            human(r["put"]["bytes"].as_u64().unwrap_or(0)),
            r["get"]["requests"],
            human(r["get"]["bytes"].as_u64().unwrap_or(0)),
            r["delete"]["requests"],
            r["put"]["errors"].as_u64().unwrap_or(0) + r["get"]["errors"].as_u64().unwrap_or(0)
        );
        outln!(out, "txgs synced: {} (avg {:.1} ms), segments {}, checksum errors {}, throttle delays {}, stalls {}",
            u("txgs_synced"), v["txg_sync_ms_avg"].as_f64().unwrap_or(0.0), u("segments_uploaded"), u("checksum_errors"), u("throttle_delays"), u("throttle_stalls"));
    }
}

pub async fn status(a: StatusArgs, cfg: &Config) -> Result<()> {
    let pools: Vec<String> = match a.pool {
        Some(p) => vec![p],
        None => cfg.paths.all_records().into_iter().map(|r| r.name).collect(),
    };
    if pools.is_empty() && !a.json {
        println!("no pools available");
        return Ok(());
    }
    let mut all = Vec::new();
    for p in &pools {
        all.push(pool_status(cfg, p).await?);
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&json!({"pools": all}))?);
    } else {
        for (i, v) in all.iter().enumerate() {
            if i > 0 {
                println!();
            }
            let mut out = String::new();
            render_status(&mut out, v, a.verbose, Env::system().clock.wall_ms());
            print!("{out}");
        }
    }
    Ok(())
}

pub async fn list(a: ListArgs, cfg: &Config) -> Result<()> {
    let mut rows = Vec::new();
    for r in cfg.paths.all_records() {
        let v = pool_status(cfg, &r.name).await.unwrap_or_else(
            |e| json!({"name": r.name, "health": {"state": "UNAVAIL", "reason": e.to_string()}}),
        );
        rows.push(v);
    }
    if a.json {
        let slim: Vec<Value> = rows.iter().map(|v| json!({"name": v["name"], "health": v["health"], "logical_bytes": v["space"]["logical_bytes"],
            "physical_bytes": v["space"]["physical_bytes"], "compress_ratio": v["compress_ratio"], "published_txg": v["published_txg"]})).collect();
        println!("{}", serde_json::to_string_pretty(&json!({"pools": slim}))?);
        return Ok(());
    }
    println!("{:<16} {:>8} {:>8} {:>7} {:>8}  HEALTH", "NAME", "LOGICAL", "STORED", "RATIO", "TXG");
    for v in rows {
        println!(
            "{:<16} {:>8} {:>8} {:>6.2}x {:>8}  {}",
            v["name"].as_str().unwrap_or("?"),
            human(v["space"]["logical_bytes"].as_u64().unwrap_or(0)),
            human(v["space"]["physical_bytes"].as_u64().unwrap_or(0)),
            v["compress_ratio"].as_f64().unwrap_or(1.0),
            v["published_txg"].as_u64().unwrap_or(0),
            health_text(&v)
        );
    }
    Ok(())
}

pub async fn get(a: GetArgs, cfg: &Config) -> Result<()> {
    let pool = a.target.split('/').next().unwrap_or(&a.target);
    let rows = call(cfg, pool, Request::Get).await?;
    let rows: Vec<&Value> = rows
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| a.property == "all" || r["property"] == a.property)
        .collect();
    if rows.is_empty() {
        bail!("unknown property '{}'; 'fardisk get all {pool}' lists them", a.property);
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"target": a.target, "properties": rows}))?
        );
        return Ok(());
    }
    // Columns as wide as their longest entry, as `zfs get` prints them.
    let field = |r: &Value, k: &str| r[k].as_str().unwrap_or("").to_string();
    let width =
        |k: &str, head: &str| rows.iter().map(|r| field(r, k).len()).fold(head.len(), usize::max);
    let (wn, wp, wv) =
        (a.target.len().max(4), width("property", "PROPERTY"), width("value", "VALUE"));
    println!("{:<wn$}  {:<wp$}  {:<wv$}  SOURCE", "NAME", "PROPERTY", "VALUE");
    for r in &rows {
        println!(
            "{:<wn$}  {:<wp$}  {:<wv$}  {}",
            a.target,
            field(r, "property"),
            field(r, "value"),
            field(r, "source")
        );
    }
    Ok(())
}

/// `set PROP=VALUE`, checked here against the property table first (one line, nothing sent),
/// then by the daemon, which stores a size in bytes.
pub async fn set(a: SetArgs, cfg: &Config) -> Result<()> {
    let Some((k, v)) = a.assignment.split_once('=') else {
        bail!("'{}': expected PROP=VALUE, e.g. compression=zstd", a.assignment)
    };
    fardisk_engine::props::validate_prop(k, v).map_err(|e| anyhow::anyhow!("{e}"))?;
    let pool = a.target.split('/').next().unwrap_or(&a.target);
    call(cfg, pool, Request::Set { property: k.to_string(), value: v.to_string() }).await?;
    Ok(())
}

pub async fn arcstat(pool: &str, as_json: bool, cfg: &Config) -> Result<()> {
    let v = call(cfg, pool, Request::Arcstat).await?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    print!("{}", render_arcstat(&v));
    Ok(())
}

/// The arcstat table (names as in /proc/spl/kstat/zfs/arcstats where they exist).
pub(crate) fn render_arcstat(v: &Value) -> String {
    let mut out = String::new();
    let out = &mut out;
    let a = &v["arc"];
    let u = |x: &Value, k: &str| x[k].as_u64().unwrap_or(0);
    let ratio = |h: u64, m: u64| if h + m == 0 { 0.0 } else { 100.0 * h as f64 / (h + m) as f64 };
    outln!(out, "{:<22} {:>14}", "name", "value");
    for (k, val) in [
        ("hits", u(a, "hits").to_string()),
        ("misses", u(a, "misses").to_string()),
        ("hit_ratio_pct", format!("{:.1}", ratio(u(a, "hits"), u(a, "misses")))),
        ("demand_hits", u(a, "demand_hits").to_string()),
        ("prefetch_hits", u(a, "prefetch_hits").to_string()),
        ("mru_ghost_hits", u(a, "mru_ghost_hits").to_string()),
        ("mfu_ghost_hits", u(a, "mfu_ghost_hits").to_string()),
        ("size", human(u(a, "size_bytes"))),
        ("c", human(u(a, "c_bytes"))),
        ("c_max", human(u(a, "c_max_bytes"))),
        ("p", human(u(a, "p_bytes"))),
        ("mru_size", human(u(a, "mru_bytes"))),
        ("mfu_size", human(u(a, "mfu_bytes"))),
    ] {
        outln!(out, "{k:<22} {val:>14}");
    }
    let l = &v["l2arc"];
    if l.is_object() {
        for (k, val) in [
            ("l2_hits", u(l, "hits").to_string()),
            ("l2_misses", u(l, "misses").to_string()),
            ("l2_size", human(u(l, "size_bytes"))),
            ("l2_write_bytes", human(u(l, "bytes_written"))),
            ("l2_cksum_bad", u(l, "checksum_errors").to_string()),
            ("l2_io_error", u(l, "io_errors").to_string()),
        ] {
            outln!(out, "{k:<22} {val:>14}");
        }
    }
    std::mem::take(out)
}

/// The `holder:` line of `status`: restarts, upgrades, the budget and the last exit.
fn holder_text(h: &Value) -> String {
    let n = |k: &str| h[k].as_u64().unwrap_or(0);
    let last = h["recent_exits"]
        .as_array()
        .and_then(|a| a.last())
        .map(|e| format!("; last: engine pid {} {}", e["pid"], e["reason"].as_str().unwrap_or("?")))
        .unwrap_or_default();
    format!(
        "pid {}, engine generation {}, {} restarts ({} in the last {} s, at most {}), {} upgrades, FUSE over /dev/fuse{last}",
        n("pid"),
        n("generation"),
        n("restarts"),
        n("restarts_in_window"),
        n("restart_window_s"),
        n("restarts_max"),
        n("upgrades")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::snapshot::{arcstat_fixture, assert_snapshot, status_fixture};

    /// 2.5 s after the fixture's txg was published.
    fn now_ms(v: &Value) -> u64 {
        v["published_time_ms"].as_u64().unwrap() + 2_500
    }

    #[test]
    fn a_leg_whose_write_is_unanswered_is_named_on_its_line() {
        let mut v = status_fixture();
        let legs = &mut v["log"]["vdevs"][0]["legs"];
        legs[1]["io_waiting_ms"] = serde_json::json!(12_345);
        legs[1]["io_stalled"] = serde_json::json!(true);
        legs[0]["io_waiting_ms"] = serde_json::json!(300);
        legs[0]["io_stalled"] = serde_json::json!(false);
        let mut out = String::new();
        render_status(&mut out, &v, false, now_ms(&v));
        let line = |path: &str| out.lines().find(|l| l.contains(path)).unwrap().to_string();
        assert!(
            line("/tmp/fdm/log1")
                .ends_with("(a log write unanswered for 12.3 s: sync writes wait for this device)"),
            "{out}"
        );
        assert!(!line("/tmp/fdm/log0").contains("unanswered"), "a cycle under way is not news");
        // Given up on at its deadline: out of service, and commits no longer wait for it.
        let legs = &mut v["log"]["vdevs"][0]["legs"];
        legs[1]["state"] = serde_json::json!("FAULTED");
        legs[1]["timeouts"] = serde_json::json!(1);
        let mut out = String::new();
        render_status(&mut out, &v, false, now_ms(&v));
        let line = out.lines().find(|l| l.contains("/tmp/fdm/log1")).unwrap();
        assert!(
            line.ends_with(
                "FAULTED       0     0     0  (stopped answering once, its last write unanswered \
                 for 12.3 s: out of service, sync writes go on without it; 'fardisk replace' it)"
            ),
            "{out}"
        );
    }

    #[test]
    fn snapshot_status() {
        let v = status_fixture();
        let mut out = String::new();
        render_status(&mut out, &v, false, now_ms(&v));
        assert_snapshot("status.txt", &out);
    }

    #[test]
    fn snapshot_status_verbose() {
        let v = status_fixture();
        let mut out = String::new();
        render_status(&mut out, &v, true, now_ms(&v));
        assert_snapshot("status-v.txt", &out);
    }

    #[test]
    fn space_still_being_freed_gets_a_line() {
        let mut v = status_fixture();
        let mut quiet = String::new();
        render_status(&mut quiet, &v, false, now_ms(&v));
        assert!(!quiet.contains("freeing:"), "nothing to free, no line: {quiet}");
        v["freeing"] = serde_json::json!({"queued_subtrees": 3, "trees_being_destroyed": 2, "destroy_done_percent": 41.6});
        let mut out = String::new();
        render_status(&mut out, &v, false, now_ms(&v));
        assert!(
            out.contains(" freeing: 2 destroyed snapshot(s) being walked (the first 42 % through its volume), 3 map subtree(s) queued; space comes back over the next txgs\n"),
            "{out}"
        );
    }

    #[test]
    fn held_records_being_written_get_their_own_words() {
        let mut v = status_fixture();
        v["held"] = serde_json::json!({"path": null, "records": 0, "data_bytes": 0,
            "txg_first": 0, "txg_last": 0, "error": null, "writing": true});
        let mut out = String::new();
        render_status(&mut out, &v, false, now_ms(&v));
        assert!(out.contains("  held: being counted and written to a held records file"), "{out}");
    }

    #[test]
    fn block_devices_get_a_device_column() {
        let mut v = status_fixture();
        v["block_devices"] = serde_json::json!(true);
        let volumes = v["volumes"].as_array_mut().expect("the fixture has volumes");
        volumes[0]["block_device"] = serde_json::json!({"path": "/dev/fardisk/tank/pg", "device": "/dev/loop3", "direct_io": true, "bound": true});
        if volumes.len() > 1 {
            volumes[1]["block_device"] = serde_json::json!({"path": "/dev/fardisk/tank/b", "device": "/dev/loop4", "direct_io": false, "bound": true});
        }
        let mut out = String::new();
        render_status(&mut out, &v, false, now_ms(&v));
        assert!(out.contains("ALLOC  DEVICE\n"), "{out}");
        assert!(out.contains("  /dev/fardisk/tank/pg -> /dev/loop3\n"), "{out}");
        assert_eq!(
            block_device_text(
                &serde_json::json!({"path": "/dev/fardisk/t/v", "device": "/dev/loop1", "direct_io": false, "bound": true})
            ),
            "/dev/fardisk/t/v -> /dev/loop1 (direct I/O off)"
        );
        assert_eq!(
            block_device_text(
                &serde_json::json!({"path": "/dev/fardisk/t/v", "device": "/dev/loop1", "direct_io": null, "bound": false})
            ),
            "/dev/fardisk/t/v -> /dev/loop1 (NOT BOUND)"
        );
        assert_eq!(block_device_text(&Value::Null), "none (see the daemon's log)");
        // Without the option the table is as before (the snapshot tests hold the rest).
        let mut plain = String::new();
        render_status(&mut plain, &status_fixture(), false, now_ms(&v));
        assert!(!plain.contains("DEVICE"), "{plain}");
    }

    #[test]
    fn snapshot_arcstat() {
        assert_snapshot("arcstat.txt", &render_arcstat(&arcstat_fixture()));
    }
}
