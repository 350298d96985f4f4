//! Snapshot tests of what operators read: the text of `status`, `status -v`, `iostat -v` and
//! `arcstat`, rendered from a real daemon's JSON (`daemon/testdata/`) and compared with the files
//! in `cli/snapshots/`. A change of layout shows up as a diff to review; after reviewing, refresh
//! the files with `FARDISK_UPDATE_SNAPSHOTS=1 cargo test -p fardisk --lib snapshot`.

use serde_json::Value;

pub fn status_fixture() -> Value {
    serde_json::from_str(include_str!("../daemon/testdata/status.json")).expect("fixture parses")
}

pub fn arcstat_fixture() -> Value {
    serde_json::from_str(include_str!("../daemon/testdata/arcstat.json")).expect("fixture parses")
}

/// Compares `actual` with `cli/snapshots/NAME`, or rewrites the file when asked to.
pub fn assert_snapshot(name: &str, actual: &str) {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli/snapshots").join(name);
    if std::env::var_os("FARDISK_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, actual).expect("write snapshot");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!("no snapshot {}; create it with FARDISK_UPDATE_SNAPSHOTS=1", path.display())
    });
    if expected != actual {
        panic!("{name} changed; expected:\n{expected}\nactual:\n{actual}\n(if intended: FARDISK_UPDATE_SNAPSHOTS=1 cargo test -p fardisk --lib snapshot)");
    }
}
