//! File attributes of the mount's two kinds of inode: the root directory and a volume image.

use std::time::SystemTime;

use fuser::{FileAttr, FileType, INodeNo};

/// Images are private to the mounting user, like a block device node (0600).
const IMAGE_PERM: u16 = 0o600;
const ROOT_PERM: u16 = 0o755;
/// `st_blocks` is counted in 512-byte units whatever the block size.
const STAT_BLOCK_BYTES: u64 = 512;

/// Who owns the entries, and the time they show (injected; see `FuseOptions::timestamp`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttrContext {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) timestamp: SystemTime,
}

impl AttrContext {
    fn base(&self, ino: INodeNo, kind: FileType, perm: u16) -> FileAttr {
        FileAttr {
            ino,
            size: 0,
            blocks: 0,
            atime: self.timestamp,
            mtime: self.timestamp,
            ctime: self.timestamp,
            crtime: self.timestamp,
            kind,
            perm,
            nlink: 1,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    pub(crate) fn root(&self) -> FileAttr {
        FileAttr { nlink: 2, ..self.base(INodeNo::ROOT, FileType::Directory, ROOT_PERM) }
    }

    /// A volume image: a regular file exactly the volume's size. `blocks` claims the full
    /// size (like a preallocated file), so `du` and `ls -s` show what the volume offers.
    pub(crate) fn image(
        &self,
        ino: INodeNo,
        size_bytes: u64,
        preferred_block_bytes: u32,
    ) -> FileAttr {
        FileAttr {
            size: size_bytes,
            blocks: size_bytes.div_ceil(STAT_BLOCK_BYTES),
            blksize: preferred_block_bytes.max(512),
            ..self.base(ino, FileType::RegularFile, IMAGE_PERM)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_is_a_private_regular_file_of_the_volume_size() {
        let context = AttrContext { uid: 7, gid: 8, timestamp: SystemTime::UNIX_EPOCH };
        let attr = context.image(INodeNo(42), 1 << 30, 4096);
        assert_eq!(attr.kind, FileType::RegularFile);
        assert_eq!(attr.perm, 0o600);
        assert_eq!(attr.size, 1 << 30);
        assert_eq!(attr.blocks, (1 << 30) / 512);
        assert_eq!((attr.uid, attr.gid), (7, 8));
        let root = context.root();
        assert_eq!(root.kind, FileType::Directory);
        assert_eq!(root.ino, INodeNo::ROOT);
    }
}
