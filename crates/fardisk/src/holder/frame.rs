//! The frame around every holder ⇄ engine link message and around the holder's state file
//! (docs/format.md "Holder link frame"). Across `fardisk upgrade` a new engine binary reads
//! what an old holder wrote (and the reverse), so both carry magic, a format version and a
//! checksum, verified right after reading and right before writing; a frame of a newer version
//! is refused with one line that says so, never guessed at.
//!
//! Layout (little-endian):
//! ```text
//! 0   8  magic: "FDHLINK1" (link message) or "FDHSTAT1" (state file)
//! 8   4  format version (1)
//! 12  4  payload length N
//! 16  N  payload: one JSON value (fields added, never renamed, within a version)
//! -   8  xxh3-64 of every byte before it
//! ```

use fardisk_engine::codec::{checksum64, Reader, Writer};

/// Magic of a link message.
pub const LINK_MAGIC: &[u8; 8] = b"FDHLINK1";
/// Magic of the holder's state file.
pub const STATE_MAGIC: &[u8; 8] = b"FDHSTAT1";
/// The frame version this binary writes and the newest it reads.
pub const FRAME_VERSION: u32 = 1;
/// Bytes of a frame around its payload: header (16) + checksum (8).
pub const FRAME_OVERHEAD_BYTES: usize = 24;

/// Why a frame was refused: one line, naming what it was meant to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameError(pub String);

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FrameError {}

/// `payload` framed under `magic`. The checksum is computed here, right before the bytes leave.
pub fn encode(magic: &[u8; 8], payload: &[u8]) -> Vec<u8> {
    let mut w = Writer::with_capacity(FRAME_OVERHEAD_BYTES + payload.len());
    w.bytes(magic).u32(FRAME_VERSION).u32(payload.len() as u32).bytes(payload);
    w.seal();
    w.into_inner()
}

/// The payload of a frame, after checking magic, version, length and checksum (in the order
/// that gives the most useful line: a newer version is named as such even if its layout moved).
pub fn decode<'a>(
    magic: &[u8; 8],
    what: &'static str,
    bytes: &'a [u8],
) -> Result<&'a [u8], FrameError> {
    let refuse = |why: String| FrameError(format!("{what}: {why}"));
    let mut r = Reader::new(bytes, what);
    let found = r.bytes(8).map_err(|e| refuse(e.why()))?;
    if found != magic {
        return Err(refuse(format!(
            "wrong magic {:?} (expected {:?}): not a fardisk {what}",
            String::from_utf8_lossy(found),
            String::from_utf8_lossy(magic)
        )));
    }
    let version = r.u32().map_err(|e| refuse(e.why()))?;
    if version > FRAME_VERSION {
        return Err(refuse(format!(
            "format version {version} is newer than this fardisk reads ({FRAME_VERSION}); run the same fardisk version for the holder and the engine (restart the holder with `fardisk export` + `fardisk import --holder`)"
        )));
    }
    if version == 0 {
        return Err(refuse("format version 0 is not a version fardisk ever wrote".into()));
    }
    let len = r.u32().map_err(|e| refuse(e.why()))? as usize;
    let payload = r.bytes(len).map_err(|e| refuse(e.why()))?;
    let body_len = r.position();
    let sum = r.u64().map_err(|e| refuse(e.why()))?;
    if r.remaining() != 0 {
        return Err(refuse(format!("{} bytes after the checksum", r.remaining())));
    }
    let want = checksum64(&bytes[..body_len]);
    if sum != want {
        return Err(refuse(format!(
            "checksum mismatch (stored {sum:#018x}, computed {want:#018x})"
        )));
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fardisk_common::golden::flip_bit;

    #[test]
    fn a_frame_round_trips_and_every_damage_is_refused() {
        let framed = encode(LINK_MAGIC, br#"{"a":1}"#);
        assert_eq!(framed.len(), FRAME_OVERHEAD_BYTES + 7);
        assert_eq!(decode(LINK_MAGIC, "link", &framed).expect("good"), br#"{"a":1}"#);
        for at in 0..framed.len() {
            let bad = flip_bit(&framed, at, (at % 8) as u8);
            assert!(decode(LINK_MAGIC, "link", &bad).is_err(), "flip at byte {at} accepted");
        }
        for len in 0..framed.len() {
            assert!(decode(LINK_MAGIC, "link", &framed[..len]).is_err(), "truncated to {len}");
        }
        let e = decode(STATE_MAGIC, "state", &framed).expect_err("other magic");
        assert!(e.0.contains("wrong magic"), "{e}");
    }

    #[test]
    fn a_newer_version_is_refused_by_name_even_with_a_good_checksum() {
        let mut w = Writer::with_capacity(64);
        w.bytes(LINK_MAGIC).u32(FRAME_VERSION + 1).u32(2).bytes(b"{}");
        w.seal();
        let e = decode(LINK_MAGIC, "holder link message", &w.into_inner()).expect_err("newer");
        assert!(e.0.contains("format version 2 is newer than this fardisk reads (1)"), "{e}");
        assert!(!e.0.contains('\n'), "one line: {e}");
    }
}
