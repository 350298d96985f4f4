//! Data requests: each runs as a tokio task (see [`super::dispatch`]) and replies from
//! there, so a slow device call never blocks a transport thread.

use std::sync::Arc;

use bytes::Bytes;
use fardisk_fuse::{Errno, Reply};
use fardisk_nbd::BlockDevice;

use super::errno::Failure;
use super::filesystem::{wants_sync_writes, VolumeFs};
use super::io::{self, FallocateOp};

impl VolumeFs {
    pub(super) fn read_data(&self, ino: u64, fh: u64, offset: u64, size: u32, reply: Reply) {
        let file = match self.open_file(ino, fh) {
            Ok(file) => file,
            Err(errno) => return reply.error(errno),
        };
        self.dispatcher.spawn(async move {
            match io::read_parts_at(&*file.device, offset, size).await {
                // The device's buffers go to the kernel as they are (writev, or one copy into
                // the ring entry).
                Ok(parts) => reply.data_parts(parts),
                Err(error) => reply.error(Failure::from(error).errno("read", &file.volume)),
            }
        });
    }

    /// A write is acknowledged only once the device has it; with O_SYNC/O_DSYNC (from the
    /// open or from this write, e.g. pwritev2 RWF_DSYNC), and always under a holder
    /// (`writes_durable_before_reply`), it is sent with FUA so that it is durable before the
    /// reply.
    pub(super) fn write_data(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        data: &[u8],
        flags: u32,
        reply: Reply,
    ) {
        let file = match self.open_file(ino, fh) {
            Ok(file) => file,
            Err(errno) => return reply.error(errno),
        };
        let fua = self.options.writes_durable_before_reply
            || file.sync_writes
            || wants_sync_writes(flags as i32);
        // The transport reuses its request buffer once we return, and the engine keeps
        // the bytes in its dirty set until the txg syncs: one copy, of exactly the data.
        let data = Bytes::copy_from_slice(data);
        self.dispatcher.spawn(async move {
            match io::write_at(&*file.device, &file.gate, offset, data, fua).await {
                Ok(written) => reply.written(written),
                Err(error) => reply.error(Failure::from(error).errno("write", &file.volume)),
            }
        });
    }

    /// fsync and fdatasync: the kernel has already written back (and we acknowledged) every
    /// dirty page of the image; `flush()` makes them and every earlier acknowledged write
    /// durable, and only then does the caller's fsync return.
    pub(super) fn sync_data(&self, ino: u64, fh: u64, reply: Reply) {
        let (volume, device) = match self.device_for(ino, fh) {
            Ok(found) => found,
            Err(errno) => return reply.error(errno),
        };
        self.dispatcher.spawn(async move {
            match device.flush().await {
                Ok(()) => reply.ok(),
                Err(error) => reply.error(Failure::from(error).errno("fsync", &volume)),
            }
        });
    }

    pub(super) fn fallocate_data(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        length: u64,
        mode: i32,
        reply: Reply,
    ) {
        let op = match FallocateOp::parse(mode) {
            Ok(op) => op,
            Err(errno) => {
                tracing::warn!(
                    mode,
                    errno = errno.code(),
                    "fuse: unsupported fallocate mode refused"
                );
                return reply.error(errno);
            }
        };
        let file = match self.open_file(ino, fh) {
            Ok(file) => file,
            Err(errno) => return reply.error(errno),
        };
        // A punched or zeroed range is data too: under a holder it is durable before the reply.
        let durable = self.options.writes_durable_before_reply;
        self.dispatcher.spawn(async move {
            let done = match io::fallocate(&*file.device, &file.gate, op, offset, length).await {
                Ok(()) if durable => file.device.flush().await.map_err(Failure::from),
                other => other,
            };
            match done {
                Ok(()) => reply.ok(),
                Err(failure) => reply.error(failure.errno("fallocate", &file.volume)),
            }
        });
    }

    /// The device of an open handle, or (for an fsync the kernel sends on a handle we no
    /// longer know) the volume's device by inode.
    fn device_for(&self, ino: u64, fh: u64) -> Result<(String, Arc<dyn BlockDevice>), Errno> {
        if let Ok(file) = self.open_file(ino, fh) {
            return Ok((file.volume.clone(), file.device.clone()));
        }
        let (entry, device) = self.resolve_ino(ino).ok_or(Errno::EBADF)?;
        Ok((entry.name, device))
    }
}
