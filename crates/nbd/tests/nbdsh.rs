//! libnbd's Python shell (nbdsh; python3-libnbd) driving individual commands and
//! flags: FLUSH, FUA, TRIM, WRITE_ZEROES (NO_HOLE, FAST_ZERO), CACHE, BLOCK_STATUS,
//! several connections, option-mode negotiation and out-of-range requests.
//! Each script prints results that the Rust side asserts, or fails with an assert.

mod common;

use std::sync::Arc;

use common::*;
use fardisk_nbd::{ExportMap, MemDevice, ServerConfig};

const MIB: u64 = 1 << 20;

/// Runs `body` after connecting `h` to `uri` with base:allocation requested. `URI` in the body is replaced too.
fn script(uri: &str, body: &str) -> String {
    let prelude = "import nbd, errno\nh.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)\nh.connect_uri('URI')\n";
    format!("{prelude}{body}").replace("URI", uri)
}

fn start(size_bytes: u64) -> (Arc<MemDevice>, TestServer) {
    let (device, exports) = mem_export(size_bytes);
    (device, TestServer::start(exports, ServerConfig::default()))
}

#[test]
fn flush_and_fua_reach_the_device() {
    let (device, server) = start(16 * MIB);
    let body = r#"
h.pwrite(b'a' * 4096, 0)
h.pwrite(b'b' * 4096, 4096, nbd.CMD_FLAG_FUA)
h.flush()
assert h.pread(8192, 0) == b'a' * 4096 + b'b' * 4096
"#;
    nbdsh_ok(&script(&server.uri("vol"), body));
    let stats = device.stats();
    assert_eq!(stats.writes, 2);
    assert_eq!(stats.fua_writes, 1);
    assert_eq!(stats.flushes, 1);
}

#[test]
fn trim_punches_a_hole_seen_by_block_status() {
    let (device, server) = start(16 * MIB);
    let body = r#"
h.pwrite(b'x' * 65536, 0)
h.trim(65536, 0)
entries = []
def cb(context, offset, extents, err):
    if context == nbd.CONTEXT_BASE_ALLOCATION:
        entries.extend(extents)
h.block_status(65536, 0, cb)
print(entries[0], entries[1])
"#;
    let stdout = nbdsh_ok(&script(&server.uri("vol"), body));
    // One extent, 64 KiB long, hole|zero (3).
    assert_eq!(stdout.trim(), "65536 3");
    assert_eq!(device.stats().trims, 1);
    assert_eq!(device.allocated_pages(), 0);
}

#[test]
fn write_zeroes_with_and_without_no_hole() {
    let (device, server) = start(16 * MIB);
    let body = r#"
h.pwrite(b'y' * 131072, 0)
h.zero(65536, 0)
h.zero(65536, 65536, nbd.CMD_FLAG_NO_HOLE)
assert h.pread(131072, 0) == bytes(131072)
entries = []
def cb(context, offset, extents, err):
    entries.extend(extents)
h.block_status(131072, 0, cb)
print(' '.join(str(e) for e in entries))
"#;
    let stdout = nbdsh_ok(&script(&server.uri("vol"), body));
    // Hole+zero (3) where trimming was allowed, allocated zero (2) with NO_HOLE.
    assert_eq!(stdout.trim(), "65536 3 65536 2");
    let stats = device.stats();
    assert_eq!(stats.write_zeroes, 2);
    assert_eq!(stats.write_zeroes_no_hole, 1);
}

#[test]
fn fast_zero_succeeds_or_fails_fast_with_enotsup() {
    let (device, server) = start(16 * MIB);
    let uri = server.uri("vol");
    nbdsh_ok(&script(
        &uri,
        "assert h.can_fast_zero()\nh.zero(1048576, 0, nbd.CMD_FLAG_FAST_ZERO)\n",
    ));
    assert_eq!(device.stats().write_zeroes, 1);

    device.set_fast_zero(false);
    let body = r#"
h.pwrite(b'z' * 4096, 0)
try:
    h.zero(4096, 0, nbd.CMD_FLAG_FAST_ZERO)
    print('no error')
except nbd.Error as e:
    print(errno.errorcode.get(e.errno, e.errno))
assert h.pread(4096, 0) == b'z' * 4096, 'a refused fast zero changed the data'
"#;
    let stdout = nbdsh_ok(&script(&uri, body));
    assert_eq!(stdout.trim(), "ENOTSUP");
    // The refused request never reached the device.
    assert_eq!(device.stats().write_zeroes, 1);
}

#[test]
fn cache_reaches_the_device() {
    let (device, server) = start(16 * MIB);
    nbdsh_ok(&script(&server.uri("vol"), "assert h.can_cache()\nh.cache(65536, 0)\n"));
    assert_eq!(device.stats().caches, 1);
}

#[test]
fn multi_conn_flush_is_visible_on_another_connection() {
    let (device, server) = start(16 * MIB);
    let body = r#"
assert h.can_multi_conn()
h2 = nbd.NBD()
h2.connect_uri('URI')
h.pwrite(b'q' * 4096, 8192)
h.flush()
assert h2.pread(4096, 8192) == b'q' * 4096
h2.pwrite(b'r' * 4096, 0, nbd.CMD_FLAG_FUA)
assert h.pread(4096, 0) == b'r' * 4096
h2.shutdown()
"#;
    nbdsh_ok(&script(&server.uri("vol"), body));
    assert_eq!(device.contents(0, 4096).expect("contents"), vec![b'r'; 4096]);
}

#[test]
fn out_of_range_requests_get_the_spec_errors() {
    let (device, server) = start(MIB);
    let body = r#"
h.set_strict_mode(0)
size = h.get_size()
def code(f):
    try:
        f()
        return 'ok'
    except nbd.Error as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def bs():
    h.block_status(4096, size, lambda *a: 0)
results = [
    code(lambda: h.pread(4096, size - 2048)),
    code(lambda: h.pwrite(b'x' * 4096, size - 2048)),
    code(lambda: h.trim(4096, size)),
    code(lambda: h.zero(4096, size)),
    code(lambda: h.cache(4096, size)),
    code(bs),
    code(lambda: h.pread(4096, size - 4096)),
]
print(' '.join(results))
"#;
    let stdout = nbdsh_ok(&script(&server.uri("vol"), body));
    assert_eq!(stdout.trim(), "EINVAL ENOSPC EINVAL ENOSPC EINVAL EINVAL ok");
    assert_eq!(device.stats().writes, 0, "an out-of-range write reached the device");
}

#[test]
fn read_only_export_refuses_writes_with_eperm() {
    let device = Arc::new(MemDevice::new(MIB).with_read_only(true));
    device.fill(0, &[7; 4096]).expect("fill");
    let exports = Arc::new(ExportMap::new().with_export("ro", "", device.clone()));
    let server = TestServer::start(exports, ServerConfig::default());
    let body = r#"
h.set_strict_mode(0)
assert h.is_read_only()
try:
    h.pwrite(b'x' * 4096, 0)
    print('ok')
except nbd.Error as e:
    print(errno.errorcode.get(e.errno, e.errno))
assert h.pread(4096, 0) == bytes([7]) * 4096
"#;
    let stdout = nbdsh_ok(&script(&server.uri("ro"), body));
    assert_eq!(stdout.trim(), "EPERM");
}

#[test]
fn simple_replies_when_structured_replies_are_not_requested() {
    let (_, server) = start(16 * MIB);
    let body = r#"
import nbd, errno
h.set_request_structured_replies(False)
h.connect_uri('URI')
assert not h.get_structured_replies_negotiated()
assert not h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
h.pwrite(b'k' * 8192, 4096)
assert h.pread(16384, 0) == bytes(4096) + b'k' * 8192 + bytes(4096)
h.set_strict_mode(0)
try:
    h.pread(4096, h.get_size())
except nbd.Error as e:
    print(errno.errorcode.get(e.errno, e.errno))
"#;
    let nbdsh = require_nbdsh();
    let stdout = run_ok(&nbdsh, &["-c", &body.replace("URI", &server.uri("vol"))]);
    assert_eq!(stdout.trim(), "EINVAL");
}

#[test]
fn option_mode_list_info_meta_context_and_go() {
    let (_, server) = start(16 * MIB);
    let body = r#"
import nbd
h.set_opt_mode(True)
h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
h.connect_uri('URI')
names = []
h.opt_list(lambda name, description: names.append((name, description)))
print(names)
contexts = []
h.opt_list_meta_context(lambda name: contexts.append(name))
print(contexts)
h.set_export_name('vol')
h.opt_info()
print(h.get_size(), h.get_block_size(nbd.SIZE_MAXIMUM))
h.set_export_name('missing')
try:
    h.opt_info()
    print('info ok')
except nbd.Error as e:
    print('info failed')
h.set_export_name('vol')
h.opt_go()
print(h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION), h.pread(512, 0) == bytes(512))
"#;
    let nbdsh = require_nbdsh();
    let stdout = run_ok(&nbdsh, &["-c", &body.replace("URI", &server.uri("vol"))]);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        vec![
            "[('vol', 'test volume')]",
            "['base:allocation']",
            "16777216 33554432",
            "info failed",
            "True True",
        ]
    );
}

#[test]
fn opt_abort_ends_the_session_politely() {
    let (_, server) = start(MIB);
    let body = r#"
import nbd
h.set_opt_mode(True)
h.connect_uri('URI')
h.opt_abort()
print(h.aio_is_closed())
"#;
    let nbdsh = require_nbdsh();
    let stdout = run_ok(&nbdsh, &["-c", &body.replace("URI", &server.uri("vol"))]);
    assert_eq!(stdout.trim(), "True");
}

#[test]
fn block_status_req_one_returns_a_single_extent() {
    let (device, server) = start(16 * MIB);
    device.fill(0, &[1; 4096]).expect("fill");
    let body = r#"
entries = []
def cb(context, offset, extents, err):
    entries.extend(extents)
h.block_status(1048576, 0, cb, nbd.CMD_FLAG_REQ_ONE)
print(' '.join(str(e) for e in entries))
"#;
    let stdout = nbdsh_ok(&script(&server.uri("vol"), body));
    assert_eq!(stdout.trim(), "4096 0");
}
