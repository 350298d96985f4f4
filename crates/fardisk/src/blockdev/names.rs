//! The names a block device goes by: its stable path `/dev/fardisk/POOL/VOLUME` (a symlink to
//! `/dev/loopN`, as zvols appear under /dev/zvol/POOL/VOLUME) and the marker fardisk writes
//! into the device's `lo_file_name`, by which an engine recognises the devices a predecessor
//! attached.
//!
//! A path is made only of names that pass the engine's rule (letters, digits, `-_.:`, starting
//! with a letter, at most 64): no `/`, and never `.` or `..`, so no pool or volume name can
//! point a path outside `/dev/fardisk/POOL/`. The rule is checked here again (and every
//! component verified) rather than trusted, because these paths are created and removed as root.

use std::path::{Component, Path, PathBuf};

/// Where the stable paths live.
pub const DEV_DIR: &str = "/dev/fardisk";

/// `DEV_DIR/POOL`, or why the name cannot have one.
pub fn pool_dir(dev_dir: &Path, pool: &str) -> Result<PathBuf, String> {
    checked_join(dev_dir, &[pool])
}

/// `DEV_DIR/POOL/VOLUME`, or why the names cannot have one.
pub fn stable_path(dev_dir: &Path, pool: &str, volume: &str) -> Result<PathBuf, String> {
    checked_join(dev_dir, &[pool, volume])
}

fn checked_join(dev_dir: &Path, names: &[&str]) -> Result<PathBuf, String> {
    let mut path = dev_dir.to_path_buf();
    for name in names {
        fardisk_engine::pool::check_pool_name(name).map_err(|e| e.to_string())?;
        // Belt and braces: exactly one plain component per name.
        let mut parts = Path::new(name).components();
        match (parts.next(), parts.next()) {
            (Some(Component::Normal(p)), None) if p == *name => path.push(name),
            _ => return Err(format!("invalid name '{name}': not a single path component")),
        }
    }
    Ok(path)
}

/// What goes into `lo_file_name` (63 bytes at most): `fardisk:POOL/VOLUME`, or when that is
/// too long `fardisk:` and a 64-bit FNV-1a hash of `POOL/VOLUME` in hex. Together with the
/// device and inode of the backing file it tells an engine which devices are its pool's.
pub fn marker(pool: &str, volume: &str) -> String {
    let full = format!("fardisk:{pool}/{volume}");
    if full.len() <= super::loopdev::LO_NAME_BYTES_MAX {
        return full;
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in format!("{pool}/{volume}").bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("fardisk:{hash:016x}")
}

/// The volume's image file in the mount directory.
pub fn image_path(mount_dir: &Path, volume: &str) -> PathBuf {
    mount_dir.join(volume)
}

/// The volume whose image `backing_file` (as sysfs shows it) is, in `mount_dir`.
pub fn volume_of_backing_file<'a>(mount_dir: &Path, backing_file: &'a Path) -> Option<&'a str> {
    let name = backing_file.strip_prefix(mount_dir).ok()?.to_str()?;
    fardisk_engine::pool::check_pool_name(name).ok()?;
    Some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_paths_stay_inside_the_pools_directory() {
        let dev = Path::new(DEV_DIR);
        assert_eq!(stable_path(dev, "tank", "pg").unwrap(), PathBuf::from("/dev/fardisk/tank/pg"));
        assert_eq!(
            stable_path(dev, "t-1", "v.2:a_b").unwrap(),
            PathBuf::from("/dev/fardisk/t-1/v.2:a_b")
        );
        let too_long = "v".repeat(65);
        for bad in [
            "..",
            ".",
            "../etc",
            "a/b",
            "/abs",
            "",
            "pg/..",
            "x\0y",
            "-rf",
            ".hidden",
            "a b",
            too_long.as_str(),
        ] {
            assert!(stable_path(dev, "tank", bad).is_err(), "volume {bad:?} must be refused");
            assert!(stable_path(dev, bad, "pg").is_err(), "pool {bad:?} must be refused");
            assert!(pool_dir(dev, bad).is_err(), "pool {bad:?} must be refused");
        }
        // Whatever passes has exactly two more plain components than the directory.
        let p = stable_path(dev, "a", "b").unwrap();
        assert_eq!(p.parent().and_then(|d| d.parent()), Some(dev));
    }

    #[test]
    fn markers_fit_lo_file_name_and_differ_per_volume() {
        assert_eq!(marker("tank", "pg"), "fardisk:tank/pg");
        let long = marker(&"p".repeat(64), &"v".repeat(64));
        assert!(long.len() <= 63 && long.starts_with("fardisk:"), "{long}");
        assert_ne!(long, marker(&"p".repeat(64), &"w".repeat(64)));
        assert_eq!(long, marker(&"p".repeat(64), &"v".repeat(64)), "stable across calls");
        let edge = format!("fardisk:{}/{}", "p".repeat(27), "v".repeat(27));
        assert_eq!(edge.len(), 63);
        assert_eq!(marker(&"p".repeat(27), &"v".repeat(27)), edge);
    }

    #[test]
    fn backing_files_map_to_volumes_of_the_mount_only() {
        let m = Path::new("/mnt/f");
        assert_eq!(volume_of_backing_file(m, Path::new("/mnt/f/pg")), Some("pg"));
        assert_eq!(volume_of_backing_file(m, Path::new("/mnt/f/pg@snap")), None);
        assert_eq!(volume_of_backing_file(m, Path::new("/mnt/f/a/b")), None);
        assert_eq!(volume_of_backing_file(m, Path::new("/mnt/g/pg")), None);
        assert_eq!(volume_of_backing_file(m, Path::new("/pg")), None);
        assert_eq!(volume_of_backing_file(m, Path::new("/mnt/f/pg (deleted)")), None);
    }
}
