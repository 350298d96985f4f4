//! A store that does not answer fails a request within the engine's own time, not the HTTP
//! client's: the client's retries are bounded (`client_retry` in objstore/url.rs), so the
//! engine's retry budget (30 s for a read) decides how long a read waits. With the client's
//! defaults (10 retries within 3 minutes) one request to a silent store took about 3 minutes.
//! Its own test binary: it sets the S3 environment of its process.

// Real time is the point here: the store outage is a real one, waited out in real time.
#![allow(clippy::disallowed_methods)]

use fardisk_engine::objstore::{open_store_url, StoreErrorKind};
use std::time::{Duration, Instant};

/// A silent store costs one request timeout (30 s, object_store's default) and no retry after
/// the 10 s retry window; the client's defaults retried for 180 s.
const SILENT_GIVES_UP_WITHIN: Duration = Duration::from_secs(90);
/// A refused connection costs 2 quick retries.
const REFUSED_GIVES_UP_WITHIN: Duration = Duration::from_secs(20);

fn s3_env(port: u16) {
    std::env::set_var("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"));
    std::env::set_var("AWS_ACCESS_KEY_ID", "fardisk-test");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "fardisk-test-secret");
    std::env::set_var("AWS_REGION", "us-east-1");
}

async fn timed_get(what: &str) -> Duration {
    let store = open_store_url("s3://nobody-home/pool", false)
        .expect("an s3 URL opens without contacting the store");
    let started = Instant::now();
    let got = store.get("roots/0000000000000001").await;
    let took = started.elapsed();
    let e = got.expect_err("nothing answers there");
    eprintln!("{what}: GET failed after {took:?}: {e}");
    assert_eq!(e.kind, StoreErrorKind::Transient, "{what}: an unreachable store is transient: {e}");
    took
}

/// One test, so the two cases do not race on the environment.
#[tokio::test]
async fn an_unreachable_s3_endpoint_fails_a_request_in_bounded_time() {
    // A port that was just free: bound, read and released, so connecting to it is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    s3_env(port);
    let took = timed_get("refused").await;
    assert!(took < REFUSED_GIVES_UP_WITHIN, "a GET against a refused port took {took:?}");

    // A listener that accepts and never answers: a store that hangs.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
    s3_env(silent.local_addr().expect("its address").port());
    let took = timed_get("silent").await;
    drop(silent);
    assert!(took < SILENT_GIVES_UP_WITHIN, "a GET against a silent store took {took:?}");
}
