//! The mounted directory: what it lists, how images look, what is refused, and that
//! unmounting leaves nothing behind. Real kernel; needs root and /dev/fuse.

mod fuse_support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use fardisk::fuse::FuseOptions;
use fardisk_nbd::MemDevice;
use fuse_support::{mounted_at, open_rw, statvfs, Mounted, TestProvider};

const MIB: u64 = 1 << 20;

fn names_in(dir: &std::path::Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .collect()
}

fn two_volume_provider() -> Arc<TestProvider> {
    let provider = Arc::new(TestProvider::default());
    provider.add("alpha", Arc::new(MemDevice::new(MIB)));
    provider.add("beta", Arc::new(MemDevice::new(3 * MIB + 512)));
    provider
}

#[test]
fn each_volume_is_a_private_regular_file_of_its_size() {
    let mounted = Mounted::new("list", two_volume_provider(), FuseOptions::default());
    assert_eq!(
        names_in(&mounted.dir.path),
        BTreeSet::from(["alpha".to_owned(), "beta".to_owned()])
    );
    let alpha = std::fs::metadata(mounted.image("alpha")).expect("stat alpha");
    let beta = std::fs::metadata(mounted.image("beta")).expect("stat beta");
    assert!(alpha.is_file() && beta.is_file());
    assert_eq!(alpha.len(), MIB);
    assert_eq!(beta.len(), 3 * MIB + 512);
    assert_eq!(alpha.permissions().mode() & 0o7777, 0o600);
    assert_eq!(alpha.uid(), 0);
    assert_ne!(alpha.ino(), beta.ino());
    let root = std::fs::metadata(&mounted.dir.path).expect("stat root");
    assert!(root.is_dir());
    assert!(std::fs::metadata(mounted.image("gamma")).is_err(), "no such volume");
}

#[test]
fn inode_numbers_are_stable_across_remounts() {
    let provider = two_volume_provider();
    let mut first = Mounted::new("ino", provider.clone(), FuseOptions::default());
    let ino_before = std::fs::metadata(first.image("beta")).expect("stat").ino();
    assert_eq!(std::fs::metadata(first.image("beta")).expect("stat").ino(), ino_before);
    first.unmount();
    let second = Mounted::new("ino", provider, FuseOptions::default());
    assert_eq!(std::fs::metadata(second.image("beta")).expect("stat").ino(), ino_before);
}

#[test]
fn volumes_created_and_destroyed_while_mounted_come_and_go() {
    let options = FuseOptions { attr_ttl: Duration::ZERO, ..FuseOptions::default() };
    let mounted = Mounted::new("live", two_volume_provider(), options);
    mounted.provider.add("gamma", Arc::new(MemDevice::new(2 * MIB)));
    assert!(names_in(&mounted.dir.path).contains("gamma"));
    assert_eq!(std::fs::metadata(mounted.image("gamma")).expect("stat gamma").len(), 2 * MIB);
    mounted.provider.remove("alpha");
    assert!(!names_in(&mounted.dir.path).contains("alpha"));
    let gone = std::fs::metadata(mounted.image("alpha")).expect_err("alpha was destroyed");
    assert_eq!(gone.raw_os_error(), Some(libc::ENOENT));
}

#[test]
fn explicit_unmount_and_drop_both_leave_nothing_mounted() {
    let mut mounted = Mounted::new("unmount", two_volume_provider(), FuseOptions::default());
    let path = mounted.dir.path.clone();
    assert!(mounted_at(&path), "mounted while the FuseMount lives");
    mounted.unmount();
    assert!(!mounted_at(&path), "explicit unmount");

    let dropped = Mounted::new("drop", two_volume_provider(), FuseOptions::default());
    let path = dropped.dir.path.clone();
    assert!(mounted_at(&path));
    drop(dropped);
    assert!(!mounted_at(&path), "drop unmounts");
}

#[test]
fn unmount_while_busy_fails_and_can_be_retried() {
    let mut mounted = Mounted::new("busy", two_volume_provider(), FuseOptions::default());
    let file = open_rw(&mounted.image("alpha"), 0);
    let mount = mounted.mount.as_mut().expect("mounted");
    let busy = mount.unmount().expect_err("an open image keeps the mount busy");
    assert_eq!(busy.raw_os_error(), Some(libc::EBUSY), "{busy}");
    assert!(mounted_at(&mounted.dir.path), "still mounted after a refused unmount");
    let mut check = [0u8; 4];
    (&file).read_exact(&mut check).expect("the mount still serves after a refused unmount");
    drop(file);
    mounted.unmount();
    assert!(!mounted_at(&mounted.dir.path));
}

#[test]
fn resizing_and_chmod_are_refused_same_size_truncate_is_fine() {
    let mounted = Mounted::new("setattr", two_volume_provider(), FuseOptions::default());
    let file = open_rw(&mounted.image("alpha"), 0);
    file.set_len(MIB).expect("truncate to the volume's own size");
    let grow = file.set_len(2 * MIB).expect_err("cannot grow a volume image");
    assert_eq!(grow.raw_os_error(), Some(libc::EINVAL));
    let shrink = file.set_len(0).expect_err("cannot shrink a volume image");
    assert_eq!(shrink.raw_os_error(), Some(libc::EINVAL));
    let chmod =
        std::fs::set_permissions(mounted.image("alpha"), std::fs::Permissions::from_mode(0o644))
            .expect_err("chmod refused");
    assert_eq!(chmod.raw_os_error(), Some(libc::EPERM));
    let truncating_open =
        std::fs::OpenOptions::new().write(true).truncate(true).open(mounted.image("alpha"));
    assert!(truncating_open.is_err(), "O_TRUNC would destroy the volume");
    assert_eq!(std::fs::metadata(mounted.image("alpha")).expect("stat").len(), MIB);
    let create = std::fs::File::create(mounted.dir.path.join("new-file"));
    assert!(create.is_err(), "the directory only holds volumes");
}

#[test]
fn statfs_counts_every_volume() {
    let mounted = Mounted::new("statfs", two_volume_provider(), FuseOptions::default());
    let (block_bytes, blocks, files) = statvfs(&mounted.dir.path);
    assert_eq!(block_bytes, 4096);
    assert_eq!(blocks, (MIB + 3 * MIB + 512) / 4096);
    assert_eq!(files, 2);
}

#[test]
fn device_errors_reach_the_caller_as_errno() {
    let provider = Arc::new(TestProvider::default());
    provider.add("readonly", Arc::new(MemDevice::new(MIB).with_read_only(true)));
    // Two pages of space in a 1 MiB volume: a full pool.
    provider.add("full", Arc::new(MemDevice::new(MIB).with_page_limit(2)));
    let mounted =
        Mounted::new("errno", provider, FuseOptions { direct_io: true, ..FuseOptions::default() });

    let readonly =
        std::fs::OpenOptions::new().read(true).write(true).open(mounted.image("readonly"));
    assert_eq!(readonly.expect_err("EROFS").raw_os_error(), Some(libc::EROFS));
    let mut reader =
        std::fs::File::open(mounted.image("readonly")).expect("read-only open is fine");
    let mut buf = vec![0u8; 4096];
    reader.read_exact(&mut buf).expect("read");

    let mut full = open_rw(&mounted.image("full"), 0);
    full.write_all(&[1u8; 8192]).expect("two pages fit");
    let no_space = full.write_all(&[1u8; 8192]).expect_err("the third page does not");
    assert_eq!(no_space.raw_os_error(), Some(libc::ENOSPC));

    let past_end =
        std::os::unix::fs::FileExt::write_at(&full, b"x", MIB).expect_err("past the end");
    assert_eq!(past_end.raw_os_error(), Some(libc::ENOSPC));
    let mut tail = [0u8; 16];
    let read_at_end =
        std::os::unix::fs::FileExt::read_at(&full, &mut tail, MIB - 4).expect("read at end");
    assert_eq!(read_at_end, 4, "reads stop at the end of the volume");
}

#[test]
fn o_direct_open_works_in_both_modes() {
    for direct_io in [true, false] {
        let options = FuseOptions { direct_io, ..FuseOptions::default() };
        let (mounted, _device) = Mounted::with_mem_volume("odirect", "vol", MIB, options);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(mounted.image("vol"));
        assert!(file.is_ok(), "O_DIRECT open with direct_io={direct_io}: {:?}", file.err());
    }
}

/// Runs `program args` as user nobody; returns whether it succeeded.
fn succeeds_as_nobody(program: &str, args: &[&std::ffi::OsStr]) -> bool {
    Command::new("runuser")
        .args(["-u", "nobody", "--", program])
        .args(args)
        .output()
        .expect("run runuser (util-linux)")
        .status
        .success()
}

#[test]
fn allow_other_opens_the_directory_but_images_stay_private() {
    let private = Mounted::new("private", two_volume_provider(), FuseOptions::default());
    assert!(
        !succeeds_as_nobody("ls", &[private.dir.path.as_os_str()]),
        "without allow_other only the owner may look"
    );

    let options = FuseOptions { allow_other: true, ..FuseOptions::default() };
    let shared = Mounted::new("shared", two_volume_provider(), options);
    assert!(
        succeeds_as_nobody("ls", &[shared.dir.path.as_os_str()]),
        "allow_other lets others list volumes"
    );
    let image = shared.image("alpha");
    assert!(
        !succeeds_as_nobody("head", &["-c1".as_ref(), image.as_os_str()]),
        "0600 images stay private"
    );
}
