//! The FUSE filesystem: one directory (the root) holding one image file per volume.
//!
//! Metadata requests are answered here on the transport thread from the provider's volume list,
//! which is read again on every lookup and readdir so that volumes created or destroyed
//! while mounted appear and disappear. Data requests go to [`super::data`].

use std::sync::Arc;

use fardisk_fuse::abi::{self, fopen, init_flags, Attr, Kstatfs};
use fardisk_fuse::{DirBuf, Errno, Filesystem, InitOptions, KernelInit, Operation, Reply, Request};
use fardisk_nbd::{BlockDevice, ExportProvider};
use parking_lot::Mutex;

use super::attr::{AttrContext, DT_DIR, DT_REG};
use super::dispatch::Dispatcher;
use super::handles::{HandleTable, OpenFile};
use super::inodes::{InodeTable, VolumeEntry};
use super::options::FuseOptions;

/// Longest file name the kernel accepts (NAME_MAX); longer volume names are not shown.
const NAME_BYTES_MAX: usize = 255;
/// Block size reported by statfs.
const STATFS_BLOCK_BYTES: u32 = 4096;
const ROOT: u64 = abi::ROOT_ID;

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
    fn resolve_name(&self, name: &[u8]) -> Option<(u64, Arc<dyn BlockDevice>)> {
        let name = std::str::from_utf8(name).ok()?;
        let names = self.volume_names();
        if !names.iter().any(|listed| listed == name) {
            return None;
        }
        let ino = self.inodes.lock().ino_for(name, &names)?;
        let device = self.provider.open(name)?;
        Some((ino, device))
    }

    /// The volume behind inode `ino` and its device, if the provider still has it.
    pub(super) fn resolve_ino(&self, ino: u64) -> Option<(VolumeEntry, Arc<dyn BlockDevice>)> {
        let entry = self.inodes.lock().get(ino)?;
        let device = self.provider.open(&entry.name)?;
        Some((entry, device))
    }

    pub(super) fn open_file(&self, fh: u64) -> Result<Arc<OpenFile>, Errno> {
        self.handles.lock().get(fh).ok_or(Errno::EBADF)
    }

    fn image_attr(&self, ino: u64, device: &dyn BlockDevice) -> Attr {
        self.attrs.image(ino, device.size_bytes(), device.preferred_block_bytes())
    }

    fn attr_of(&self, ino: u64, fh: Option<u64>) -> Result<Attr, Errno> {
        if ino == ROOT {
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
        ino: u64,
        ownership_or_mode: bool,
        size: Option<u64>,
    ) -> Result<Attr, Errno> {
        let attr = self.attr_of(ino, None)?;
        if ownership_or_mode {
            tracing::warn!(ino, "fuse: chmod/chown of a volume image refused (EPERM)");
            return Err(Errno::EPERM);
        }
        match size {
            Some(size) if size != attr.size || ino == ROOT => {
                tracing::warn!(
                    ino,
                    requested = size,
                    size = attr.size,
                    "fuse: truncate of a volume image refused (EINVAL): its size is the volume's size"
                );
                Err(Errno::EINVAL)
            }
            _ => Ok(attr),
        }
    }

    fn open_image(&self, ino: u64, flags: u32) -> Result<(u64, u32), Errno> {
        if ino == ROOT {
            return Err(Errno::EISDIR);
        }
        let (entry, device) = self.resolve_ino(ino).ok_or(Errno::ENOENT)?;
        if flags as i32 & libc::O_ACCMODE != libc::O_RDONLY && device.read_only() {
            return Err(Errno::EROFS);
        }
        let file = OpenFile {
            volume: entry.name,
            device,
            gate: entry.gate,
            sync_writes: wants_sync_writes(flags as i32),
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

    fn fopen_flags(&self) -> u32 {
        // Nothing is buffered here, so close() needs no FLUSH round trip.
        if self.options.direct_io {
            // Parallel direct writes: without it the kernel serialises writes per inode.
            fopen::DIRECT_IO | fopen::PARALLEL_DIRECT_WRITES | fopen::NOFLUSH
        } else {
            // No FOPEN_KEEP_CACHE: the volume may also be written through NBD, so the page
            // cache is dropped on every open.
            fopen::NOFLUSH
        }
    }

    fn fill_directory(&self, offset: u64, dir: &mut DirBuf) {
        let names = self.volume_names();
        let mut entries: Vec<(u64, u32, String)> =
            vec![(ROOT, DT_DIR, ".".to_owned()), (ROOT, DT_DIR, "..".to_owned())];
        let mut inodes = self.inodes.lock();
        for name in &names {
            if let Some(ino) = inodes.ino_for(name, &names) {
                entries.push((ino, DT_REG, name.clone()));
            }
        }
        drop(inodes);
        // The offset of an entry is its index + 1: the kernel resumes after it. A volume
        // created or destroyed between two calls of one listing may shift the rest by one
        // (skipped or repeated once); the next listing is exact.
        for (index, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if !dir.add(ino, index as u64 + 1, kind, name.as_bytes()) {
                break;
            }
        }
    }

    fn statfs(&self) -> Kstatfs {
        let names = self.volume_names();
        let bytes: u64 = names
            .iter()
            .filter_map(|name| self.provider.open(name))
            .map(|device| device.size_bytes())
            .fold(0u64, u64::saturating_add);
        Kstatfs {
            blocks: bytes / u64::from(STATFS_BLOCK_BYTES),
            files: names.len() as u64,
            bsize: STATFS_BLOCK_BYTES,
            namelen: NAME_BYTES_MAX as u32,
            frsize: STATFS_BLOCK_BYTES,
            ..Kstatfs::default()
        }
    }

    fn lookup(&self, parent: u64, name: &[u8], reply: Reply) {
        if parent != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        match self.resolve_name(name) {
            Some((ino, device)) => {
                let attr = self.image_attr(ino, &*device);
                reply.entry(self.options.attr_ttl, &attr, 0);
            }
            None => reply.error(Errno::ENOENT),
        }
    }
}

impl Filesystem for VolumeFs {
    fn init(&self, kernel: &KernelInit) -> InitOptions {
        let mut flags = 0;
        let mut required_flags = 0;
        if self.options.writeback_cache {
            // Asked for explicitly: better no mount than a silently different cache mode.
            required_flags |= init_flags::WRITEBACK_CACHE;
        }
        if self.options.async_dio {
            flags |= init_flags::ASYNC_DIO;
            if !kernel.offers(init_flags::ASYNC_DIO) {
                tracing::warn!(
                    "fuse: kernel lacks FUSE_ASYNC_DIO; direct I/O runs one request at a time"
                );
            }
        }
        // FOPEN_DIRECT_IO files refuse shared mmap unless this is granted (Linux 6.6+); with
        // it, a tool that maps the image still works and msync reaches write/fsync.
        if self.options.direct_io {
            flags |= init_flags::DIRECT_IO_ALLOW_MMAP;
            if !kernel.offers(init_flags::DIRECT_IO_ALLOW_MMAP) {
                tracing::info!(
                    "fuse: kernel lacks FUSE_DIRECT_IO_ALLOW_MMAP; shared mmap of an image fails"
                );
            }
        }
        InitOptions {
            max_write_bytes: self.options.max_write_bytes,
            max_readahead_bytes: self.options.max_write_bytes,
            max_background: self.options.max_background,
            flags,
            required_flags,
        }
    }

    fn request(&self, request: &Request<'_>, reply: Reply) {
        let ino = request.nodeid();
        match request.operation {
            Operation::Lookup { name } => self.lookup(ino, name, reply),
            Operation::Getattr(arg) => {
                let fh = (arg.getattr_flags & abi::GETATTR_FH != 0).then_some(arg.fh);
                match self.attr_of(ino, fh) {
                    Ok(attr) => reply.attr(self.options.attr_ttl, &attr),
                    Err(errno) => reply.error(errno),
                }
            }
            Operation::Setattr(arg) => {
                let ownership_or_mode =
                    arg.valid & (abi::fattr::MODE | abi::fattr::UID | abi::fattr::GID) != 0;
                let size = (arg.valid & abi::fattr::SIZE != 0).then_some(arg.size);
                match self.check_setattr(ino, ownership_or_mode, size) {
                    Ok(attr) => reply.attr(self.options.attr_ttl, &attr),
                    Err(errno) => reply.error(errno),
                }
            }
            Operation::Open(arg) => match self.open_image(ino, arg.flags) {
                Ok((fh, flags)) => reply.open(fh, flags),
                Err(errno) => reply.error(errno),
            },
            Operation::Read(arg) => self.read_data(arg.fh, arg.offset, arg.size, reply),
            Operation::Write { arg, data } => {
                self.write_data(arg.fh, arg.offset, data, arg.flags, reply)
            }
            // close() is not a durability point; fsync is. Nothing is buffered here.
            Operation::Flush(_) => reply.ok(),
            Operation::Release(arg) => {
                self.handles.lock().remove(arg.fh);
                reply.ok();
            }
            Operation::Fsync(arg) => self.sync_data(ino, arg.fh, reply),
            Operation::Opendir(_) if ino != ROOT => reply.error(Errno::ENOTDIR),
            Operation::Opendir(_) => reply.open(0, 0),
            Operation::Readdir { plus: true, .. } => reply.error(Errno::ENOSYS),
            Operation::Readdir { arg, plus: false } => {
                if ino != ROOT {
                    return reply.error(Errno::ENOTDIR);
                }
                let mut dir = DirBuf::default();
                dir.reset(arg.size);
                self.fill_directory(arg.offset, &mut dir);
                reply.bytes(dir.as_bytes());
            }
            Operation::Releasedir(_) | Operation::Fsyncdir(_) => reply.ok(),
            Operation::Statfs => reply.statfs(&self.statfs()),
            // default_permissions: the kernel checks modes itself and sends ACCESS only for
            // the root; anything that exists is accessible to whoever the kernel let in.
            Operation::Access(_) => match self.attr_of(ino, None) {
                Ok(_) => reply.ok(),
                Err(errno) => reply.error(errno),
            },
            Operation::Fallocate(arg) => {
                self.fallocate_data(arg.fh, arg.offset, arg.length, arg.mode as i32, reply)
            }
            _ => reply.error(Errno::ENOSYS),
        }
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
