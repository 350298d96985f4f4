//! Golden fixtures of the formats the fardisk binary itself writes (docs/format.md "Holder link
//! frame"): the holder ⇄ engine link messages and the holder's state file. Across `fardisk
//! upgrade` a new engine binary reads what an old holder wrote, so these bytes are pinned: the
//! committed files in `tests/fixtures/` must be what today's encoders write from the inputs
//! below, today's decoders must read them back, and every damaged one must be refused.
//!
//! `FARDISK_REGENERATE_FIXTURES=1 cargo test -p fardisk --test golden_formats -- --ignored
//! regenerate_fixtures` writes fixtures that do not exist yet; it never overwrites one. A format
//! change gets a new version and new fixtures beside these.

use fardisk::holder::frame::{self, FRAME_VERSION, LINK_MAGIC, STATE_MAGIC};
use fardisk::holder::link::{self, EngineMessage, Handover, UnmountReply};
use fardisk::holder::restarts::{EngineExit, ExitKind, RestartPolicy};
use fardisk::holder::state::{self, HolderState};
use fardisk_common::golden::{flip_bit, Fixtures};

fn fixtures() -> Fixtures {
    Fixtures::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures"))
}

fn handover() -> Handover {
    Handover {
        holder_pid: 4242,
        generation: 3,
        negotiated: Some((0u8..32).collect()),
        policy: RestartPolicy { restarts_max: 5, window_s: 60 },
        restarts_total: 2,
        upgrades_total: 1,
        crashes_in_window: 1,
        recent: vec![
            EngineExit {
                at_ms: 1_700_000_000_000,
                pid: 4300,
                kind: ExitKind::Upgrade,
                reason: "handed over".into(),
            },
            EngineExit {
                at_ms: 1_700_000_060_000,
                pid: 4301,
                kind: ExitKind::Crash,
                reason: "killed by signal 9".into(),
            },
        ],
    }
}

fn holder_state() -> HolderState {
    HolderState {
        holder_pid: 4242,
        generation: 3,
        restarts: 2,
        upgrades: 1,
        stopped: None,
        last_exit: Some("engine pid 4301 killed by signal 9".into()),
        no_engine_since_ms: None,
        reimport_wait_s: None,
    }
}

/// The good fixtures: (name, bytes today's encoder writes).
fn good() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("holder-link-handover-v1.bin", link::encode_message(&handover()).expect("handover")),
        (
            "holder-link-serving-v1.bin",
            link::encode_message(&EngineMessage::Serving { negotiated: vec![7; 24] })
                .expect("serving"),
        ),
        (
            "holder-link-unmount-reply-v1.bin",
            link::encode_message(&UnmountReply { error: Some("busy".into()) }).expect("reply"),
        ),
        ("holder-state-v1.bin", state::encode(&holder_state()).expect("state")),
    ]
}

/// `bytes` with the version field set to `version` and the checksum made right again: what a
/// newer fardisk would write.
fn with_version(bytes: &[u8], version: u32) -> Vec<u8> {
    let mut out = bytes[..bytes.len() - 8].to_vec();
    out[8..12].copy_from_slice(&version.to_le_bytes());
    let sum = fardisk_common::le::checksum64(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// The damaged fixtures derived from a good one.
fn damaged(stem: &str, good: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut wrong_magic = good.to_vec();
    wrong_magic[..8].copy_from_slice(b"FDHXXXX1");
    vec![
        (format!("{stem}.flipped-bit.bin"), flip_bit(good, 20, 3)),
        (format!("{stem}.truncated.bin"), good[..good.len() - 1].to_vec()),
        (format!("{stem}.wrong-magic.bin"), wrong_magic),
        (format!("{stem}.wrong-version.bin"), with_version(good, FRAME_VERSION + 1)),
    ]
}

#[test]
#[ignore = "writes missing fixtures; run with FARDISK_REGENERATE_FIXTURES=1"]
fn regenerate_fixtures() {
    assert!(Fixtures::regenerating(), "set FARDISK_REGENERATE_FIXTURES=1 to write fixtures");
    for (name, bytes) in good() {
        let stem = name.trim_end_matches(".bin");
        for (n, b) in
            std::iter::once((name.to_string(), bytes.clone())).chain(damaged(stem, &bytes))
        {
            if fixtures().create(&n, &b).expect("write fixture") {
                eprintln!("wrote tests/fixtures/{n} ({} bytes)", b.len());
            }
        }
    }
}

#[test]
fn every_fixture_is_what_todays_encoders_write() {
    for (name, bytes) in good() {
        assert_eq!(
            fixtures().read(name),
            bytes,
            "tests/fixtures/{name} differs from what today's encoder writes: a format change \
             needs a new version and a new fixture, never an edited one"
        );
    }
}

#[test]
fn todays_decoders_read_the_good_fixtures() {
    let f = fixtures();
    let h: Handover = link::decode_message(&f.read("holder-link-handover-v1.bin")).expect("h");
    assert_eq!(serde_json::to_value(&h).unwrap(), serde_json::to_value(handover()).unwrap());
    let m: EngineMessage = link::decode_message(&f.read("holder-link-serving-v1.bin")).expect("m");
    assert_eq!(m, EngineMessage::Serving { negotiated: vec![7; 24] });
    let r: UnmountReply =
        link::decode_message(&f.read("holder-link-unmount-reply-v1.bin")).expect("reply");
    assert_eq!(r, UnmountReply { error: Some("busy".into()) });
    assert_eq!(state::decode(&f.read("holder-state-v1.bin")).expect("state"), holder_state());
    // The frame itself, field by field.
    let bytes = f.read("holder-state-v1.bin");
    assert_eq!(&bytes[..8], STATE_MAGIC);
    assert_eq!(&f.read("holder-link-serving-v1.bin")[..8], LINK_MAGIC);
    assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), 1);
    let len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    assert_eq!(bytes.len(), frame::FRAME_OVERHEAD_BYTES + len);
}

#[test]
fn every_damaged_fixture_is_refused_with_one_line() {
    let f = fixtures();
    for (name, _) in good() {
        let stem = name.trim_end_matches(".bin");
        for damage in ["flipped-bit", "truncated", "wrong-magic", "wrong-version"] {
            let file = format!("{stem}.{damage}.bin");
            let bytes = f.read(&file);
            let why = if stem.starts_with("holder-state") {
                state::decode(&bytes).expect_err(&file)
            } else {
                format!("{:#}", link::decode_message::<serde_json::Value>(&bytes).expect_err(&file))
            };
            assert!(!why.contains('\n'), "{file}: one line: {why}");
            let expected = match damage {
                "flipped-bit" => "checksum mismatch",
                "truncated" => "truncated",
                "wrong-magic" => "wrong magic",
                _ => "format version 2 is newer than this fardisk reads (1)",
            };
            assert!(why.contains(expected), "{file}: {why}");
        }
    }
}
