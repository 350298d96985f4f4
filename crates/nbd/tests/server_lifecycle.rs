//! Server-level behaviour: pipelining and its bounds, connection limits, shutdown,
//! the unix socket's permissions and stale-file handling, the handshake deadline,
//! and TCP.

// Real time is the point here: real sockets, real shutdown grace periods.
#![allow(clippy::disallowed_methods)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::raw_client::{reply_error, RawClient, RawReply};
use common::*;
use fardisk_nbd::wire::Command;
use fardisk_nbd::{
    serve_tcp_listener, serve_unix, BlockDevice, DeviceError, ExportMap, Extent, MemDevice,
    ServerConfig,
};
use tokio::sync::{watch, Notify};

const MIB: u64 = 1 << 20;

/// Wraps a MemDevice: a read at offset 0 waits until a write at offset 4096 has
/// happened, and every operation records how many run at once.
struct GatedDevice {
    inner: MemDevice,
    gate: Notify,
    running: AtomicUsize,
    running_max: AtomicUsize,
    op_delay: Duration,
}

impl GatedDevice {
    fn new(op_delay: Duration) -> GatedDevice {
        GatedDevice {
            inner: MemDevice::new(4 * MIB),
            gate: Notify::new(),
            running: AtomicUsize::new(0),
            running_max: AtomicUsize::new(0),
            op_delay,
        }
    }

    async fn tracked<T>(&self, op: impl std::future::Future<Output = T>) -> T {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.running_max.fetch_max(now, Ordering::SeqCst);
        if !self.op_delay.is_zero() {
            tokio::time::sleep(self.op_delay).await;
        }
        let result = op.await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        result
    }
}

#[async_trait::async_trait]
impl BlockDevice for GatedDevice {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    async fn read(&self, offset: u64, length_bytes: u32) -> Result<Bytes, DeviceError> {
        self.tracked(async {
            if offset == 0 {
                self.gate.notified().await;
            }
            self.inner.read(offset, length_bytes).await
        })
        .await
    }
    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), DeviceError> {
        self.tracked(async {
            let result = self.inner.write(offset, data, fua).await;
            if offset == 4096 {
                self.gate.notify_one();
            }
            result
        })
        .await
    }
    async fn flush(&self) -> Result<(), DeviceError> {
        self.inner.flush().await
    }
    async fn trim(&self, offset: u64, length_bytes: u32) -> Result<(), DeviceError> {
        self.inner.trim(offset, length_bytes).await
    }
    async fn write_zeroes(
        &self,
        offset: u64,
        length_bytes: u32,
        may_trim: bool,
        fua: bool,
    ) -> Result<(), DeviceError> {
        self.inner.write_zeroes(offset, length_bytes, may_trim, fua).await
    }
    async fn cache(&self, offset: u64, length_bytes: u32) -> Result<(), DeviceError> {
        self.inner.cache(offset, length_bytes).await
    }
    async fn block_status(
        &self,
        offset: u64,
        length_bytes: u32,
    ) -> Result<Vec<Extent>, DeviceError> {
        self.inner.block_status(offset, length_bytes).await
    }
}

fn gated_server(op_delay: Duration, config: ServerConfig) -> (Arc<GatedDevice>, TestServer) {
    let device = Arc::new(GatedDevice::new(op_delay));
    let exports = Arc::new(ExportMap::new().with_export("vol", "", device.clone()));
    (device, TestServer::start(exports, config))
}

#[test]
fn pipelined_requests_complete_out_of_order() {
    let (_, server) = gated_server(Duration::ZERO, ServerConfig::default());
    let mut client = RawClient::open(&server.socket, "vol", false);
    // The read cannot finish until the write after it has run: a server that handled
    // one request at a time would hang here (and the client's read timeout fails it).
    client.request(Command::Read, 0, 1, 0, 4096);
    client.write(2, 4096, &[8; 4096]);
    assert_eq!(client.read_simple(0), RawReply::Simple { error: 0, cookie: 2, data: vec![] });
    match client.read_simple(4096) {
        RawReply::Simple { error: 0, cookie: 1, data } => assert_eq!(data.len(), 4096),
        other => panic!("expected the read reply, got {other:?}"),
    }
}

#[test]
fn inflight_requests_are_bounded_per_connection() {
    let config = ServerConfig { max_inflight_per_connection: 2, ..ServerConfig::default() };
    let (device, server) = gated_server(Duration::from_millis(5), config);
    let mut client = RawClient::open(&server.socket, "vol", false);
    let requests = 20u64;
    for cookie in 0..requests {
        client.write(cookie, 8192 + cookie * 4096, &[1; 4096]);
    }
    let mut cookies: Vec<u64> = (0..requests).map(|_| client.read_simple(0).cookie()).collect();
    cookies.sort();
    assert_eq!(cookies, (0..requests).collect::<Vec<_>>());
    let running_max = device.running_max.load(Ordering::SeqCst);
    assert!((1..=2).contains(&running_max), "{running_max} requests ran at once, limit 2");
}

#[test]
fn connections_beyond_the_limit_are_refused() {
    let (_, exports) = mem_export(MIB);
    let config = ServerConfig { max_connections: 1, ..ServerConfig::default() };
    let server = TestServer::start(exports, config);
    // The harness's readiness probe may hold the only slot for a moment: retry.
    let mut first = RawClient::open_retrying(&server.socket, "vol");
    let mut second = std::os::unix::net::UnixStream::connect(&server.socket).expect("connect");
    second.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    let mut buffer = [0u8; 18];
    let read = std::io::Read::read(&mut second, &mut buffer).unwrap_or(0);
    assert_eq!(read, 0, "a connection over the limit got a greeting");
    // The first connection is unaffected; once it ends, a new one is served.
    first.request(Command::Read, 0, 1, 0, 512);
    assert_eq!(reply_error(&first.read_simple(512)), 0);
    first.request(Command::Disconnect, 0, 2, 0, 0);
    assert!(first.is_closed());
    // Once the server has seen the first connection go, its slot is reused.
    let mut third = RawClient::open_retrying(&server.socket, "vol");
    third.request(Command::Read, 0, 3, 0, 512);
    assert_eq!(reply_error(&third.read_simple(512)), 0);
}

#[test]
fn shutdown_closes_connections_and_removes_the_socket() {
    let (_, exports) = mem_export(MIB);
    let server = TestServer::start(exports, ServerConfig::default());
    let socket = server.socket.clone();
    let mut in_transmission = RawClient::open(&socket, "vol", false);
    let mut in_handshake = RawClient::connect(&socket);
    server.stop().expect("serve_unix returned an error");
    assert!(in_transmission.is_closed());
    assert!(in_handshake.is_closed());
    assert!(!socket.exists(), "socket file left behind");
}

#[test]
fn unix_socket_is_owner_only() {
    let (_, exports) = mem_export(MIB);
    let server = TestServer::start(exports, ServerConfig::default());
    let mode = std::fs::metadata(&server.socket).expect("stat socket").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn stale_socket_is_replaced() {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&socket).expect("bind"));
    assert!(socket.exists(), "precondition: stale socket file exists");
    let (_, exports) = mem_export(MIB);
    let server = TestServer::start_at(dir, socket, exports, ServerConfig::default());
    let mut client = RawClient::open(&server.socket, "vol", false);
    client.request(Command::Read, 0, 1, 0, 512);
    assert_eq!(reply_error(&client.read_simple(512)), 0);
}

fn serve_once(path: &std::path::Path) -> std::io::Result<()> {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (_, exports) = mem_export(MIB);
    let (_sender, shutdown) = watch::channel(false);
    runtime.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(20),
            serve_unix(path, exports, ServerConfig::default(), shutdown),
        )
        .await
        .expect("serve_unix should fail at once")
    })
}

#[test]
fn live_socket_and_regular_file_are_not_clobbered() {
    let (_, exports) = mem_export(MIB);
    let server = TestServer::start(exports, ServerConfig::default());
    let error = serve_once(&server.socket).expect_err("second server on a live socket");
    assert_eq!(error.kind(), std::io::ErrorKind::AddrInUse);
    let mut client = RawClient::open(&server.socket, "vol", false);
    client.request(Command::Read, 0, 1, 0, 512);
    assert_eq!(reply_error(&client.read_simple(512)), 0);

    let file = server.dir.path().join("not-a-socket");
    std::fs::write(&file, b"precious").expect("write file");
    let error = serve_once(&file).expect_err("server on a regular file");
    assert_eq!(error.kind(), std::io::ErrorKind::AlreadyExists);
    assert_eq!(std::fs::read(&file).expect("read file"), b"precious");
}

#[test]
fn idle_handshake_times_out() {
    let (_, exports) = mem_export(MIB);
    let config = ServerConfig { handshake_timeout_ms: 100, ..ServerConfig::default() };
    let server = TestServer::start(exports, config);
    let mut client = RawClient::connect_raw(&server.socket);
    assert!(client.is_closed(), "an idle handshake was kept open");
}

#[test]
fn tcp_listener_serves_nbdinfo() {
    let nbdinfo = require_tool("nbdinfo", "libnbd-bin");
    let (device, exports) = mem_export(8 * MIB);
    device.fill(0, &[1; 4096]).expect("fill");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let listener =
        runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind loopback");
    let port = listener.local_addr().expect("local addr").port();
    let (sender, shutdown) = watch::channel(false);
    let server =
        runtime.spawn(serve_tcp_listener(listener, exports, ServerConfig::default(), shutdown));
    let uri = format!("nbd://127.0.0.1:{port}/vol");
    let size = run_ok(&nbdinfo, &["--size", &uri]);
    assert_eq!(size.trim(), (8 * MIB).to_string());
    let map = run_ok(&nbdinfo, &["--map", &uri]);
    assert!(map.lines().next().unwrap_or_default().contains("4096"), "map: {map}");
    sender.send(true).expect("signal shutdown");
    runtime.block_on(server).expect("server task").expect("serve_tcp_listener result");
}

#[test]
fn shutdown_is_bounded_when_a_device_request_is_stuck() {
    let config = ServerConfig { shutdown_grace_ms: 200, ..ServerConfig::default() };
    let (_, server) = gated_server(Duration::ZERO, config);
    let mut client = RawClient::open(&server.socket, "vol", false);
    // This read waits for a write that never comes: the device is stuck.
    client.request(Command::Read, 0, 1, 0, 4096);
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(server.stop());
    });
    let result = receiver
        .recv_timeout(Duration::from_secs(20))
        .expect("shutdown hung behind a stuck device request");
    result.expect("serve_unix returned an error");
    assert!(client.is_closed());
}
