//! Detection of volatile log devices: a log on tmpfs, ramfs or a RAM disk does not survive a
//! reboot, which makes the "durable" acknowledgement of a sync write a lie (seed 003: a pool
//! whose RAM-disk log vanished at reboot hung). The log still works; status flags it.

use std::path::Path;

const TMPFS_MAGIC: u64 = 0x0102_1994;
const RAMFS_MAGIC: u64 = 0x8584_58f6;

/// True when `path` lives on tmpfs/ramfs, or is a RAM block device (/dev/ram*, /dev/zram*).
pub fn is_volatile_path(path: &Path) -> bool {
    let resolved = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    if is_block_device(&resolved) {
        return is_ram_block_device(&resolved);
    }
    matches!(statfs_type(&resolved), Some(TMPFS_MAGIC) | Some(RAMFS_MAGIC))
}

fn is_block_device(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).map(|m| m.file_type().is_block_device()).unwrap_or(false)
}

/// Block devices live in /dev, which is itself devtmpfs, so statfs cannot be used for them.
fn is_ram_block_device(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.starts_with("ram") || name.starts_with("zram") || name.starts_with("brd")
}

fn statfs_type(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs writes into a zeroed struct we own; the path is NUL terminated.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above: `stat` is a valid, writable statfs and `c_path` a NUL-terminated string.
    let rc = unsafe { libc::statfs(c_path.as_ptr(), &mut stat) };
    if rc != 0 {
        return None;
    }
    // f_type is a signed word on some targets; the magic numbers are 32-bit.
    #[allow(clippy::unnecessary_cast)]
    Some((stat.f_type as u64) & 0xffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ram_block_device_names() {
        assert!(is_ram_block_device(Path::new("/dev/ram0")));
        assert!(is_ram_block_device(Path::new("/dev/zram1")));
        assert!(!is_ram_block_device(Path::new("/dev/nvme0n1p3")));
    }

    #[test]
    fn dev_shm_is_volatile_when_present() {
        let shm = Path::new("/dev/shm");
        if statfs_type(shm) == Some(TMPFS_MAGIC) {
            assert!(is_volatile_path(shm));
        }
    }
}
