//! ServerConfig defaults follow the protocol's recommendations, and normalisation
//! turns unworkable values into safe ones instead of hangs or panics.

use fardisk_nbd::ServerConfig;

#[test]
fn defaults_follow_the_protocol_recommendations() {
    let config = ServerConfig::default();
    // The spec: servers SHOULD accept payloads up to 2^25 bytes.
    assert_eq!(config.max_request_bytes, 1 << 25);
    assert!(config.max_inflight_bytes_per_connection >= config.max_request_bytes as u64);
    let normalized = config.normalized();
    assert_eq!(normalized.max_request_bytes, config.max_request_bytes);
    assert_eq!(normalized.max_connections, config.max_connections);
}

#[test]
fn normalization_fixes_unworkable_limits() {
    let zeroes = ServerConfig {
        max_request_bytes: 0,
        max_connections: 0,
        max_inflight_per_connection: 0,
        max_inflight_bytes_per_connection: 0,
        max_options_per_handshake: 0,
        max_option_bytes: 0,
        handshake_timeout_ms: 0,
        shutdown_grace_ms: 0,
        max_block_status_extents: 0,
        writes_durable_before_reply: false,
    }
    .normalized();
    assert_eq!(zeroes.max_request_bytes, 4096);
    assert_eq!(zeroes.max_connections, 1);
    assert_eq!(zeroes.max_inflight_per_connection, 1);
    // A byte budget below one request would block that request forever.
    assert_eq!(zeroes.max_inflight_bytes_per_connection, 4096);
    assert_eq!(zeroes.max_options_per_handshake, 1);
    assert!(zeroes.handshake_timeout_ms >= 1);
    assert_eq!(zeroes.max_block_status_extents, 1);

    let huge = ServerConfig {
        max_request_bytes: u32::MAX,
        max_connections: usize::MAX,
        max_inflight_per_connection: usize::MAX,
        max_inflight_bytes_per_connection: u64::MAX,
        max_options_per_handshake: u32::MAX,
        max_option_bytes: u32::MAX,
        handshake_timeout_ms: u64::MAX,
        shutdown_grace_ms: u64::MAX,
        max_block_status_extents: usize::MAX,
        writes_durable_before_reply: true,
    }
    .normalized();
    assert_eq!(huge.max_request_bytes, 1 << 30);
    assert!(huge.max_connections <= 1 << 20);
    assert!(huge.max_inflight_per_connection <= 1 << 16);
    assert!(huge.max_inflight_bytes_per_connection <= 1 << 40);
    assert!(huge.max_option_bytes <= 16 << 20);
    assert!(huge.handshake_timeout_ms <= 24 * 3600 * 1000);
    // The spec caps block status replies at 2^20 extents.
    assert_eq!(huge.max_block_status_extents, 1 << 20);
}
