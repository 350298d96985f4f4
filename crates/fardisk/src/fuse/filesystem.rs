//! The FUSE filesystem: one directory (the root) holding one image file per volume.
//!
//! Metadata requests are answered here on fuser's thread from the provider's volume list,
//! which is read again on every lookup and readdir so that volumes created or destroyed
//! while mounted appear and disappear. Data requests go to [`super::data`].

use std::ffi::OsStr;
use std::io;
use std::sync::Arc;
use std::time::SystemTime;

use fardisk_nbd::{BlockDevice, ExportProvider};
use fuser::{
    BsdFileFlags, Errno, FileHandle, FileType, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, OpenAccMode, OpenFlags, ReplyAttr, ReplyDirectory, ReplyEntry, ReplyOpen,
    ReplyStatfs, Request, TimeOrNow,
};
use parking_lot::Mutex;

use super::attr::AttrContext;
use super::dispatch::Dispatcher;
use super::handles::{HandleTable, OpenFile};
use super::inodes::{InodeTable, VolumeEntry};
use super::options::FuseOptions;

/// Longest file name the kernel accepts (NAME_MAX); longer volume names are not shown.
const NAME_BYTES_MAX: usize = 255;
/// Block size reported by statfs.
const STATFS_BLOCK_BYTES: u32 = 4096;

pub(crate) struct VolumeFs {
    pub(super) provider: Arc<dyn ExportProvider>,
    pub(super) options: FuseOptions,
    pub(super) attrs: AttrContext,
    pub(super) inodes: Mutex<InodeTable>,
    pub(super) handles: Mutex<HandleTable>,
    pub(super) dispatcher: Dispatcher,
}

/// Whether a volume name can be a file name in the mount (the provider may know names,
/// like NBD's default export "", that cannot).
fn is_file_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name.len() <= NAME_BYTES_MAX
        && !name.contains(['/', '\0'])
}

/// O_SYNC and O_DSYNC both ask for data durable before the write returns (O_SYNC
/// contains the O_DSYNC bit on Linux; both are tested for clarity).
pub(super) fn wants_sync_writes(flags: i32) -> bool {
    flags & (libc::O_SYNC | libc::O_DSYNC) != 0
}

impl VolumeFs {
    pub(crate) fn new(
        provider: Arc<dyn ExportProvider>,
        options: FuseOptions,
        attrs: AttrContext,
        dispatcher: Dispatcher,
    ) -> VolumeFs {
        VolumeFs {
            provider,
            inodes: Mutex::new(InodeTable::new(options.volumes_max)),
            handles: Mutex::new(HandleTable::new(options.open_files_max)),
            options,
            attrs,
            dispatcher,
        }
    }

    fn volume_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .provider
            .list()
            .into_iter()
            .map(|info| info.name)
            .filter(|name| is_file_name(name))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// The inode and device of the volume called `name`, if it is listed now.
    fn resolve_name(&self, name: &OsStr) -> Option<(INodeNo, Arc<dyn BlockDevice>)> {
        let name = name.to_str()?;
        let names = self.volume_names();
        if !names.iter().any(|listed| listed == name) {
            return None;
        }
        let ino = self.inodes.lock().ino_for(name, &names)?;
        let device = self.provider.open(name)?;
        Some((ino, device))
    }

    /// The volume behind inode `ino` and its device, if the provider still has it.
    pub(super) fn resolve_ino(&self, ino: INodeNo) -> Option<(VolumeEntry, Arc<dyn BlockDevice>)> {
        let entry = self.inodes.lock().get(ino)?;
        let device = self.provider.open(&entry.name)?;
        Some((entry, device))
    }

    pub(super) fn open_file(&self, fh: FileHandle) -> Result<Arc<OpenFile>, Errno> {
        self.handles.lock().get(fh).ok_or(Errno::EBADF)
    }

    fn image_attr(&self, ino: INodeNo, device: &dyn BlockDevice) -> fuser::FileAttr {
        self.attrs.image(ino, device.size_bytes(), device.preferred_block_bytes())
    }

    fn attr_of(&self, ino: INodeNo, fh: Option<FileHandle>) -> Result<fuser::FileAttr, Errno> {
        if ino == INodeNo::ROOT {
            return Ok(self.attrs.root());
        }
        if let Some(file) = fh.and_then(|fh| self.handles.lock().get(fh)) {
            return Ok(self.image_attr(ino, &*file.device));
        }
        let (_, device) = self.resolve_ino(ino).ok_or(Errno::ENOENT)?;
        Ok(self.image_attr(ino, &*device))
    }

    /// setattr: only what leaves the image as it is (times, a truncate to its own size).
    fn check_setattr(
        &self,
        ino: INodeNo,
        ownership_or_mode: bool,
        size: Option<u64>,
    ) -> Result<fuser::FileAttr, Errno> {
        let attr = self.attr_of(ino, None)?;
        if ownership_or_mode {
            tracing::warn!(ino = ino.0, "fuse: chmod/chown of a volume image refused (EPERM)");
            return Err(Errno::EPERM);
        }
        match size {
            Some(size) if size != attr.size || ino == INodeNo::ROOT => {
                tracing::warn!(
                    ino = ino.0,
                    requested = size,
                    size = attr.size,
                    "fuse: truncate of a volume image refused (EINVAL): its size is the volume's size"
                );
                Err(Errno::EINVAL)
            }
            _ => Ok(attr),
        }
    }

    fn open_image(
        &self,
        ino: INodeNo,
        flags: OpenFlags,
    ) -> Result<(FileHandle, FopenFlags), Errno> {
        if ino == INodeNo::ROOT {
            return Err(Errno::EISDIR);
        }
        let (entry, device) = self.resolve_ino(ino).ok_or(Errno::ENOENT)?;
        if flags.acc_mode() != OpenAccMode::O_RDONLY && device.read_only() {
            return Err(Errno::EROFS);
        }
        let file = OpenFile {
            volume: entry.name,
            device,
            gate: entry.gate,
            sync_writes: wants_sync_writes(flags.0),
        };
        let fh = self.handles.lock().insert(file).ok_or_else(|| {
            tracing::warn!(
                "fuse: {} files already open, open refused (EMFILE)",
                self.options.open_files_max
            );
            Errno::EMFILE
        })?;
        Ok((fh, self.fopen_flags()))
    }

    fn fopen_flags(&self) -> FopenFlags {
        if self.options.direct_io {
            // Parallel direct writes: without it the kernel serialises writes per inode.
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES
        } else {
            // No FOPEN_KEEP_CACHE: the volume may also be written through NBD, so the page
            // cache is dropped on every open.
            FopenFlags::empty()
        }
    }

    fn fill_directory(&self, offset: u64, reply: &mut ReplyDirectory) {
        let names = self.volume_names();
        let mut entries: Vec<(INodeNo, FileType, String)> = vec![
            (INodeNo::ROOT, FileType::Directory, ".".to_owned()),
            (INodeNo::ROOT, FileType::Directory, "..".to_owned()),
        ];
        let mut inodes = self.inodes.lock();
        for name in &names {
            if let Some(ino) = inodes.ino_for(name, &names) {
                entries.push((ino, FileType::RegularFile, name.clone()));
            }
        }
        drop(inodes);
        // The offset of an entry is its index + 1: the kernel resumes after it. A volume
        // created or destroyed between two calls of one listing may shift the rest by one
        // (skipped or repeated once); the next listing is exact.
        for (index, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(ino, index as u64 + 1, kind, name) {
                break;
            }
        }
    }

    fn statfs_totals(&self) -> (u64, u64) {
        let names = self.volume_names();
        let bytes: u64 = names
            .iter()
            .filter_map(|name| self.provider.open(name))
            .map(|device| device.size_bytes())
            .fold(0u64, u64::saturating_add);
        (bytes / u64::from(STATFS_BLOCK_BYTES), names.len() as u64)
    }

    fn configure_kernel(&self, config: &mut KernelConfig) -> io::Result<()> {
        let limit_error = |what: &str, nearest: String| {
            io::Error::other(format!("fuse: {what} refused, nearest {nearest}"))
        };
        config
            .set_max_write(self.options.max_write_bytes)
            .map_err(|nearest| limit_error("max_write", nearest.to_string()))?;
        if let Err(nearest) = config.set_max_readahead(self.options.max_write_bytes) {
            let _ = config.set_max_readahead(nearest);
        }
        config
            .set_max_background(self.options.max_background)
            .map_err(|nearest| limit_error("max_background", nearest.to_string()))?;
        if self.options.writeback_cache {
            // Asked for explicitly: better no mount than a silently different cache mode.
            config.add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    "fuse: kernel lacks FUSE_WRITEBACK_CACHE",
                )
            })?;
        }
        if self.options.async_dio && config.add_capabilities(InitFlags::FUSE_ASYNC_DIO).is_err() {
            tracing::warn!(
                "fuse: kernel lacks FUSE_ASYNC_DIO; direct I/O runs one request at a time"
            );
        }
        // FOPEN_DIRECT_IO files refuse shared mmap unless this is granted (Linux 6.6+); with
        // it, a tool that maps the image still works and msync reaches write/fsync.
        if self.options.direct_io
            && config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP).is_err()
        {
            tracing::info!(
                "fuse: kernel lacks FUSE_DIRECT_IO_ALLOW_MMAP; shared mmap of an image fails"
            );
        }
        Ok(())
    }
}

#[allow(clippy::too_many_arguments)] // the signatures are fuser's
impl fuser::Filesystem for VolumeFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        self.configure_kernel(config)
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent != INodeNo::ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        match self.resolve_name(name) {
            Some((ino, device)) => {
                let attr = self.image_attr(ino, &*device);
                reply.entry(&self.options.attr_ttl, &attr, Generation(0));
            }
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr_of(ino, fh) {
            Ok(attr) => reply.attr(&self.options.attr_ttl, &attr),
            Err(errno) => reply.error(errno),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let ownership_or_mode = mode.is_some() || uid.is_some() || gid.is_some();
        match self.check_setattr(ino, ownership_or_mode, size) {
            Ok(attr) => reply.attr(&self.options.attr_ttl, &attr),
            Err(errno) => reply.error(errno),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.open_image(ino, flags) {
            Ok((fh, fopen_flags)) => reply.opened(fh, fopen_flags),
            Err(errno) => reply.error(errno),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: fuser::ReplyData,
    ) {
        self.read_data(fh, offset, size, reply);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: fuser::WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: fuser::ReplyWrite,
    ) {
        self.write_data(fh, offset, data, flags, reply);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _owner: fuser::LockOwner,
        reply: fuser::ReplyEmpty,
    ) {
        // close() is not a durability point; fsync is. Nothing is buffered here.
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: fuser::ReplyEmpty,
    ) {
        self.handles.lock().remove(fh);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: fuser::ReplyEmpty,
    ) {
        self.sync_data(ino, fh, reply);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if ino != INodeNo::ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if ino != INodeNo::ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        self.fill_directory(offset, &mut reply);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let (blocks, files) = self.statfs_totals();
        let name_bytes_max = NAME_BYTES_MAX as u32;
        reply.statfs(
            blocks,
            0,
            0,
            files,
            0,
            STATFS_BLOCK_BYTES,
            name_bytes_max,
            STATFS_BLOCK_BYTES,
        );
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: fuser::ReplyEmpty,
    ) {
        self.fallocate_data(fh, offset, length, mode, reply);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names() {
        assert!(is_file_name("pg-data_1"));
        for bad in ["", ".", "..", "a/b", "a\0b"] {
            assert!(!is_file_name(bad), "{bad:?}");
        }
        assert!(!is_file_name(&"x".repeat(256)));
    }

    #[test]
    fn sync_flags() {
        assert!(wants_sync_writes(libc::O_RDWR | libc::O_DSYNC));
        assert!(wants_sync_writes(libc::O_WRONLY | libc::O_SYNC));
        assert!(!wants_sync_writes(libc::O_RDWR | libc::O_DIRECT));
    }
}
