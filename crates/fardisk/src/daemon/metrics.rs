//! What the Prometheus endpoint exports. Every scrape encodes the same two snapshots that `status
//! --json` and `arcstat --json` print, so the endpoint can never disagree with the CLI; on top of
//! them it adds the store's latency histograms and an estimated request cost.
//!
//! Names: `fardisk_` prefix, units last, counters end in `_total` (added by the encoder), and every
//! sample carries a `pool` label so one Prometheus can scrape many daemons.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use serde_json::Value;

/// Estimated price of object-store requests in US dollars per 1,000 (AWS S3 Standard list price,
/// us-east-1: PUT/COPY/POST/LIST $0.005, GET/HEAD $0.0004, DELETE free). An estimate for
/// dashboards, not a bill: other providers and tiers differ, and transfer is not counted.
pub const REQUEST_COST_USD_PER_1000: [(&str, f64); 5] =
    [("put", 0.005), ("list", 0.005), ("get", 0.0004), ("head", 0.0004), ("delete", 0.0)];

/// Bucket bounds of the store's latency histograms (engine's `LATENCY_BUCKETS_US`); the last
/// count is everything above the last bound.
const STORE_BUCKETS_US: [u64; 12] = fardisk_engine::objstore::LATENCY_BUCKETS_US;

type Labels = Vec<(&'static str, String)>;

/// The two snapshots of one scrape.
#[derive(Debug)]
struct Scrape {
    pool: String,
    /// One pool of `status --json` (`pools[0]`).
    status: Value,
    /// `arcstat --json`.
    arc: Value,
    /// Milliseconds since the epoch at the scrape (for the age of the last published txg).
    now_ms: u64,
}

/// The text exposition (OpenMetrics) of one scrape.
pub fn encode(pool: &str, status: &Value, arc: &Value, now_ms: u64) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape {
        pool: pool.to_string(),
        status: status.clone(),
        arc: arc.clone(),
        now_ms,
    }));
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64().or_else(|| v.as_bool().map(|b| if b { 1.0 } else { 0.0 }))
}

/// Writes one metric family. Samples whose value is missing (not in this snapshot) are skipped,
/// and a family without samples is left out entirely.
fn family(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: Vec<(Labels, Option<f64>)>,
) -> std::fmt::Result {
    let samples: Vec<(Labels, f64)> =
        samples.into_iter().filter_map(|(l, v)| v.map(|v| (l, v))).collect();
    if samples.is_empty() {
        return Ok(());
    }
    let mut m = enc.encode_descriptor(name, help, None, kind)?;
    for (labels, v) in &samples {
        let mut f = m.encode_family(labels)?;
        match kind {
            MetricType::Counter => f.encode_counter::<NoLabelSet, _, f64>(v, None)?,
            _ => f.encode_gauge(v)?,
        }
    }
    Ok(())
}

/// `(json field, metric name without prefix, kind, help)`.
type Field = (&'static str, &'static str, MetricType, &'static str);
const C: MetricType = MetricType::Counter;
const G: MetricType = MetricType::Gauge;

const POOL_FIELDS: &[Field] = &[
    ("published_txg", "txg_published", G, "Last transaction group published to the store"),
    ("open_txg", "txg_open", G, "Transaction group taking writes"),
    ("txgs_synced", "txgs_synced", C, "Transaction groups committed since import"),
    ("dirty_bytes", "dirty_bytes", G, "Written data not yet in the store"),
    ("dirty_bytes_max", "dirty_bytes_max", G, "Dirty data limit before writers are throttled"),
    ("garbage_bytes", "garbage_bytes", G, "Bytes in store segments no longer referenced"),
    ("compress_ratio", "compress_ratio", G, "Logical over stored bytes of live data"),
    ("segments_uploaded", "segments_uploaded", C, "Segments written to the store"),
    (
        "segment_bytes_uploaded",
        "segment_uploaded_bytes",
        C,
        "Bytes of segments written to the store",
    ),
    (
        "checksum_errors",
        "checksum_errors",
        C,
        "Blocks read from the store that failed their checksum",
    ),
    ("throttle_delays", "throttle_delays", C, "Writes delayed by the dirty-data throttle"),
    ("throttle_stalls", "throttle_stalls", C, "Writes stopped until a txg committed"),
    ("readahead_blocks", "readahead_blocks", C, "Blocks prefetched by sequential read-ahead"),
    ("compacted_segments", "compacted_segments", C, "Segments rewritten by compaction"),
    ("deleted_segments", "deleted_segments", C, "Segments deleted from the store"),
    (
        "orphans_deleted",
        "orphans_deleted",
        C,
        "Orphaned segments (uploaded by txgs never published) deleted from the store",
    ),
    (
        "reads_waiting_for_store",
        "reads_waiting_for_store",
        G,
        "Reads waiting now for a store that does not answer (failmode=wait)",
    ),
    ("reads_waited_for_store", "reads_waited_for_store", C, "Reads that waited for the store"),
    ("pending_deletes", "pending_deletes", G, "Segments waiting to be deleted"),
    ("map_cache_bytes", "map_cache_bytes", G, "Block-map pages held in memory"),
];

/// The status's `freeing` object: space later txgs still free (#21).
const FREEING_FIELDS: &[Field] = &[
    (
        "queued_subtrees",
        "free_queue_subtrees",
        G,
        "Map subtrees cut off by trims, rollbacks and destroyed volumes, still to be freed",
    ),
    (
        "trees_being_destroyed",
        "trees_being_destroyed",
        G,
        "Destroyed snapshots (and former maps) whose space is still being freed",
    ),
];

const LOG_FIELDS: &[Field] = &[
    ("sync_requests", "log_sync_requests", C, "Sync requests (fsync, FUA, flush) served"),
    (
        "txg_fallbacks",
        "log_txg_fallbacks",
        C,
        "Sync requests served by committing a txg instead of the log",
    ),
    ("commits", "log_commits", C, "Log commit calls"),
    (
        "device_writes",
        "log_device_writes",
        C,
        "Commit batches written to the log legs (group commit)",
    ),
    (
        "blocks_written_ahead",
        "log_blocks_written_ahead",
        C,
        "Log blocks of plain writes written before any flush (log_write_ahead)",
    ),
    (
        "flushes_without_write",
        "log_flushes_without_write",
        C,
        "Log commits that found their records written ahead and only flushed",
    ),
    ("leg_flushes", "log_leg_flushes", C, "Flushes issued to log legs"),
    ("bytes_logged", "log_logged_bytes", C, "Bytes written to the log"),
    ("records_logged", "log_records_logged", C, "Records written to the log"),
    (
        "log_full_events",
        "log_full_events",
        C,
        "Times the log was full and a commit waited for a txg",
    ),
    ("commit_errors", "log_commit_errors", C, "Log commits that failed"),
    ("space_used_bytes", "log_used_bytes", G, "Log space holding records not yet in the store"),
    ("space_total_bytes", "log_capacity_bytes", G, "Log space"),
    ("healthy", "log_healthy", G, "1 when a log vdev can take writes"),
];

const ARC_FIELDS: &[Field] = &[
    ("hits", "arc_hits", C, "ARC hits"),
    ("misses", "arc_misses", C, "ARC misses"),
    ("demand_hits", "arc_demand_hits", C, "ARC hits of demand reads"),
    ("demand_misses", "arc_demand_misses", C, "ARC misses of demand reads"),
    ("prefetch_hits", "arc_prefetch_hits", C, "ARC hits of prefetch reads"),
    ("prefetch_misses", "arc_prefetch_misses", C, "ARC misses of prefetch reads"),
    (
        "demand_hits_on_prefetched",
        "arc_demand_hits_on_prefetched",
        C,
        "Demand hits on prefetched blocks",
    ),
    ("mru_ghost_hits", "arc_mru_ghost_hits", C, "Hits in the MRU ghost list"),
    ("mfu_ghost_hits", "arc_mfu_ghost_hits", C, "Hits in the MFU ghost list"),
    ("inserts", "arc_inserts", C, "Blocks inserted"),
    ("evictions", "arc_evictions", C, "Blocks evicted"),
    ("evicted_bytes", "arc_evicted_bytes", C, "Bytes evicted"),
    (
        "stale_dropped",
        "arc_stale_dropped",
        C,
        "Entries dropped because a read named other bytes at their key",
    ),
    (
        "stream_dropped",
        "arc_stream_dropped",
        C,
        "Blocks a long sequential read used once, let go once read (arc_stream_bytes_max)",
    ),
    ("feed_dropped", "arc_l2_feed_dropped", C, "Evicted blocks the L2ARC feed dropped"),
    (
        "feed_skipped_held",
        "arc_l2_feed_skipped_held",
        C,
        "Evicted blocks the L2ARC feed did not queue: the L2ARC held them already",
    ),
    ("size_bytes", "arc_size_bytes", G, "ARC size"),
    ("c_bytes", "arc_target_bytes", G, "ARC target size (c)"),
    ("c_min_bytes", "arc_min_bytes", G, "ARC minimum target"),
    ("c_max_bytes", "arc_max_bytes", G, "ARC maximum target (arc_max)"),
    ("p_bytes", "arc_mru_target_bytes", G, "Target size of the MRU side (p)"),
    ("mru_bytes", "arc_mru_bytes", G, "MRU size"),
    (
        "mru_prefetch_bytes",
        "arc_mru_prefetch_bytes",
        G,
        "MRU bytes of prefetched blocks not read yet",
    ),
    ("mfu_bytes", "arc_mfu_bytes", G, "MFU size"),
    ("mru_ghost_bytes", "arc_mru_ghost_bytes", G, "Bytes described by the MRU ghost list"),
    ("mfu_ghost_bytes", "arc_mfu_ghost_bytes", G, "Bytes described by the MFU ghost list"),
    ("entries", "arc_entries", G, "Blocks in the ARC"),
];

const L2_FIELDS: &[Field] = &[
    ("hits", "l2arc_hits", C, "L2ARC hits"),
    ("misses", "l2arc_misses", C, "L2ARC misses"),
    ("bytes_read", "l2arc_read_bytes", C, "Bytes read from cache devices"),
    ("bytes_written", "l2arc_written_bytes", C, "Bytes written to cache devices"),
    ("checksum_errors", "l2arc_checksum_errors", C, "Cache entries dropped for a bad checksum"),
    ("io_errors", "l2arc_io_errors", C, "Cache device I/O errors"),
    ("size_bytes", "l2arc_size_bytes", G, "Bytes of blocks held in the L2ARC"),
    ("entries", "l2arc_entries", G, "Blocks held in the L2ARC"),
    (
        "index_bytes",
        "l2arc_index_bytes",
        G,
        "Memory of the L2ARC index, fixed by the cache devices' size",
    ),
];

impl Scrape {
    fn labels(&self, extra: &[(&'static str, String)]) -> Labels {
        let mut l = vec![("pool", self.pool.clone())];
        l.extend(extra.iter().cloned());
        l
    }

    fn fields(
        &self,
        enc: &mut DescriptorEncoder,
        obj: &Value,
        fields: &[Field],
    ) -> std::fmt::Result {
        for (field, name, kind, help) in fields {
            family(
                enc,
                &format!("fardisk_{name}"),
                help,
                *kind,
                vec![(self.labels(&[]), obj.get(*field).and_then(num))],
            )?;
        }
        Ok(())
    }

    fn pool_metrics(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let s = &self.status;
        let state = s["health"]["state"].as_str().unwrap_or("unknown").to_uppercase();
        family(
            enc,
            "fardisk_pool_state",
            "1 for the pool's current state (ONLINE, DEGRADED, SUSPENDED, FAULTED)",
            G,
            vec![(self.labels(&[("state", state)]), Some(1.0))],
        )?;
        self.fields(enc, s, POOL_FIELDS)?;
        self.fields(enc, &s["freeing"], FREEING_FIELDS)?;
        let age_s =
            s["published_time_ms"].as_u64().map(|t| self.now_ms.saturating_sub(t) as f64 / 1000.0);
        family(
            enc,
            "fardisk_txg_published_age_seconds",
            "Age of the last published txg: how far behind the store alone is",
            G,
            vec![(self.labels(&[]), age_s)],
        )?;
        let sync_s = s["txg_sync_ms_avg"].as_f64().map(|ms| ms / 1000.0);
        family(
            enc,
            "fardisk_txg_sync_seconds_avg",
            "Mean time to commit a txg since import",
            G,
            vec![(self.labels(&[]), sync_s)],
        )?;
        for (field, what) in [
            ("logical_bytes", "Bytes written to volumes and still referenced"),
            ("physical_bytes", "Bytes the pool stores"),
            ("live_bytes", "Stored bytes still referenced"),
        ] {
            family(
                enc,
                &format!("fardisk_space_{field}"),
                what,
                G,
                vec![(self.labels(&[]), s["space"].get(field).and_then(num))],
            )?;
        }
        let volumes: Vec<&Value> =
            s["volumes"].as_array().map(|v| v.iter().collect()).unwrap_or_default();
        for (field, help) in [
            ("size_bytes", "Volume size"),
            ("allocated_bytes", "Volume bytes written and referenced"),
        ] {
            let samples = volumes
                .iter()
                .map(|v| {
                    (
                        self.labels(&[("volume", v["name"].as_str().unwrap_or("").to_string())]),
                        v.get(field).and_then(num),
                    )
                })
                .collect();
            family(enc, &format!("fardisk_volume_{field}"), help, G, samples)?;
        }
        Ok(())
    }

    fn store_metrics(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let r = &self.status["store_requests"];
        let ops = ["put", "get", "head", "delete", "list"];
        let per_op = |field: &str, scale: f64| -> Vec<(Labels, Option<f64>)> {
            ops.iter()
                .map(|op| {
                    (
                        self.labels(&[("op", op.to_string())]),
                        r[op].get(field).and_then(num).map(|v| v * scale),
                    )
                })
                .collect()
        };
        family(
            enc,
            "fardisk_store_requests",
            "Object-store requests by kind",
            C,
            per_op("requests", 1.0),
        )?;
        family(
            enc,
            "fardisk_store_request_errors",
            "Object-store requests that failed, by kind",
            C,
            per_op("errors", 1.0),
        )?;
        family(
            enc,
            "fardisk_store_transferred_bytes",
            "Bytes sent (put) or received (get, list) by kind",
            C,
            per_op("bytes", 1.0),
        )?;
        family(
            enc,
            "fardisk_store_request_seconds",
            "Total time spent in object-store requests, by kind",
            C,
            per_op("latency_us_total", 1e-6),
        )?;
        family(
            enc,
            "fardisk_store_requests_in_flight",
            "Object-store requests under way now, by kind",
            G,
            per_op("in_flight", 1.0),
        )?;
        family(
            enc,
            "fardisk_store_requests_in_flight_max",
            "Most object-store requests under way at once since import, by kind",
            G,
            per_op("in_flight_max", 1.0),
        )?;
        let cost: Vec<(Labels, Option<f64>)> = REQUEST_COST_USD_PER_1000
            .iter()
            .map(|(op, usd)| {
                (
                    self.labels(&[("op", op.to_string())]),
                    r[*op]["requests"].as_u64().map(|n| n as f64 * usd / 1000.0),
                )
            })
            .collect();
        family(
            enc,
            "fardisk_store_request_cost_usd_estimate",
            "Estimated request cost in USD at S3 Standard list prices (see docs/metrics.md)",
            C,
            cost,
        )?;
        let mut histograms = Vec::new();
        for op in ["put", "get"] {
            let Some(counts) = r[format!("{op}_latency_buckets")].as_array() else { continue };
            let counts: Vec<u64> = counts.iter().filter_map(|c| c.as_u64()).collect();
            let sum_s = r[op]["latency_us_total"].as_u64().unwrap_or(0) as f64 / 1e6;
            let buckets: Vec<(f64, u64)> = counts
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    (
                        STORE_BUCKETS_US.get(i).map(|us| *us as f64 / 1e6).unwrap_or(f64::INFINITY),
                        *c,
                    )
                })
                .collect();
            histograms.push((
                self.labels(&[("op", op.to_string())]),
                sum_s,
                counts.iter().sum::<u64>(),
                buckets,
            ));
        }
        if !histograms.is_empty() {
            let mut m = enc.encode_descriptor(
                "fardisk_store_request_latency_seconds",
                "Object-store request latency (put and get)",
                None,
                MetricType::Histogram,
            )?;
            for (labels, sum_s, count, buckets) in &histograms {
                m.encode_family(labels)?
                    .encode_histogram::<NoLabelSet>(*sum_s, *count, buckets, None)?;
            }
        }
        Ok(())
    }

    fn log_metrics(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let log = &self.status["log"];
        if !log.is_object() {
            return Ok(());
        }
        self.fields(enc, log, LOG_FIELDS)?;
        if let Some(b) = log["commit_latency_us"].as_array() {
            let buckets: Vec<(f64, u64)> = b
                .iter()
                .map(|x| {
                    let le = x["le_us"].as_u64().unwrap_or(u64::MAX);
                    (
                        if le == u64::MAX { f64::INFINITY } else { le as f64 / 1e6 },
                        x["count"].as_u64().unwrap_or(0),
                    )
                })
                .collect();
            let count = buckets.iter().map(|b| b.1).sum();
            let sum_s = log["commit_latency_us_total"].as_u64().unwrap_or(0) as f64 / 1e6;
            let mut m = enc.encode_descriptor(
                "fardisk_log_commit_latency_seconds",
                "Time from a sync request to its records on every healthy leg",
                None,
                MetricType::Histogram,
            )?;
            m.encode_family(&self.labels(&[]))?
                .encode_histogram::<NoLabelSet>(sum_s, count, &buckets, None)?;
        }
        let legs: Vec<(String, &Value)> = log["vdevs"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|v| {
                v["legs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(move |l| (v["guid"].as_str().unwrap_or("").to_string(), l))
            })
            .collect();
        let leg_labels = |vdev: &str, l: &Value| {
            self.labels(&[
                ("vdev", vdev.to_string()),
                ("device", l["path"].as_str().unwrap_or("").to_string()),
            ])
        };
        let online = legs
            .iter()
            .map(|(g, l)| (leg_labels(g, l), Some(if l["state"] == "ONLINE" { 1.0 } else { 0.0 })))
            .collect();
        family(enc, "fardisk_log_device_online", "1 when the log leg is ONLINE", G, online)?;
        // 0 between cycles: an alert on this rising past a second finds a hung log device,
        // which holds every commit while its state still says ONLINE.
        let waiting = legs
            .iter()
            .map(|(g, l)| {
                let ms = l["io_waiting_ms"].as_u64().unwrap_or(0);
                (leg_labels(g, l), Some(ms as f64 / 1000.0))
            })
            .collect();
        family(
            enc,
            "fardisk_log_device_io_waiting_seconds",
            "How long the log leg's write cycle under way has waited for the device (0: none)",
            G,
            waiting,
        )?;
        for (field, what) in
            [("read_errors", "read"), ("write_errors", "write"), ("checksum_errors", "checksum")]
        {
            let samples =
                legs.iter().map(|(g, l)| (leg_labels(g, l), l.get(field).and_then(num))).collect();
            family(
                enc,
                &format!("fardisk_log_device_{field}"),
                &format!("{what} errors of the log leg"),
                C,
                samples,
            )?;
        }
        let samples =
            legs.iter().map(|(g, l)| (leg_labels(g, l), l.get("timeouts").and_then(num))).collect();
        family(
            enc,
            "fardisk_log_device_timeouts",
            "write cycles given up on at log_leg_timeout_ms (each took the leg out of service)",
            C,
            samples,
        )?;
        Ok(())
    }

    fn cache_metrics(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        self.fields(enc, &self.arc["arc"], ARC_FIELDS)?;
        let l2 = &self.arc["l2arc"];
        if !l2.is_object() {
            return Ok(());
        }
        self.fields(enc, l2, L2_FIELDS)?;
        let devices: Vec<&Value> =
            l2["devices"].as_array().map(|d| d.iter().collect()).unwrap_or_default();
        let dev_labels =
            |d: &Value| self.labels(&[("device", d["path"].as_str().unwrap_or("").to_string())]);
        let online = devices
            .iter()
            .map(|d| (dev_labels(d), Some(if d["state"] == "Online" { 1.0 } else { 0.0 })))
            .collect();
        family(
            enc,
            "fardisk_l2arc_device_online",
            "1 when the cache device serves reads",
            G,
            online,
        )?;
        let cap = devices
            .iter()
            .map(|d| (dev_labels(d), d.get("capacity_bytes").and_then(num)))
            .collect();
        family(enc, "fardisk_l2arc_device_capacity_bytes", "Cache device size", G, cap)?;
        let rebuilt = devices
            .iter()
            .map(|d| (dev_labels(d), d["rebuild"].get("entries").and_then(num)))
            .collect();
        family(
            enc,
            "fardisk_l2arc_rebuild_entries",
            "Entries recovered from the device at import",
            G,
            rebuilt,
        )?;
        Ok(())
    }

    fn background_metrics(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let scrub = &self.status["scrub"];
        let state = scrub["state"].as_str().unwrap_or("none").to_string();
        family(
            enc,
            "fardisk_scrub_state",
            "1 for the state of the current or last scrub",
            G,
            vec![(self.labels(&[("state", state)]), Some(1.0))],
        )?;
        for (field, help) in [
            ("examined_bytes", "Bytes the current or last scrub read back"),
            ("to_examine_bytes", "Bytes the current or last scrub has to read"),
            ("checksum_errors", "Checksum errors the current or last scrub found"),
            ("repaired_blocks", "Blocks the current or last scrub repaired"),
        ] {
            family(
                enc,
                &format!("fardisk_scrub_{field}"),
                help,
                G,
                vec![(self.labels(&[]), scrub.get(field).and_then(num))],
            )?;
        }
        let warm = &self.arc["warmup"];
        family(
            enc,
            "fardisk_warmup_regions_done",
            "Hot-set regions read back since import",
            G,
            vec![(self.labels(&[]), warm.get("regions_done").and_then(num))],
        )?;
        family(
            enc,
            "fardisk_warmup_regions_total",
            "Hot-set regions to read back at import",
            G,
            vec![(self.labels(&[]), warm.get("regions_total").and_then(num))],
        )?;
        Ok(())
    }
}

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        self.pool_metrics(&mut enc)?;
        self.store_metrics(&mut enc)?;
        self.log_metrics(&mut enc)?;
        self.cache_metrics(&mut enc)?;
        self.background_metrics(&mut enc)
    }
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
