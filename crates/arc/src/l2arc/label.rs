//! The cache-device label: who the device belongs to and how its ring is laid out. Two
//! identical copies sit in the first two 4 KiB sectors so one torn or damaged sector cannot
//! orphan the device.
//!
//! ```text
//! 0   u64  magic "FDL2LABL"
//! 8   u32  version (2; 1 = the packed log-block layout, see `LabelReject::OldVersion`)
//! 12  u32  role (1 = cache)
//! 16  u128 pool_guid
//! 32  u64  device_guid
//! 40  u32  log_block_bytes
//! 44  u32  slot_count
//! 48  u64  ring_offset_bytes (8192)
//! 56  u64  checksum: xxh3_64(bytes 0..56)
//! 64..4096 zero
//! ```

use crate::codec::{checksum64_parts, CodecError, Reader, Writer};

const LABEL_MAGIC: u64 = u64::from_le_bytes(*b"FDL2LABL");
const LABEL_VERSION: u32 = 2;
/// Devices formatted before log blocks took whole 4 KiB units (format version 1). Such a label
/// still names its pool (so `destroy` clears it) but its ring cannot be rebuilt.
const LABEL_VERSION_PACKED: u32 = 1;
/// Role code of a cache device (log devices use another role in the same label family).
pub(crate) const ROLE_CACHE: u32 = 1;
pub(crate) const LABEL_BYTES: usize = 64;
/// Each label copy owns one 4 KiB sector.
pub(crate) const LABEL_SLOT_BYTES: u64 = 4096;
pub(crate) const LABEL_COPIES: u64 = 2;
/// The log-block ring starts after both label copies.
pub(crate) const RING_OFFSET_BYTES: u64 = LABEL_SLOT_BYTES * LABEL_COPIES;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Label {
    pub(crate) pool_guid: u128,
    pub(crate) device_guid: u64,
    pub(crate) log_block_bytes: u32,
    pub(crate) slot_count: u32,
}

impl Label {
    pub(crate) fn encode(&self) -> [u8; LABEL_BYTES] {
        let mut w = Writer::with_capacity(LABEL_BYTES);
        w.u64(LABEL_MAGIC).u32(LABEL_VERSION).u32(ROLE_CACHE).u128(self.pool_guid);
        w.u64(self.device_guid).u32(self.log_block_bytes).u32(self.slot_count);
        w.u64(RING_OFFSET_BYTES);
        debug_assert_eq!(w.len(), 56);
        w.seal(); // xxh3_64 of bytes 0..56
        let mut buf = [0u8; LABEL_BYTES];
        buf.copy_from_slice(&w.buf);
        // Pair assertion: verify right before the bytes leave for the device.
        debug_assert_eq!(Label::decode(&buf), Ok(*self));
        buf
    }

    /// Parses and verifies one label copy.
    pub(crate) fn decode(buf: &[u8]) -> Result<Label, String> {
        match Self::decode_any_version(buf) {
            Ok((label, LABEL_VERSION)) => Ok(label),
            Ok((_, version)) => Err(format!("unsupported version {version}")),
            Err(reason) => Err(reason),
        }
    }

    /// Parses and verifies one label copy of this or the previous format version; returns the
    /// label and its version.
    pub(crate) fn decode_any_version(buf: &[u8]) -> Result<(Label, u32), String> {
        if buf.len() < LABEL_BYTES {
            return Err(format!("label copy is {} bytes", buf.len()));
        }
        let mut r = Reader::new(buf, "cache label");
        let magic = r.u64().map_err(short)?;
        if magic != LABEL_MAGIC {
            return Err(format!("bad magic {magic:#018x}"));
        }
        let version = r.u32().map_err(short)?;
        if version != LABEL_VERSION && version != LABEL_VERSION_PACKED {
            return Err(format!("unsupported version {version}"));
        }
        let role = r.u32().map_err(short)?;
        let pool_guid = r.u128().map_err(short)?;
        let device_guid = r.u64().map_err(short)?;
        let log_block_bytes = r.u32().map_err(short)?;
        let slot_count = r.u32().map_err(short)?;
        let ring_offset = r.u64().map_err(short)?;
        let stored = r.u64().map_err(short)?;
        let computed = checksum64_parts(&[&buf[..56]]);
        if stored != computed {
            return Err(format!("checksum mismatch ({stored:#x} != {computed:#x})"));
        }
        if role != ROLE_CACHE {
            return Err(format!("role {role} is not a cache device"));
        }
        if ring_offset != RING_OFFSET_BYTES {
            return Err(format!("unexpected ring offset {ring_offset}"));
        }
        Ok((Label { pool_guid, device_guid, log_block_bytes, slot_count }, version))
    }

    /// Picks the first valid copy from the two label sectors.
    pub(crate) fn decode_either(first: &[u8], second: &[u8]) -> Result<Label, String> {
        match Self::decode_either_any_version(first, second)? {
            (label, LABEL_VERSION) => Ok(label),
            (_, version) => Err(format!("unsupported version {version}")),
        }
    }

    /// [`Self::decode_either`] that also accepts a label of the previous format version.
    pub(crate) fn decode_either_any_version(
        first: &[u8],
        second: &[u8],
    ) -> Result<(Label, u32), String> {
        Label::decode_any_version(first).or_else(|first_err| {
            Label::decode_any_version(second)
                .map_err(|second_err| format!("{first_err}; {second_err}"))
        })
    }

    /// Whether `version` is the previous format's, whose devices are reformatted at open.
    pub(crate) fn is_old_version(version: u32) -> bool {
        version == LABEL_VERSION_PACKED
    }
}

/// Fewer bytes than the label's fields (unreachable after the length check).
fn short(e: CodecError) -> String {
    e.to_string()
}

/// The pool a cache device belongs to, from its first 8 KiB (both label copies); None when
/// neither copy is a valid cache label. Lets `destroy` clear only its own pool's devices.
pub fn cache_label_pool_guid(first_8k: &[u8]) -> Option<u128> {
    let slot = LABEL_SLOT_BYTES as usize;
    if first_8k.len() < 2 * slot {
        return None;
    }
    Label::decode_either_any_version(&first_8k[..slot], &first_8k[slot..2 * slot])
        .ok()
        .map(|(l, _)| l.pool_guid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label() -> Label {
        Label {
            pool_guid: 0x1234_5678_9abc_def0_1122_3344_5566_7788,
            device_guid: 42,
            log_block_bytes: 1 << 20,
            slot_count: 100,
        }
    }

    #[test]
    fn round_trip() {
        assert_eq!(Label::decode(&label().encode()), Ok(label()));
    }

    #[test]
    fn golden_label_is_pinned() {
        // Format version 2, docs/format/l2arc.md: a change here must come with a new version.
        let hex: String = label().encode().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, GOLDEN_LABEL_V2);
    }

    const GOLDEN_LABEL_V2: &str = "46444c324c41424c02000000010000008877665544332211f0debc9a785634122a00000000000000000010006400000000200000000000004a0ced2fcc3195f9";

    #[test]
    fn any_flipped_byte_is_rejected() {
        let buf = label().encode();
        for i in 0..LABEL_BYTES {
            let mut bad = buf;
            bad[i] ^= 1;
            assert!(Label::decode(&bad).is_err(), "flip at {i} accepted");
        }
    }

    #[test]
    fn a_version_1_label_is_recognised_but_not_accepted() {
        let mut old = label().encode();
        old[8..12].copy_from_slice(&1u32.to_le_bytes());
        let sum = checksum64_parts(&[&old[..56]]);
        old[56..].copy_from_slice(&sum.to_le_bytes());
        assert_eq!(Label::decode_any_version(&old), Ok((label(), 1)));
        assert!(Label::decode(&old).unwrap_err().contains("version 1"));
        assert!(Label::is_old_version(1) && !Label::is_old_version(2));
        let mut sectors = vec![0u8; 8192];
        sectors[..64].copy_from_slice(&old);
        assert_eq!(cache_label_pool_guid(&sectors), Some(label().pool_guid), "destroy clears it");
    }

    #[test]
    fn second_copy_rescues_a_damaged_first() {
        let good = label().encode();
        let mut bad = good;
        bad[20] ^= 0xff;
        assert_eq!(Label::decode_either(&bad, &good), Ok(label()));
        assert!(Label::decode_either(&bad, &bad).is_err());
    }
}
