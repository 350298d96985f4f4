//! l2arc-memory: what the L2ARC index costs in RAM per byte of cache device (issue #21, goal
//! ≤ 1 GiB per TiB), measured on the real L2ARC: devices formatted on sparse files, filled with
//! 4 KiB blocks through the writer, the index's own accounting (`index_bytes`) and the process's
//! anonymous resident memory (`RssAnon`) before and after.
//!
//! * several small devices filled past capacity (the ring wraps): bytes of index per cached
//!   block and per 4 KiB of device, which must not depend on the size;
//! * one large sparse device (e.g. 256 GiB) with part of it written: the index is allocated for
//!   the whole device when it is opened, so its size is the bound at any fill, and the pages the
//!   fill touched show up in RSS.

use crate::stats::round3;
use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use fardisk_arc::{BlockKey, EvictionFeed, FeedItem, L2Arc, L2ArcConfig, ManualClock};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const TIB: f64 = (1u64 << 40) as f64;
/// Blocks pushed per writer round (bounds the feed's memory).
const BATCH_BLOCKS: u64 = 2048;

#[derive(Debug, Clone)]
pub struct Args {
    pub dir: PathBuf,
    /// Sizes of the devices filled past capacity, MiB.
    pub full_mib: Vec<u64>,
    /// Size of the large sparse device, GiB, and how much of it to write, MiB.
    pub large_gib: u64,
    pub large_fill_mib: u64,
    pub seed: u64,
}

/// The process's anonymous resident memory, bytes (`RssAnon` in /proc/self/status).
fn rss_anon_bytes() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with("RssAnon:"))
        .ok_or_else(|| anyhow!("no RssAnon in /proc/self/status"))?;
    let kib: u64 = line.split_whitespace().nth(1).unwrap_or("0").parse()?;
    Ok(kib * 1024)
}

fn block(i: u64, seed: u64) -> Bytes {
    let mut x = (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed;
    Bytes::from(
        (0..4096 / 8)
            .flat_map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()
            })
            .collect::<Vec<u8>>(),
    )
}

/// What one device's index cost.
struct Measured {
    device_bytes: u64,
    log_block_bytes: u32,
    entry_bits: u32,
    entries: u64,
    index_bytes: u64,
    rss_open_bytes: i64,
    rss_filled_bytes: i64,
}

/// Formats a sparse device of `device_bytes`, writes `fill_bytes` of 4 KiB blocks through the
/// writer, and measures.
fn measure(
    dir: &Path,
    name: &str,
    device_bytes: u64,
    fill_bytes: u64,
    seed: u64,
) -> Result<Measured> {
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    let config = L2ArcConfig { write_max_bytes_per_s: 1 << 40, ..L2ArcConfig::default() };
    let clock = Arc::new(ManualClock::starting_at(std::time::Duration::ZERO));
    let rss_before = rss_anon_bytes()? as i64;
    let l2 = L2Arc::new(config, 0xfeed, clock.clone(), seed).map_err(|e| anyhow!("{e}"))?;
    l2.add_device(&path, Some(device_bytes)).map_err(|e| anyhow!("{e}"))?;
    let rss_open = rss_anon_bytes()? as i64;
    let feed = EvictionFeed::new(BATCH_BLOCKS as usize, 64 * MIB);
    let blocks = fill_bytes / 4096;
    let mut pushed = 0;
    while pushed < blocks {
        let batch = BATCH_BLOCKS.min(blocks - pushed);
        for i in pushed..pushed + batch {
            feed.push(FeedItem::new(
                BlockKey::new(i / 4096 + 1, (i % 4096) as u32 * 4096),
                block(i, seed),
            ));
        }
        pushed += batch;
        // Bounded: each round takes what the (huge) rate allows, all of it.
        for _ in 0..1000 {
            if feed.is_empty() {
                break;
            }
            clock.advance_ms(1000);
            l2.write_tick(&feed);
        }
    }
    l2.flush();
    let stats = l2.stats();
    let rss_filled = rss_anon_bytes()? as i64;
    let device = stats.devices.first().ok_or_else(|| anyhow!("no device"))?;
    eprintln!(
        "fardisk-bench: {name}: fed {} blocks, {} skipped as present, {} lost unwritten, {} the full index refused",
        stats.feed_entries, stats.skipped_present, stats.lost_unwritten, device.index_full_drops
    );
    let measured = Measured {
        device_bytes,
        log_block_bytes: device.log_block_bytes,
        entry_bits: device.index_entry_bits,
        entries: stats.entries,
        index_bytes: stats.index_bytes,
        rss_open_bytes: rss_open - rss_before,
        rss_filled_bytes: rss_filled - rss_before,
    };
    drop(l2);
    std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    eprintln!(
        "fardisk-bench: {name}: {} MiB device, {} MiB written: {} entries, index {} bytes ({:.3} GiB per TiB, {:.2} bytes per cached block), RssAnon +{} MiB after open, +{} MiB after the fill",
        device_bytes / MIB,
        fill_bytes / MIB,
        measured.entries,
        measured.index_bytes,
        measured.index_bytes as f64 / device_bytes as f64 * TIB / GIB as f64,
        measured.index_bytes as f64 / measured.entries.max(1) as f64,
        measured.rss_open_bytes / MIB as i64,
        measured.rss_filled_bytes / MIB as i64,
    );
    Ok(measured)
}

fn row(setup: String, order: i64, m: &Measured, params: &Value, note: &str) -> Value {
    let gib_per_tib = m.index_bytes as f64 / m.device_bytes as f64 * TIB / GIB as f64;
    let metrics = vec![
        ("device_gib", m.device_bytes as f64 / GIB as f64),
        ("log_block_kib", f64::from(m.log_block_bytes) / 1024.0),
        ("entry_bits", f64::from(m.entry_bits)),
        ("entries", m.entries as f64),
        ("index_mib", m.index_bytes as f64 / MIB as f64),
        ("index_gib_per_tib", gib_per_tib),
        ("index_bytes_per_4k_of_device", m.index_bytes as f64 / (m.device_bytes as f64 / 4096.0)),
        ("index_bytes_per_cached_block", m.index_bytes as f64 / m.entries.max(1) as f64),
        ("rss_anon_open_mib", m.rss_open_bytes as f64 / MIB as f64),
        ("rss_anon_filled_mib", m.rss_filled_bytes as f64 / MIB as f64),
    ];
    json!({
        "setup": setup, "order": order, "duration_s": 0, "notes": note, "params": params, "series": {},
        "metrics": metrics.iter().map(|(k, v)| json!([k, round3(*v)])).collect::<Vec<_>>(),
    })
}

pub fn run(a: Args, out: &Path, note: &str) -> Result<()> {
    let _ = std::fs::remove_dir_all(&a.dir);
    std::fs::create_dir_all(&a.dir)?;
    let params = json!({"block_bytes": 4096, "log_block_bytes_configured": L2ArcConfig::default().log_block_bytes,
        "full_mib": format!("{:?}", a.full_mib), "large_gib": a.large_gib, "large_fill_mib": a.large_fill_mib});
    let mut rows = Vec::new();
    for (n, mib) in a.full_mib.iter().enumerate() {
        // 25 % more than the device holds: the ring wraps and every slot is in use.
        let m = measure(&a.dir, &format!("full-{mib}"), mib * MIB, mib * MIB * 5 / 4, a.seed)?;
        rows.push(row(
            format!("{mib} MiB cache device, filled past capacity"),
            n as i64,
            &m,
            &params,
            note,
        ));
    }
    let m = measure(&a.dir, "large", a.large_gib * GIB, a.large_fill_mib * MIB, a.seed)?;
    rows.push(row(
        format!("{} GiB sparse cache device, {} MiB written", a.large_gib, a.large_fill_mib),
        a.full_mib.len() as i64,
        &m,
        &params,
        note,
    ));
    let _ = std::fs::remove_dir_all(&a.dir);
    std::fs::write(out, serde_json::to_string_pretty(&json!({ "rows": rows }))?)
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}
