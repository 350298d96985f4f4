//! Device labels: every log (and cache) device starts with two identical 4 KiB labels naming
//! the pool, the role and the vdev/leg it belongs to, so a wrong, swapped or foreign device
//! is refused by name instead of being written over.
//!
//! ```text
//! off  size  field
//!   0     8  magic "FDSKLABL"
//!   8     2  version (1)
//!  10     1  role (1 = log, 2 = cache)
//!  11     1  pool name length in bytes (<= 64)
//!  12     2  leg index
//!  14     2  leg count
//!  16    16  pool guid
//!  32     8  vdev guid
//!  40     8  ring start (bytes)
//!  48     8  ring end (bytes)
//!  56     8  reserved (0)
//!  64    64  pool name (UTF-8, zero padded)
//! 128  3960  reserved (0)
//! 4088    8  xxh3-64 of bytes 0..4088
//! ```

use crate::aligned::AlignedBuf;
use crate::checksum::checksum64;
use crate::device::LogDevice;
use crate::layout::{BLOCK_SIZE_BYTES, LABEL_OFFSETS_BYTES};
use crate::le::{get_u128, get_u16, get_u64, get_u8, CodecError, Writer};

pub const LABEL_MAGIC: u64 = u64::from_le_bytes(*b"FDSKLABL");
pub const LABEL_VERSION: u16 = 1;
pub const POOL_NAME_MAX_BYTES: usize = 64;
const LABEL_SIZE: usize = BLOCK_SIZE_BYTES as usize;
const CHECKSUM_OFFSET: usize = LABEL_SIZE - 8;
const NAME_OFFSET: usize = 64;

/// What a device is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Role {
    Log,
    Cache,
}

impl Role {
    fn code(self) -> u8 {
        match self {
            Role::Log => 1,
            Role::Cache => 2,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Role::Log),
            2 => Some(Role::Cache),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Role::Log => "log",
            Role::Cache => "cache",
        }
    }
}

/// A verified device label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceLabel {
    pub pool_name: String,
    pub pool_guid: u128,
    pub vdev_guid: u64,
    pub role: Role,
    pub leg_index: u16,
    pub leg_count: u16,
    /// First byte of the data area (the log ring) on this device.
    pub ring_start_bytes: u64,
    /// End of the data area; identical on every leg of a mirror.
    pub ring_end_bytes: u64,
}

/// Why a 4 KiB block is not a usable label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelDecodeError {
    /// No label magic: a blank or foreign device.
    NotALabel,
    /// Label magic present but the content is damaged or from an unknown version.
    Damaged(&'static str),
}

/// The label of a device and how many of its two copies were damaged.
#[derive(Clone, Debug)]
pub struct LabelRead {
    pub label: DeviceLabel,
    pub damaged_copies: u32,
}

impl DeviceLabel {
    /// One-line description for errors: "log device of pool 'tank' (guid 0x…, vdev 0x…, leg 1/2)".
    pub fn describe(&self) -> String {
        format!(
            "{} device of pool '{}' (guid {:#x}, vdev {:#x}, leg {}/{})",
            self.role.name(),
            self.pool_name,
            self.pool_guid,
            self.vdev_guid,
            self.leg_index + 1,
            self.leg_count
        )
    }

    /// Encodes one 4 KiB label copy. Fails when the pool name does not fit.
    pub fn encode(&self) -> Result<AlignedBuf, LabelDecodeError> {
        let name = self.pool_name.as_bytes();
        if name.len() > POOL_NAME_MAX_BYTES {
            return Err(LabelDecodeError::Damaged("pool name longer than 64 bytes"));
        }
        let mut w = Writer::with_capacity(LABEL_SIZE);
        w.u64(LABEL_MAGIC).u16(LABEL_VERSION).u8(self.role.code()).u8(name.len() as u8);
        w.u16(self.leg_index).u16(self.leg_count).u128(self.pool_guid).u64(self.vdev_guid);
        w.u64(self.ring_start_bytes).u64(self.ring_end_bytes).zeros(8);
        debug_assert_eq!(w.len(), NAME_OFFSET);
        w.bytes(name).zeros(CHECKSUM_OFFSET - NAME_OFFSET - name.len()).seal();
        debug_assert_eq!(w.len(), LABEL_SIZE);
        let mut buf = AlignedBuf::zeroed(LABEL_SIZE);
        buf.copy_from_slice(&w.buf);
        // Pair assertion: what we are about to write must decode to what we meant.
        debug_assert_eq!(Self::decode(&buf).as_ref(), Ok(self));
        Ok(buf)
    }

    /// Decodes and verifies one label copy.
    pub fn decode(buf: &[u8]) -> Result<DeviceLabel, LabelDecodeError> {
        if buf.len() < LABEL_SIZE || get_u64(buf, 0)? != LABEL_MAGIC {
            return Err(LabelDecodeError::NotALabel);
        }
        if get_u64(buf, CHECKSUM_OFFSET)? != checksum64(&buf[..CHECKSUM_OFFSET]) {
            return Err(LabelDecodeError::Damaged("label checksum mismatch"));
        }
        if get_u16(buf, 8)? != LABEL_VERSION {
            return Err(LabelDecodeError::Damaged("unknown label version"));
        }
        let role =
            Role::from_code(get_u8(buf, 10)?).ok_or(LabelDecodeError::Damaged("unknown role"))?;
        let name_len = usize::from(get_u8(buf, 11)?);
        if name_len > POOL_NAME_MAX_BYTES {
            return Err(LabelDecodeError::Damaged("pool name length out of range"));
        }
        let name = &buf[NAME_OFFSET..NAME_OFFSET + name_len];
        let pool_name = String::from_utf8(name.to_vec())
            .map_err(|_| LabelDecodeError::Damaged("pool name not UTF-8"))?;
        let label = DeviceLabel {
            pool_name,
            pool_guid: get_u128(buf, 16)?,
            vdev_guid: get_u64(buf, 32)?,
            role,
            leg_index: get_u16(buf, 12)?,
            leg_count: get_u16(buf, 14)?,
            ring_start_bytes: get_u64(buf, 40)?,
            ring_end_bytes: get_u64(buf, 48)?,
        };
        if label.leg_index >= label.leg_count || label.ring_start_bytes >= label.ring_end_bytes {
            return Err(LabelDecodeError::Damaged("label fields out of range"));
        }
        Ok(label)
    }
}

impl From<CodecError> for LabelDecodeError {
    /// Fewer bytes than a label holds: no label (the length check above makes this unreachable).
    fn from(_: CodecError) -> Self {
        LabelDecodeError::NotALabel
    }
}

/// Reads both label copies. `Ok(None)` means the device carries no label at all.
pub fn read_label(device: &dyn LogDevice) -> std::io::Result<Option<LabelRead>> {
    let mut found: Option<DeviceLabel> = None;
    let mut damaged_copies = 0;
    let mut buf = AlignedBuf::zeroed(LABEL_SIZE);
    for offset in LABEL_OFFSETS_BYTES {
        device.read_at(offset, &mut buf)?;
        match DeviceLabel::decode(&buf) {
            Ok(label) => {
                if found.as_ref().is_some_and(|f| *f != label) {
                    damaged_copies += 1;
                }
                found.get_or_insert(label);
            }
            Err(LabelDecodeError::Damaged(_)) => damaged_copies += 1,
            Err(LabelDecodeError::NotALabel) => damaged_copies += 1,
        }
    }
    Ok(found.map(|label| LabelRead { label, damaged_copies }))
}

/// Writes both label copies (not flushed).
pub fn write_label(device: &dyn LogDevice, label: &DeviceLabel) -> std::io::Result<()> {
    let buf = label
        .encode()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{e:?}")))?;
    for offset in LABEL_OFFSETS_BYTES {
        device.write_at(offset, &buf)?;
    }
    Ok(())
}

/// Describes what a device carries for error messages.
pub fn describe_device(device: &dyn LogDevice) -> String {
    match read_label(device) {
        Ok(Some(read)) => read.label.describe(),
        Ok(None) => "no fardisk label".to_string(),
        Err(err) => format!("an unreadable label ({err})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::crash::CrashDevice;

    fn label() -> DeviceLabel {
        DeviceLabel {
            pool_name: "tank".into(),
            pool_guid: 0xdead_beef_0000_0000_1111_2222_3333_4444,
            vdev_guid: 77,
            role: Role::Log,
            leg_index: 1,
            leg_count: 2,
            ring_start_bytes: 16384,
            ring_end_bytes: 1 << 20,
        }
    }

    #[test]
    fn label_round_trip() {
        let encoded = label().encode().expect("encode");
        assert_eq!(DeviceLabel::decode(&encoded), Ok(label()));
        assert!(label().describe().contains("log device of pool 'tank'"));
    }

    #[test]
    fn label_corruption_detected() {
        let mut encoded = label().encode().expect("encode");
        encoded[70] ^= 1;
        assert!(matches!(DeviceLabel::decode(&encoded), Err(LabelDecodeError::Damaged(_))));
        assert_eq!(DeviceLabel::decode(&[0u8; 4096]), Err(LabelDecodeError::NotALabel));
    }

    #[test]
    fn one_damaged_copy_is_survivable() {
        let device = CrashDevice::new("/l", 1 << 20);
        write_label(&device, &label()).expect("write");
        device.corrupt(100, 8);
        let read = read_label(&device).expect("io").expect("label");
        assert_eq!(read.label, label());
        assert_eq!(read.damaged_copies, 1);
        let blank = CrashDevice::new("/b", 1 << 20);
        assert!(read_label(&blank).expect("io").is_none());
    }
}
