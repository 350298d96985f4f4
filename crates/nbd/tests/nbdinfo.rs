//! nbdinfo (libnbd-bin) against the in-process server: export info, listing, and the
//! allocation map served through NBD_CMD_BLOCK_STATUS / base:allocation.

mod common;

use std::sync::Arc;

use common::*;
use fardisk_nbd::{ExportMap, MemDevice, ServerConfig};
use serde_json::Value;

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|error| panic!("nbdinfo JSON: {error}: {text}"))
}

fn two_exports() -> (Arc<MemDevice>, Arc<ExportMap>) {
    let writable = Arc::new(MemDevice::new(64 << 20));
    let read_only = Arc::new(MemDevice::new(1 << 20).with_read_only(true));
    let exports = ExportMap::new().with_export("vol", "test volume", writable.clone()).with_export(
        "ro",
        "read-only volume",
        read_only,
    );
    (writable, Arc::new(exports))
}

#[test]
fn info_reports_size_flags_and_block_sizes() {
    let nbdinfo = require_tool("nbdinfo", "libnbd-bin");
    let (_, exports) = two_exports();
    let server = TestServer::start(exports, ServerConfig::default());
    let info = json(&run_ok(&nbdinfo, &["--json", &server.uri("vol")]));
    assert_eq!(info["protocol"], "newstyle-fixed");
    assert_eq!(info["structured"], true);
    let export = &info["exports"][0];
    assert_eq!(export["export-name"], "vol");
    assert_eq!(export["description"], "test volume");
    assert_eq!(export["export-size"], 64u64 << 20);
    assert_eq!(export["contexts"], serde_json::json!(["base:allocation"]));
    for capability in [
        "can_cache",
        "can_df",
        "can_fast_zero",
        "can_flush",
        "can_fua",
        "can_multi_conn",
        "can_trim",
        "can_zero",
    ] {
        assert_eq!(export[capability], true, "{capability}");
    }
    assert_eq!(export["is_read_only"], false);
    assert_eq!(export["block_size_minimum"], 1);
    assert_eq!(export["block_size_preferred"], 4096);
    assert_eq!(export["block_size_maximum"], 32u64 << 20);
}

#[test]
fn read_only_export_advertises_no_write_features() {
    let nbdinfo = require_tool("nbdinfo", "libnbd-bin");
    let (_, exports) = two_exports();
    let server = TestServer::start(exports, ServerConfig::default());
    let info = json(&run_ok(&nbdinfo, &["--json", &server.uri("ro")]));
    let export = &info["exports"][0];
    assert_eq!(export["is_read_only"], true);
    assert_eq!(export["export-size"], 1u64 << 20);
    for capability in ["can_trim", "can_zero", "can_fast_zero", "can_fua"] {
        assert_eq!(export[capability], false, "{capability}");
    }
}

#[test]
fn configured_max_request_is_advertised() {
    let nbdinfo = require_tool("nbdinfo", "libnbd-bin");
    let (_, exports) = two_exports();
    let config = ServerConfig { max_request_bytes: 1 << 20, ..ServerConfig::default() };
    let server = TestServer::start(exports, config);
    let info = json(&run_ok(&nbdinfo, &["--json", &server.uri("vol")]));
    assert_eq!(info["exports"][0]["block_size_maximum"], 1u64 << 20);
}

#[test]
fn list_shows_every_export_with_description() {
    let nbdinfo = require_tool("nbdinfo", "libnbd-bin");
    let (_, exports) = two_exports();
    let server = TestServer::start(exports, ServerConfig::default());
    let listing = json(&run_ok(&nbdinfo, &["--list", "--json", &server.uri("")]));
    let mut seen: Vec<(String, String)> = listing["exports"]
        .as_array()
        .expect("exports array")
        .iter()
        .map(|export| {
            (
                export["export-name"].as_str().unwrap_or_default().to_owned(),
                export["description"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("ro".to_owned(), "read-only volume".to_owned()),
            ("vol".to_owned(), "test volume".to_owned()),
        ]
    );
}

#[test]
fn default_export_resolves_to_first_export() {
    let nbdinfo = require_tool("nbdinfo", "libnbd-bin");
    let (_, exports) = two_exports();
    let server = TestServer::start(exports, ServerConfig::default());
    // "vol" was added first: the empty name means it.
    let size = run_ok(&nbdinfo, &["--size", &server.uri("")]);
    assert_eq!(size.trim(), (64u64 << 20).to_string());
}

#[test]
fn map_reports_holes_and_data() {
    let nbdinfo = require_tool("nbdinfo", "libnbd-bin");
    let (device, exports) = two_exports();
    device.fill(1 << 20, &[0xab; 8192]).expect("fill");
    device.fill(8 << 20, &[0xcd; 65536]).expect("fill");
    let server = TestServer::start(exports, ServerConfig::default());
    let map = json(&run_ok(&nbdinfo, &["--map", "--json", &server.uri("vol")]));
    let entries: Vec<(u64, u64, u64)> = map
        .as_array()
        .expect("map array")
        .iter()
        .map(|entry| {
            let field = |name: &str| entry[name].as_u64().unwrap_or(u64::MAX);
            (field("offset"), field("length"), field("type"))
        })
        .collect();
    let hole_zero = 3;
    let data = 0;
    assert_eq!(
        entries,
        vec![
            (0, 1 << 20, hole_zero),
            (1 << 20, 8192, data),
            ((1 << 20) + 8192, (7 << 20) - 8192, hole_zero),
            (8 << 20, 65536, data),
            ((8 << 20) + 65536, (56 << 20) - 65536, hole_zero),
        ]
    );
    assert!(device.stats().block_status > 0, "block status never reached the device");
}

#[test]
fn unknown_export_is_refused() {
    let nbdinfo = require_tool("nbdinfo", "libnbd-bin");
    let (_, exports) = two_exports();
    let server = TestServer::start(exports, ServerConfig::default());
    let output = run(&nbdinfo, &["--json", &server.uri("no-such-export")]);
    assert!(!output.status.success(), "nbdinfo accepted an unknown export");
    let stderr = String::from_utf8_lossy(&output.stderr);
    // libnbd reports NBD_REP_ERR_UNKNOWN as ENOENT.
    assert!(stderr.contains("No such file or directory"), "stderr: {stderr}");
}

#[test]
#[should_panic(
    expected = "needs the Debian package no-such-package (apt-get install no-such-package)"
)]
fn a_missing_client_fails_with_the_package_to_install() {
    require_tool("no-such-nbd-client", "no-such-package");
}
