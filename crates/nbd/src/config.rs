//! Server limits. Every queue and buffer of the server is bounded by one of these.

/// The protocol's recommended maximum payload (2^25 bytes).
pub const MAX_REQUEST_BYTES_DEFAULT: u32 = 32 * 1024 * 1024;
/// Upper bound accepted for `max_request_bytes`, so `length + header` never overflows
/// a u32 and one request can never ask for gigabytes.
pub const MAX_REQUEST_BYTES_CEILING: u32 = 1 << 30;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest READ/WRITE payload (advertised as the NBD maximum payload size).
    pub max_request_bytes: u32,
    /// Connections served at once; further ones are closed right after accept.
    pub max_connections: usize,
    /// Requests of one connection processed concurrently.
    pub max_inflight_per_connection: usize,
    /// Payload bytes (write data and read replies) one connection may hold at once;
    /// raised to at least `max_request_bytes` so one maximal request always fits.
    pub max_inflight_bytes_per_connection: u64,
    /// Options accepted in one handshake before the server hangs up (a client looping
    /// on options is a denial of service).
    pub max_options_per_handshake: u32,
    /// Option data larger than this is drained in bounded pieces and refused with
    /// NBD_REP_ERR_TOO_BIG instead of being buffered.
    pub max_option_bytes: u32,
    /// A handshake not finished within this time is dropped.
    pub handshake_timeout_ms: u64,
    /// On shutdown, how long a connection waits for its running requests to reply
    /// before closing anyway (a stuck device must not hang the server's exit).
    pub shutdown_grace_ms: u64,
    /// Most extents sent in one NBD_REPLY_TYPE_BLOCK_STATUS chunk (the spec caps it at
    /// 2^20; fewer keeps replies small).
    pub max_block_status_extents: usize,
    /// Every write, trim and write-zeroes is treated as if it carried FUA: durable before its
    /// reply. For a server whose process may be replaced under a client that reconnects (qemu's
    /// `reconnect-delay`, `nbd-client -persist`): the client retries only what was never
    /// answered, so a write answered from memory and lost with the process would be gone while
    /// the flush the client sends next, on the new connection, succeeds.
    pub writes_durable_before_reply: bool,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            max_request_bytes: MAX_REQUEST_BYTES_DEFAULT,
            max_connections: 64,
            max_inflight_per_connection: 16,
            max_inflight_bytes_per_connection: 64 * 1024 * 1024,
            max_options_per_handshake: 256,
            max_option_bytes: 64 * 1024,
            handshake_timeout_ms: 30_000,
            shutdown_grace_ms: 10_000,
            max_block_status_extents: 64 * 1024,
            writes_durable_before_reply: false,
        }
    }
}

impl ServerConfig {
    /// Returns a copy with every limit forced into its workable range, so a bad value
    /// degrades to a safe one instead of a hang (e.g. a byte budget smaller than one
    /// request would deadlock that request forever).
    pub fn normalized(&self) -> ServerConfig {
        let max_request_bytes = self.max_request_bytes.clamp(4096, MAX_REQUEST_BYTES_CEILING);
        ServerConfig {
            max_request_bytes,
            max_connections: self.max_connections.clamp(1, 1 << 20),
            max_inflight_per_connection: self.max_inflight_per_connection.clamp(1, 1 << 16),
            // Upper clamp keeps the byte semaphore within tokio's permit limit.
            max_inflight_bytes_per_connection: self
                .max_inflight_bytes_per_connection
                .clamp(max_request_bytes as u64, 1 << 40),
            max_options_per_handshake: self.max_options_per_handshake.max(1),
            max_option_bytes: self.max_option_bytes.clamp(4096, 16 * 1024 * 1024),
            handshake_timeout_ms: self.handshake_timeout_ms.clamp(1, 24 * 3600 * 1000),
            shutdown_grace_ms: self.shutdown_grace_ms.min(24 * 3600 * 1000),
            max_block_status_extents: self.max_block_status_extents.clamp(1, 1 << 20),
            writes_durable_before_reply: self.writes_durable_before_reply,
        }
    }
}
