//! The engine's integration tests, built as one test binary: one build of the shared helpers
//! (`sim/`, `golden/`) and one link instead of one per file, which was most of the workspace's
//! test build. Each module below was a test binary of its own and keeps its name as a filter:
//! `cargo test -p fardisk-engine --test engine simulation::` runs one of them.
//!
//! `unreachable_store` stays a binary of its own: it sets process-wide environment variables
//! (the S3 client's endpoint and credentials), which must not race the other tests' threads.

mod behaviour;
mod big_frees;
mod big_volume;
mod cold_random_read;
mod damaged_roots;
mod decoders_proptest;
mod far_frees;
mod get_census;
mod golden_formats;
mod hung_log_leg;
mod idle_reclaim;
mod idle_requests;
mod intent_log;
mod map_fetch;
mod model;
mod multihost;
mod orphans;
mod outage_reads;
mod point_in_time;
mod scan_memory;
mod scrub;
mod simulation;
mod snapshot_destroy;
mod snapshots;
mod store_capability;
mod store_server;
mod sync_sharing;
mod txg_cadence;
mod warmup;

// Shared by the modules above.
mod counting_store;
mod fresh_pool;
mod golden;
mod sim;
