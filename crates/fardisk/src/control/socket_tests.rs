use super::*;
use fardisk_engine::ErrorKind;

#[test]
fn unknown_and_malformed_requests_are_bad_input() {
    let e = parse_request(r#"{"cmd": "frobnicate", "cmdline": ""}"#).unwrap_err();
    assert_eq!(e, ControlError::bad_input("unknown request 'frobnicate'"));
    let e = parse_request("not json").unwrap_err();
    assert!(e.kind == ErrorKind::BadInput && e.message.starts_with("malformed request: "), "{e:?}");
    let e = parse_request(r#"{"cmd": "volume_create", "args": {"name": "pg"}}"#).unwrap_err();
    assert!(e.message.contains("size_bytes"), "{e:?}");
}

#[test]
fn replies_carry_the_error_kind() {
    for kind in [
        ErrorKind::RetryLater,
        ErrorKind::BadInput,
        ErrorKind::DataDamaged,
        ErrorKind::Fenced,
        ErrorKind::Unavailable,
        ErrorKind::Bug,
    ] {
        let reply = Reply::from_result(Err(ControlError::new(kind, "why")));
        let line = serde_json::to_string(&reply).expect("serializes");
        let back: Reply = serde_json::from_str(&line).expect("parses");
        assert_eq!(back.into_result(), Err(ControlError::new(kind, "why")), "{line}");
    }
    let fenced =
        serde_json::to_value(Reply::from_result(Err(ControlError::new(ErrorKind::Fenced, "x"))))
            .expect("serializes");
    assert_eq!(
        fenced,
        serde_json::json!({"ok": false, "data": null, "error": "x", "kind": "fenced"})
    );
    // A daemon that predates `kind`.
    let old: Reply =
        serde_json::from_str(r#"{"ok": false, "data": null, "error": "gone"}"#).expect("parses");
    assert_eq!(old.into_result(), Err(ControlError::new(ErrorKind::Unavailable, "gone")));
    let ok: Reply =
        serde_json::from_str(r#"{"ok": true, "data": {"txg": 7}, "error": ""}"#).expect("parses");
    assert_eq!(ok.into_result(), Ok(serde_json::json!({"txg": 7})));
}

#[test]
fn an_engine_error_keeps_its_kind() {
    let e: ControlError = fardisk_engine::Error::Fenced("another importer".into()).into();
    assert_eq!(e, ControlError::new(ErrorKind::Fenced, "pool is fenced: another importer"));
    let chained =
        anyhow::Error::new(fardisk_engine::Error::BadInput("no".into())).context("adding");
    assert_eq!(ControlError::from_anyhow(&chained, ErrorKind::Bug).kind, ErrorKind::BadInput);
    let plain = anyhow::anyhow!("something else");
    assert_eq!(
        ControlError::from_anyhow(&plain, ErrorKind::Unavailable).kind,
        ErrorKind::Unavailable
    );
}

/// Over a real unix socket, as the CLI and the daemon talk: the daemon's failure reaches the
/// client with its kind and its message.
#[tokio::test]
async fn a_fenced_daemon_answer_reaches_the_client_as_fenced() {
    let dir = std::env::temp_dir().join(format!("fardisk-control-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let socket = dir.join("tank.sock");
    let _ = std::fs::remove_file(&socket);
    let listener = tokio::net::UnixListener::bind(&socket).expect("bind");
    let server = tokio::spawn(async move {
        for _ in 0..2 {
            let (stream, _) = listener.accept().await.expect("accept");
            let (r, mut w) = stream.into_split();
            let mut reader = BufReader::new(r.take(LINE_BYTES_MAX as u64));
            let envelope = read_request(&mut reader).await.expect("a line").expect("parses");
            let reply = match envelope.request {
                Request::Ping => Reply::from_result(Ok(serde_json::json!({"pid": 1}))),
                other => Reply::from_result(Err(ControlError::new(
                    ErrorKind::Fenced,
                    format!("{} refused: pool is fenced", other.registration().name),
                ))),
            };
            write_reply(&mut w, &reply).await.expect("reply");
        }
    });
    assert!(is_alive(&socket).await);
    let e = call(&socket, Request::Sync).await.expect_err("the daemon refuses");
    let control = e.downcast_ref::<ControlError>().expect("a control error");
    assert_eq!(control.kind, ErrorKind::Fenced);
    assert_eq!(super::super::one_line(&e), "sync refused: pool is fenced");
    server.await.expect("server");
    let _ = std::fs::remove_dir_all(&dir);
}
