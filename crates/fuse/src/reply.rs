//! Replies: encoded on the stack (every reply struct is at most 128 bytes) and sent on the
//! channel the request came from, from whichever thread finishes the request. Nothing here
//! allocates on the data path: READ data goes out as the caller's [`Bytes`], one buffer or
//! the parts it is made of (writev on /dev/fuse; one copy into the ring entry's payload
//! buffer on io_uring), struct replies
//! from a stack buffer. A [`Reply`] dropped unanswered sends EIO, so no request is left
//! hanging in the kernel — except once the session is handing its connection over
//! ([`crate::Session::begin_handover`]): then the request is left to the kernel, which
//! resends it to the successor, because an EIO would reach the application as a failed
//! read, write or fsync that the successor could have served.

use std::time::Duration;

use bytes::Bytes;

use crate::abi::{self, Pod};
use crate::errno::Errno;
use crate::transport::Channel;

/// Largest struct a reply carries inline (fuse_entry_out).
pub(crate) const INLINE_REPLY_BYTES: usize = 128;

/// The body of a reply, borrowed until it is sent (or, on io_uring, copied into the entry).
pub(crate) enum Body<'a> {
    Empty,
    Slice(&'a [u8]),
    Data(Bytes),
    /// Data in parts, in order (a device's blocks).
    Parts(Vec<Bytes>),
}

impl Body<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Body::Empty => 0,
            Body::Slice(bytes) => bytes.len(),
            Body::Data(bytes) => bytes.len(),
            Body::Parts(parts) => parts.iter().map(Bytes::len).sum(),
        }
    }
}

/// The answer to one request; consumed by the method that sends it.
pub struct Reply {
    unique: u64,
    opcode: u32,
    channel: Option<Channel>,
}

impl Reply {
    pub(crate) fn new(unique: u64, opcode: u32, channel: Channel) -> Reply {
        Reply { unique, opcode, channel: Some(channel) }
    }

    /// The request's id (with the resend bit when the kernel resent it).
    pub fn unique(&self) -> u64 {
        self.unique
    }

    fn send(mut self, error: i32, body: Body<'_>) {
        if let Some(channel) = self.channel.take() {
            channel.send(self.unique, self.opcode, error, body);
        }
    }

    fn send_struct<T: Pod>(self, value: &T) {
        self.send(0, Body::Slice(value.as_bytes()));
    }

    pub fn error(self, errno: Errno) {
        self.send(errno.wire(), Body::Empty);
    }

    /// Success with no data (FLUSH, RELEASE, FSYNC, FALLOCATE, ACCESS, ...).
    pub fn ok(self) {
        self.send(0, Body::Empty);
    }

    pub fn attr(self, ttl: Duration, attr: &abi::Attr) {
        let (attr_valid, attr_valid_nsec) = split_duration(ttl);
        self.send_struct(&abi::AttrOut { attr_valid, attr_valid_nsec, dummy: 0, attr: *attr });
    }

    pub fn entry(self, ttl: Duration, attr: &abi::Attr, generation: u64) {
        self.send_struct(&entry_out(ttl, attr, generation));
    }

    pub fn open(self, fh: u64, open_flags: u32) {
        self.send_struct(&abi::OpenOut { fh, open_flags, backing_id: 0 });
    }

    pub fn written(self, size: u32) {
        self.send_struct(&abi::WriteOut { size, padding: 0 });
    }

    pub fn statfs(self, statfs: &abi::Kstatfs) {
        self.send_struct(statfs);
    }

    /// READ data held in `data` (no copy on /dev/fuse).
    pub fn data(self, data: Bytes) {
        self.send(0, Body::Data(data));
    }

    /// READ data held in `parts`, in order (no copy on /dev/fuse: one writev of them all).
    pub fn data_parts(self, mut parts: Vec<Bytes>) {
        match parts.len() {
            0 => self.send(0, Body::Empty),
            1 => self.send(0, Body::Data(parts.pop().unwrap_or_default())),
            _ => self.send(0, Body::Parts(parts)),
        }
    }

    /// Data from a borrowed slice (directory listings).
    pub fn bytes(self, data: &[u8]) {
        self.send(0, Body::Slice(data));
    }

    pub(crate) fn init(self, out: &abi::InitOut) {
        self.send_struct(out);
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if let Some(channel) = self.channel.take() {
            if channel.leaves_dropped_requests() {
                tracing::debug!(
                    unique = self.unique,
                    opcode = self.opcode,
                    "fuse: request dropped unanswered during a handover; left for the successor"
                );
                return;
            }
            tracing::debug!(
                unique = self.unique,
                opcode = self.opcode,
                "fuse: request dropped unanswered, replying EIO"
            );
            channel.send(self.unique, self.opcode, Errno::EIO.wire(), Body::Empty);
        }
    }
}

fn split_duration(ttl: Duration) -> (u64, u32) {
    (ttl.as_secs(), ttl.subsec_nanos())
}

pub(crate) fn entry_out(ttl: Duration, attr: &abi::Attr, generation: u64) -> abi::EntryOut {
    let (valid, valid_nsec) = split_duration(ttl);
    abi::EntryOut {
        nodeid: attr.ino,
        generation,
        entry_valid: valid,
        attr_valid: valid,
        entry_valid_nsec: valid_nsec,
        attr_valid_nsec: valid_nsec,
        attr: *attr,
    }
}

/// A directory listing being built for one READDIR(PLUS) reply, bounded by the size the
/// kernel asked for. Reuse one per thread with [`DirBuf::reset`].
#[derive(Debug, Default)]
pub struct DirBuf {
    bytes: Vec<u8>,
    limit: usize,
}

impl DirBuf {
    /// An empty listing of at most `limit_bytes` (the READDIR request's size).
    pub fn reset(&mut self, limit_bytes: u32) {
        self.bytes.clear();
        self.limit = limit_bytes as usize;
        self.bytes.reserve(self.limit.min(64 * 1024));
    }

    /// Adds an entry (READDIR); false, leaving the listing as it was, when it does not fit.
    /// `offset` is what the kernel passes back to continue after this entry; `kind` is
    /// the file type in st_mode bits shifted down 12 (DT_DIR = 4, DT_REG = 8).
    pub fn add(&mut self, ino: u64, offset: u64, kind: u32, name: &[u8]) -> bool {
        let dirent = abi::Dirent { ino, off: offset, namelen: name.len() as u32, kind };
        self.push(&[], &dirent, name)
    }

    /// Adds an entry with its attributes (READDIRPLUS).
    pub fn add_plus(
        &mut self,
        offset: u64,
        kind: u32,
        name: &[u8],
        ttl: Duration,
        attr: &abi::Attr,
    ) -> bool {
        let entry = entry_out(ttl, attr, 0);
        let dirent = abi::Dirent { ino: attr.ino, off: offset, namelen: name.len() as u32, kind };
        self.push(entry.as_bytes(), &dirent, name)
    }

    fn push(&mut self, prefix: &[u8], dirent: &abi::Dirent, name: &[u8]) -> bool {
        let unpadded = prefix.len() + abi::DIRENT_NAME_OFFSET + name.len();
        let padded = unpadded.next_multiple_of(abi::DIRENT_ALIGN);
        if name.is_empty() || self.bytes.len() + padded > self.limit {
            return false;
        }
        self.bytes.extend_from_slice(prefix);
        self.bytes.extend_from_slice(dirent.as_bytes());
        self.bytes.extend_from_slice(name);
        self.bytes.resize(self.bytes.len() + padded - unpadded, 0);
        true
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirbuf_pads_and_respects_the_limit() {
        let mut dir = DirBuf::default();
        dir.reset(64);
        assert!(dir.add(1, 1, 4, b"."), "24 + 1 -> 32 bytes");
        assert_eq!(dir.as_bytes().len(), 32);
        assert!(dir.add(7, 2, 8, b"volume"), "24 + 6 -> 32 bytes");
        assert_eq!(dir.as_bytes().len(), 64);
        assert!(!dir.add(8, 3, 8, b"x"), "a third entry would pass the limit");
        assert_eq!(dir.as_bytes().len(), 64, "a refused entry leaves nothing behind");
        let first = abi::Dirent::read_from(dir.as_bytes()).expect("dirent");
        assert_eq!((first.ino, first.off, first.namelen, first.kind), (1, 1, 1, 4));
        dir.reset(4096);
        let attr = abi::Attr { ino: 9, ..Default::default() };
        assert!(dir.add_plus(1, 8, b"v", Duration::from_secs(1), &attr));
        assert_eq!(dir.as_bytes().len(), (128 + 24 + 1usize).next_multiple_of(8));
    }
}
