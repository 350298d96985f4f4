//! `fardisk held` on held records files (crates/engine/src/pool/held.rs): what it prints, what
//! it refuses, and that reading a file costs a bounded amount of memory whatever its size. A
//! held file can be as large as the intent log (gigabytes after a store outage); `held show`
//! used to read it whole and decode every record beside it (316-398 MB resident for files of
//! 180-204 MB). The binary runs as a child process; its peak resident memory is the kernel's
//! count for it (`wait4`'s `ru_maxrss`), which sees a peak however short.

use bytes::Bytes;
use fardisk_engine::pool::{HeldRecord, HeldRecords};
use fardisk_slog::{LogRecord, RecordKind};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A scratch `$FARDISK_HOME` with a `held/` directory, removed when dropped.
struct Home(PathBuf);

impl Home {
    fn new(name: &str) -> Home {
        let dir =
            std::env::temp_dir().join(format!("fardisk-held-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("held")).expect("create the scratch home");
        Home(dir)
    }

    fn held(&self, name: &str) -> PathBuf {
        self.0.join("held").join(name)
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A held file of `writes` write records of `write_bytes` each (every eighth followed by a
/// trim), txgs 10 and up, of volume 1 (`pg`) and volume 2, which the header does not name.
fn held_file(writes: u64, write_bytes: usize) -> HeldRecords {
    let data = Bytes::from(vec![0x5a; write_bytes]);
    let mut records = Vec::new();
    for i in 0..writes {
        let record = |seq, kind, length_bytes, data: Bytes| HeldRecord {
            seq,
            record: LogRecord {
                txg: 10 + i / 64,
                volume_id: 1 + (i % 5 == 4) as u32,
                kind,
                offset_bytes: i * write_bytes as u64,
                length_bytes,
                data,
            },
        };
        let seq = 100 + records.len() as u64;
        records.push(record(seq, RecordKind::Write, write_bytes as u32, data.clone()));
        if i % 8 == 7 {
            records.push(record(seq + 1, RecordKind::Trim, 8192, Bytes::new()));
        }
    }
    HeldRecords {
        pool_guid: 0x1234_5678_9abc_def0_0fed_cba9_8765_4321,
        import_id: 0x5555_6666_7777_8888_9999_0000_1111_2222,
        epoch: 3,
        published_txg: 9,
        open_txg: 10 + writes / 64,
        time_ms: 1_700_000_000_000,
        pool_name: "tank".into(),
        hostname: "host-a".into(),
        reason: "fenced: epoch 4 seen in leases/13".into(),
        volumes: [(1, "pg".to_string())].into_iter().collect(),
        records,
    }
}

/// What a run of the binary did.
struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
    /// Peak resident memory, KiB.
    peak_kib: u64,
}

/// Runs `fardisk ARGS` with `home` as `$FARDISK_HOME` and measures its peak resident memory.
fn fardisk(home: &Home, args: &[&str]) -> Run {
    let out = home.0.join("stdout");
    let err = home.0.join("stderr");
    // Files, not pipes: the child never waits for us to read while we wait for it.
    let child = Command::new(env!("CARGO_BIN_EXE_fardisk"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("FARDISK_HOME", &home.0)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("run fardisk");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of a plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our child, not yet waited for (`child` is never waited on through std,
    // and dropping a `Child` does not wait); `status` and `usage` are valid for writes.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    drop(child);
    Run {
        ok: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        stdout: std::fs::read_to_string(out).expect("stdout"),
        stderr: std::fs::read_to_string(err).expect("stderr"),
        // Linux counts ru_maxrss in KiB.
        peak_kib: usage.ru_maxrss as u64,
    }
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).expect("write the held file");
}

/// Writes `h` as `encode` would, one record at a time: this process must never hold a large
/// file, as a child's peak resident memory counts the parent's from before the `exec` (Linux
/// carries the larger of the two over). The header's only record-dependent field is the count,
/// of fixed width, so it is the header of the same records without their data.
fn write_streamed(path: &Path, h: &HeldRecords) {
    use std::io::Write;
    let empty = HeldRecords { records: Vec::new(), ..h.clone() };
    let header_of = |records: Vec<HeldRecord>| HeldRecords { records, ..empty.clone() };
    let header_len = header_of(Vec::new()).encode().len();
    let dataless = h.records.iter().map(|r| HeldRecord {
        seq: r.seq,
        record: LogRecord { data: Bytes::new(), ..r.record.clone() },
    });
    let header = header_of(dataless.collect()).encode();
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    file.write_all(&header[..header_len]).expect("write the header");
    for r in &h.records {
        let one = header_of(vec![r.clone()]).encode();
        file.write_all(&one[header_len..]).expect("write a record");
    }
    file.flush().expect("flush");
}

/// This process's peak resident memory, KiB.
fn own_peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
    line.split_whitespace().nth(1).and_then(|k| k.parse().ok()).expect("VmHWM in kB")
}

#[test]
fn show_lists_every_record_and_discard_removes_the_file() {
    let home = Home::new("show");
    let h = held_file(20, 4096);
    let path = home.held("tank-small.held");
    write(&path, &h.encode());
    let file = path.to_str().expect("utf-8 path");

    let shown = fardisk(&home, &["held", "show", file]);
    assert!(shown.ok, "held show failed: {}", shown.stderr);
    let headline = "pool tank epoch 3: 22 records, 81920 bytes, txgs 10..10, after published txg 9";
    assert!(shown.stdout.contains(&format!("held:      {headline}\n")), "{}", shown.stdout);
    let lines: Vec<&str> = shown.stdout.lines().collect();
    let table = lines.iter().position(|l| l.trim_start().starts_with("SEQ")).expect("a table");
    assert_eq!(lines.len() - table - 1, h.records.len(), "one line per record");
    assert_eq!(
        lines[table + 1].split_whitespace().collect::<Vec<_>>(),
        ["100", "10", "pg", "write", "0", "4096"]
    );
    assert!(lines.iter().any(|l| l.contains(" trim ")), "{}", shown.stdout);
    assert!(lines.iter().any(|l| l.contains(" #2 ")), "an unnamed volume by its id");

    let json = fardisk(&home, &["held", "show", "--json", file]);
    assert!(json.ok, "held show --json failed: {}", json.stderr);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).expect("show --json is JSON");
    assert_eq!(v["records"].as_array().expect("records").len(), h.records.len());
    assert_eq!(v["records"][0]["volume"], "pg");
    assert_eq!(v["records"][4]["volume"], serde_json::Value::Null);
    assert_eq!(v["summary"]["records"], 22);
    assert_eq!(v["summary"]["data_bytes"], 81920);
    assert_eq!(v["pool_guid"], "123456789abcdef00fedcba987654321");

    let listed = fardisk(&home, &["held", "list"]);
    assert!(listed.ok, "held list failed: {}", listed.stderr);
    assert_eq!(listed.stdout, format!("{file}  {headline}\n"));

    let discarded = fardisk(&home, &["held", "discard", file]);
    assert!(discarded.ok, "held discard failed: {}", discarded.stderr);
    assert_eq!(discarded.stdout, format!("discarded {file} ({headline})\n"));
    assert!(!path.exists(), "the file is gone");
}

/// Every damaged file gets the one line decode gives it, prints nothing else, and is not
/// discarded; `list` says which file is unreadable and goes on.
#[test]
fn a_damaged_file_is_one_line_and_is_not_discarded() {
    let home = Home::new("damaged");
    let good = held_file(20, 4096).encode();
    let mut flipped = good.clone();
    let at = good.len() - 100;
    flipped[at] ^= 0x10;
    let mut trailing = good.clone();
    trailing.extend_from_slice(&[0; 3]);
    let cases = [
        ("flipped", flipped, "record 21 checksum mismatch"),
        ("truncated", good[..good.len() - 4].to_vec(), "truncated at byte"),
        ("trailing", trailing, "3 bytes after the last record"),
    ];
    for (name, bytes, why) in cases {
        let path = home.held(&format!("tank-{name}.held"));
        write(&path, &bytes);
        let file = path.to_str().expect("utf-8 path");
        let expected = format!("{}", HeldRecords::decode(&bytes).expect_err("decode refuses it"));
        assert!(expected.contains(why), "{name}: decode says {expected}");
        for args in [&["held", "show", file][..], &["held", "show", "--json", file]] {
            let run = fardisk(&home, args);
            assert!(!run.ok, "{args:?} of a {name} file succeeded");
            assert_eq!(run.stdout, "", "{args:?} of a {name} file printed before it failed");
            assert_eq!(run.stderr, format!("fardisk: {expected}\n"), "{args:?} of {name}");
        }
        let run = fardisk(&home, &["held", "discard", file]);
        assert!(!run.ok && path.exists(), "discard of a {name} file removed it");
        assert_eq!(run.stderr, format!("fardisk: {expected}\n"), "discard of {name}");
        let run = fardisk(&home, &["held", "list"]);
        assert!(run.stdout.contains(&format!("{file}  unreadable: {expected}\n")), "{name}");
        std::fs::remove_file(&path).expect("remove");
    }
}

/// `held show`, `show --json` and `discard` of a 48 MiB file stay within a fixed amount of
/// memory above what the same command needs for a file of a few records: less than a quarter
/// of the file's size (before: more than twice its size, the file and its decoded records).
#[test]
fn reading_a_large_held_file_takes_bounded_memory() {
    let home = Home::new("large");
    let small = home.held("tank-small.held");
    write(&small, &held_file(4, 4096).encode());
    // 768 writes of 64 KiB: 48 MiB, 864 records.
    let large = home.held("tank-large.held");
    write_streamed(&large, &held_file(768, 64 << 10));
    let size_kib = std::fs::metadata(&large).expect("stat").len() / 1024;
    let base = fardisk(&home, &["held", "show", small.to_str().expect("path")]);
    assert!(base.ok, "held show of a small file failed: {}", base.stderr);
    // Generous beside the 1 MiB read buffer the reader needs, and far below what holding the
    // file (48 MiB) or its records would take.
    let bound_kib = base.peak_kib + size_kib / 4;
    let own = own_peak_kib();
    assert!(own < bound_kib, "this test peaked at {own} KiB: a child's peak cannot be told apart");
    let large_file = large.to_str().expect("path");
    for args in [&["held", "show", large_file][..], &["held", "show", "--json", large_file]] {
        let run = fardisk(&home, args);
        assert!(run.ok, "{args:?} failed: {}", run.stderr);
        eprintln!(
            "{args:?}: peak {} KiB for a {size_kib} KiB file (a small file's: {} KiB)",
            run.peak_kib, base.peak_kib
        );
        assert!(
            run.peak_kib <= bound_kib,
            "{args:?} of a {size_kib} KiB file peaked at {} KiB resident, over {bound_kib} KiB ({} KiB for a small file + a quarter of the file)",
            run.peak_kib,
            base.peak_kib
        );
    }
    let run = fardisk(&home, &["held", "discard", large_file]);
    assert!(run.ok && !large.exists(), "discard failed: {}", run.stderr);
    eprintln!("discard: peak {} KiB", run.peak_kib);
    assert!(run.peak_kib <= bound_kib, "discard peaked at {} KiB, over {bound_kib}", run.peak_kib);
}
