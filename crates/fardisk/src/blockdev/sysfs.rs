//! What sysfs shows of bound loop devices: `/sys/block/loopN/loop/backing_file` (the image's
//! path as the kernel resolves it now) and `loop/dio` (whether direct I/O is on). The `loop/`
//! directory exists only while the device is bound. The parsers take the text, so the tests
//! need no kernel; [`bound_loops`] takes the root, so they need no real /sys either.

use std::path::{Path, PathBuf};

/// Where the kernel lists block devices.
pub const SYS_BLOCK: &str = "/sys/block";

/// One bound loop device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundLoop {
    pub number: u32,
    /// `loop/backing_file`: a file on a mount that was detached since reads as its path below
    /// that mount's root (`/VOLUME`); one whose file was unlinked ends in " (deleted)".
    pub backing_file: PathBuf,
    pub direct_io: bool,
}

/// `loopN` → N; anything else (`loop-control`, partitions `loopNpM`, other disks) → None.
pub fn loop_number(device_name: &str) -> Option<u32> {
    let digits = device_name.strip_prefix("loop")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The contents of `loop/backing_file`: the path, without the newline sysfs adds.
pub fn parse_backing_file(text: &str) -> Option<PathBuf> {
    let path = text.strip_suffix('\n').unwrap_or(text);
    (!path.is_empty()).then(|| PathBuf::from(path))
}

/// The contents of a sysfs boolean (`loop/dio`, `loop/autoclear`): "1\n" or "0\n".
pub fn parse_flag(text: &str) -> Option<bool> {
    match text.trim() {
        "1" => Some(true),
        "0" => Some(false),
        _ => None,
    }
}

/// Reads one device's `loop/` directory; None when it is not bound (or went meanwhile).
pub fn read_bound(sys_block: &Path, number: u32) -> Option<BoundLoop> {
    let dir = sys_block.join(format!("loop{number}")).join("loop");
    let backing_file =
        parse_backing_file(&std::fs::read_to_string(dir.join("backing_file")).ok()?)?;
    let direct_io =
        std::fs::read_to_string(dir.join("dio")).ok().and_then(|t| parse_flag(&t)).unwrap_or(false);
    Some(BoundLoop { number, backing_file, direct_io })
}

/// Every bound loop device, by number.
pub fn bound_loops(sys_block: &Path) -> Vec<BoundLoop> {
    let Ok(entries) = std::fs::read_dir(sys_block) else { return Vec::new() };
    let mut out: Vec<BoundLoop> = entries
        .flatten()
        .filter_map(|e| loop_number(e.file_name().to_str()?))
        .filter_map(|n| read_bound(sys_block, n))
        .collect();
    out.sort_by_key(|b| b.number);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_loop_devices_have_numbers() {
        assert_eq!(loop_number("loop0"), Some(0));
        assert_eq!(loop_number("loop117"), Some(117));
        for other in ["loop", "loop-control", "loop3p1", "vda", "nbd0", "loopx", "zram0"] {
            assert_eq!(loop_number(other), None, "{other}");
        }
    }

    #[test]
    fn backing_file_and_flags_parse_as_sysfs_writes_them() {
        assert_eq!(parse_backing_file("/mnt/fardisk/pg\n"), Some(PathBuf::from("/mnt/fardisk/pg")));
        // A path with spaces or a " (deleted)" suffix is kept whole: callers compare exactly.
        assert_eq!(
            parse_backing_file("/tmp/a b/pg (deleted)\n"),
            Some(PathBuf::from("/tmp/a b/pg (deleted)"))
        );
        assert_eq!(parse_backing_file("\n"), None);
        assert_eq!(parse_flag("1\n"), Some(true));
        assert_eq!(parse_flag("0\n"), Some(false));
        assert_eq!(parse_flag("yes\n"), None);
    }

    #[test]
    fn a_fake_sys_block_lists_bound_devices_only() {
        let root = std::env::temp_dir().join(format!("fardisk-sysfs-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let bound = |n: u32, file: &str, dio: &str| {
            let dir = root.join(format!("loop{n}/loop"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("backing_file"), file).unwrap();
            std::fs::write(dir.join("dio"), dio).unwrap();
        };
        bound(7, "/mnt/f/pg\n", "1\n");
        bound(2, "/v\n", "0\n");
        std::fs::create_dir_all(root.join("loop3")).unwrap(); // free: no loop/ directory
        std::fs::create_dir_all(root.join("loop2p1/loop")).unwrap(); // a partition
        std::fs::create_dir_all(root.join("vda")).unwrap();
        let found = bound_loops(&root);
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(
            found,
            vec![
                BoundLoop { number: 2, backing_file: "/v".into(), direct_io: false },
                BoundLoop { number: 7, backing_file: "/mnt/f/pg".into(), direct_io: true },
            ]
        );
    }
}
