//! File attributes of the mount's two kinds of inode: the root directory and a volume image.

use std::time::SystemTime;

use fardisk_fuse::abi::{self, Attr};

/// Images are private to the mounting user, like a block device node (0600).
const IMAGE_PERM: u32 = 0o600;
const ROOT_PERM: u32 = 0o755;
/// `st_blocks` is counted in 512-byte units whatever the block size.
const STAT_BLOCK_BYTES: u64 = 512;
/// Directory entry types (DT_DIR, DT_REG) as READDIR carries them.
pub(crate) const DT_DIR: u32 = 4;
pub(crate) const DT_REG: u32 = 8;

/// Who owns the entries, and the time they show (injected; see `FuseOptions::timestamp`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttrContext {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) timestamp: SystemTime,
}

impl AttrContext {
    fn base(&self, ino: u64, mode: u32) -> Attr {
        let since_epoch = self.timestamp.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        let (secs, nsec) = (since_epoch.as_secs(), since_epoch.subsec_nanos());
        Attr {
            ino,
            atime: secs,
            mtime: secs,
            ctime: secs,
            atimensec: nsec,
            mtimensec: nsec,
            ctimensec: nsec,
            mode,
            nlink: 1,
            uid: self.uid,
            gid: self.gid,
            blksize: 4096,
            ..Attr::default()
        }
    }

    pub(crate) fn root(&self) -> Attr {
        Attr { nlink: 2, ..self.base(abi::ROOT_ID, libc::S_IFDIR | ROOT_PERM) }
    }

    /// A volume image: a regular file exactly the volume's size. `blocks` claims the full
    /// size (like a preallocated file), so `du` and `ls -s` show what the volume offers.
    pub(crate) fn image(&self, ino: u64, size_bytes: u64, preferred_block_bytes: u32) -> Attr {
        Attr {
            size: size_bytes,
            blocks: size_bytes.div_ceil(STAT_BLOCK_BYTES),
            blksize: preferred_block_bytes.max(512),
            ..self.base(ino, libc::S_IFREG | IMAGE_PERM)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_is_a_private_regular_file_of_the_volume_size() {
        let context = AttrContext { uid: 7, gid: 8, timestamp: SystemTime::UNIX_EPOCH };
        let attr = context.image(42, 1 << 30, 4096);
        assert_eq!(attr.mode & libc::S_IFMT, libc::S_IFREG);
        assert_eq!(attr.mode & 0o7777, 0o600);
        assert_eq!(attr.size, 1 << 30);
        assert_eq!(attr.blocks, (1 << 30) / 512);
        assert_eq!((attr.uid, attr.gid), (7, 8));
        let root = context.root();
        assert_eq!(root.mode & libc::S_IFMT, libc::S_IFDIR);
        assert_eq!(root.ino, abi::ROOT_ID);
    }
}
