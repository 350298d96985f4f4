use super::*;
use fardisk_engine::root::VdevRole;
use serde_json::{json, Value};

fn snap(t: &str) -> SnapshotTarget {
    SnapshotTarget::parse(t).expect("a snapshot name")
}

/// One request of every command.
fn every_request() -> Vec<Request> {
    vec![
        Request::Ping,
        Request::Status,
        Request::Arcstat,
        Request::HotsetSave,
        Request::Sync,
        Request::Export,
        Request::VolumeCreate { name: "pg".into(), size_bytes: 8 << 30 },
        Request::VolumeDestroy { name: "pg".into(), recursive: true },
        Request::VolumeResize { name: "pg".into(), size_bytes: 16 << 30 },
        Request::Get,
        Request::Set { property: "arc_max".into(), value: "16M".into() },
        Request::Scrub { action: ScrubAction::Pause },
        Request::History { limit: 10 },
        Request::SnapshotCreate { target: snap("pg@a") },
        Request::SnapshotDestroy { target: snap("pg@a") },
        Request::SnapshotList,
        Request::Clone { target: snap("pg@a"), name: "pg2".into() },
        Request::Promote { name: "pg2".into() },
        Request::Rollback { target: snap("pg@a"), recursive: false },
        Request::VdevAdd {
            vdev: VdevArg {
                role: VdevRole::Log,
                mirror: true,
                paths: vec!["/a".into(), "/b".into()],
            },
            force: true,
        },
        Request::VdevRemove { path: "/a".into() },
        Request::VdevReplace { old: "/a".into(), new: "/c".into(), force: false },
    ]
}

#[test]
fn every_request_round_trips_as_one_json_line() {
    for request in every_request() {
        let envelope = Envelope { request, cmdline: "fardisk test".into() };
        let line = serde_json::to_string(&envelope).expect("serializes");
        assert!(!line.contains('\n'), "{line}");
        let back: Envelope = serde_json::from_str(&line).expect("parses");
        assert_eq!(back, envelope, "{line}");
    }
}

#[test]
fn the_wire_name_is_the_registered_name() {
    let mut names = Vec::new();
    for request in every_request() {
        let v = serde_json::to_value(&request).expect("serializes");
        assert_eq!(v["cmd"], request.registration().name, "{v}");
        names.push(request.registration().name);
    }
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), every_request().len(), "one sample per command, names unique");
}

#[test]
fn commands_that_change_the_pool_enter_the_history() {
    let history: Vec<&str> = every_request()
        .iter()
        .map(Request::registration)
        .filter(|r| r.history)
        .map(|r| r.name)
        .collect();
    assert_eq!(
        history,
        [
            "volume_create",
            "volume_destroy",
            "volume_resize",
            "set",
            "scrub",
            "snapshot_create",
            "snapshot_destroy",
            "clone",
            "promote",
            "rollback",
            "vdev_add",
            "vdev_remove",
            "vdev_replace"
        ]
    );
}

/// Lines as the CLI wrote them before requests were typed: a daemon still reads them, so a CLI
/// and a daemon of neighbouring versions understand each other.
#[test]
fn the_wire_is_unchanged() {
    let parse = |v: Value| serde_json::from_value::<Envelope>(v).expect("parses").request;
    assert_eq!(parse(json!({"cmd": "ping", "args": null, "cmdline": "fardisk x"})), Request::Ping);
    assert_eq!(parse(json!({"cmd": "status"})), Request::Status);
    assert_eq!(
        parse(
            json!({"cmd": "volume_create", "args": {"name": "pg", "size_bytes": 8u64 << 30}, "cmdline": "fardisk volume create tank/pg 8G"})
        ),
        Request::VolumeCreate { name: "pg".into(), size_bytes: 8 << 30 }
    );
    assert_eq!(
        parse(json!({"cmd": "volume_destroy", "args": {"name": "pg"}})),
        Request::VolumeDestroy { name: "pg".into(), recursive: false }
    );
    assert_eq!(
        parse(json!({"cmd": "scrub", "args": {"action": "stop"}})),
        Request::Scrub { action: ScrubAction::Stop }
    );
    assert_eq!(
        parse(json!({"cmd": "scrub", "args": {}})),
        Request::Scrub { action: ScrubAction::Start }
    );
    assert_eq!(parse(json!({"cmd": "history", "args": {}})), Request::History { limit: 1000 });
    assert_eq!(
        parse(
            json!({"cmd": "vdev_add", "args": {"role": "cache", "mirror": false, "paths": ["/c"], "force": false}})
        ),
        Request::VdevAdd {
            vdev: VdevArg { role: VdevRole::Cache, mirror: false, paths: vec!["/c".into()] },
            force: false
        }
    );
    assert_eq!(
        parse(json!({"cmd": "rollback", "args": {"target": "pg@a", "recursive": true}})),
        Request::Rollback { target: snap("pg@a"), recursive: true }
    );
    let sent = serde_json::to_value(Envelope {
        request: Request::Set { property: "sync".into(), value: "always".into() },
        cmdline: "fardisk set sync=always tank".into(),
    })
    .expect("serializes");
    assert_eq!(
        sent,
        json!({"cmd": "set", "args": {"property": "sync", "value": "always"}, "cmdline": "fardisk set sync=always tank"})
    );
}

#[test]
fn arguments_are_checked_when_read() {
    let bad = |v: Value| serde_json::from_value::<Envelope>(v).is_err();
    assert!(bad(json!({"cmd": "snapshot_create", "args": {"target": "no-at-sign"}})));
    assert!(bad(json!({"cmd": "volume_create", "args": {"name": "pg", "size_bytes": "8G"}})));
    assert!(bad(json!({"cmd": "volume_create", "args": {"name": "pg"}})));
    assert!(bad(json!({"cmd": "vdev_add", "args": {"role": "spare", "paths": ["/a"]}})));
    assert!(bad(json!({"cmd": "scrub", "args": {"action": "faster"}})));
    assert_eq!(
        SnapshotTarget::parse("pg").unwrap_err().to_string(),
        "'pg' is not a snapshot name: use VOLUME@SNAPSHOT"
    );
}
