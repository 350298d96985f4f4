//! The io_uring transport (FUSE-over-io_uring, Linux 6.14+; Documentation/filesystems/
//! fuse-io-uring.rst): one queue per possible CPU, each a thread with its own ring of
//! `depth` entries. An entry is a header buffer (`fuse_uring_req_header`) and a payload
//! buffer registered with the kernel by FUSE_IO_URING_CMD_REGISTER; a request arrives as
//! the completion of the entry's command, and its reply goes back with the entry's next
//! FUSE_IO_URING_CMD_COMMIT_AND_FETCH, which also makes the entry ready for the next
//! request: no read or write system call per request.
//!
//! Replies may be finished on any thread. They are queued to the entry's queue thread
//! ([`RingShared::complete`]), which alone writes entry buffers and submits commands; a
//! reply finished elsewhere wakes it through an eventfd whose read it keeps armed in its
//! ring (one write per wake-up, not per reply, while the thread is busy).
//!
//! The kernel switches a connection to the rings only when every queue has an entry
//! registered; until then (and always for FORGET and INTERRUPT) requests come through
//! /dev/fuse.

use std::alloc::Layout;
use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use io_uring::{opcode, squeue, types, IoUring};

use crate::abi::{self, Pod};
use crate::reply::{Body, INLINE_REPLY_BYTES};
use crate::request;
use crate::session::{Dispatch, SessionShared};
use crate::transport::device::DeviceChannel;

/// user_data of the eventfd read; entries use their index.
const EVENTFD_TAG: u64 = u64::MAX;
/// Alignment of payload buffers (page-aligned copies in the kernel).
const PAYLOAD_ALIGN: usize = 4096;

const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);

thread_local! {
    /// The queue this thread serves (its RingShared's address), 0 on other threads.
    static CURRENT_QUEUE: Cell<usize> = const { Cell::new(0) };
}

/// A reply on its way to an entry.
struct Completion {
    entry: u32,
    unique: u64,
    error: i32,
    inline: [u8; INLINE_REPLY_BYTES],
    inline_len: usize,
    data: OwnedBody,
}

/// A reply's data, held until it is copied into its entry.
enum OwnedBody {
    Inline,
    One(Bytes),
    Parts(Vec<Bytes>),
}

/// What the queue thread and the threads finishing its requests share.
pub(crate) struct RingShared {
    pending: Mutex<Vec<Completion>>,
    eventfd: OwnedFd,
    /// An eventfd write is outstanding: later replies need not write again.
    wake_sent: AtomicBool,
}

impl RingShared {
    fn new(depth: usize) -> io::Result<RingShared> {
        // SAFETY: eventfd has no memory preconditions.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(RingShared {
            pending: Mutex::new(Vec::with_capacity(depth)),
            // SAFETY: eventfd returned a new descriptor that nothing else owns.
            eventfd: unsafe { OwnedFd::from_raw_fd(fd) },
            wake_sent: AtomicBool::new(false),
        })
    }

    fn complete(self: &Arc<Self>, completion: Completion) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.push(completion);
        }
        let on_queue_thread =
            CURRENT_QUEUE.with(|current| current.get() == Arc::as_ptr(self) as usize);
        if !on_queue_thread && !self.wake_sent.swap(true, Ordering::AcqRel) {
            let one = 1u64.to_ne_bytes();
            // SAFETY: writes 8 bytes from a live buffer to an eventfd we own.
            let written = unsafe { libc::write(self.eventfd.as_raw_fd(), one.as_ptr().cast(), 8) };
            if written != 8 {
                tracing::warn!(
                    "fuse: cannot wake an io_uring queue: {}",
                    io::Error::last_os_error()
                );
            }
        }
    }
}

/// The way back for a request that arrived in ring entry `entry`.
pub(crate) struct RingSlot {
    ring: Arc<RingShared>,
    entry: u32,
}

impl RingSlot {
    pub(crate) fn new(ring: &Arc<RingShared>, entry: u32) -> RingSlot {
        RingSlot { ring: Arc::clone(ring), entry }
    }

    pub(crate) fn send(self, unique: u64, error: i32, body: Body<'_>) {
        let mut completion = Completion {
            entry: self.entry,
            unique,
            error,
            inline: [0u8; INLINE_REPLY_BYTES],
            inline_len: 0,
            data: OwnedBody::Inline,
        };
        match body {
            Body::Empty => {}
            Body::Slice(bytes) if bytes.len() <= INLINE_REPLY_BYTES => {
                completion.inline[..bytes.len()].copy_from_slice(bytes);
                completion.inline_len = bytes.len();
            }
            // Directory listings: the metadata path, rare enough to own a copy.
            Body::Slice(bytes) => completion.data = OwnedBody::One(Bytes::copy_from_slice(bytes)),
            Body::Data(bytes) => completion.data = OwnedBody::One(bytes),
            Body::Parts(parts) => completion.data = OwnedBody::Parts(parts),
        }
        self.ring.complete(completion);
    }
}

/// What one queue thread needs to start.
pub(crate) struct QueueSetup {
    pub(crate) qid: u16,
    pub(crate) depth: usize,
    pub(crate) payload_bytes: usize,
    pub(crate) device_fd: RawFd,
}

/// One registered entry's buffers. The kernel writes them between our command and its
/// completion, so they are reached only through raw pointers, and only by the queue
/// thread while the entry is ours (after its completion, before its next command).
struct EntryBuffers {
    header: *mut u8,
    payload: *mut u8,
    payload_bytes: usize,
    iov: Box<[libc::iovec; 2]>,
}

impl EntryBuffers {
    fn new(payload_bytes: usize) -> io::Result<EntryBuffers> {
        let header = alloc_zeroed(abi::URING_HEADER_BYTES, 64)?;
        let payload = alloc_zeroed(payload_bytes, PAYLOAD_ALIGN)?;
        let iov = Box::new([
            libc::iovec { iov_base: header.cast(), iov_len: abi::URING_HEADER_BYTES },
            libc::iovec { iov_base: payload.cast(), iov_len: payload_bytes },
        ]);
        Ok(EntryBuffers { header, payload, payload_bytes, iov })
    }

    /// # Safety
    /// Only while the entry is ours (see the type's comment).
    unsafe fn header(&self) -> &[u8] {
        // SAFETY: the allocation is URING_HEADER_BYTES long and the caller guarantees that
        // nobody writes it while the slice lives.
        unsafe { std::slice::from_raw_parts(self.header, abi::URING_HEADER_BYTES) }
    }

    /// # Safety
    /// As [`EntryBuffers::header`].
    unsafe fn payload(&self, len: usize) -> &[u8] {
        // SAFETY: as above; `len` is clamped to the allocation.
        unsafe { std::slice::from_raw_parts(self.payload, len.min(self.payload_bytes)) }
    }

    /// Frees the buffers; only once the kernel can no longer write them.
    fn free(self) {
        // SAFETY: both were allocated by alloc_zeroed with these sizes and alignments.
        unsafe {
            std::alloc::dealloc(self.header, layout(abi::URING_HEADER_BYTES, 64));
            std::alloc::dealloc(self.payload, layout(self.payload_bytes, PAYLOAD_ALIGN));
        }
    }
}

fn layout(size: usize, align: usize) -> Layout {
    Layout::from_size_align(size.max(1), align).unwrap_or(Layout::new::<u8>())
}

fn alloc_zeroed(size: usize, align: usize) -> io::Result<*mut u8> {
    // SAFETY: the layout has a non-zero size.
    let pointer = unsafe { std::alloc::alloc_zeroed(layout(size, align)) };
    if pointer.is_null() {
        return Err(io::Error::new(io::ErrorKind::OutOfMemory, "ring entry buffers"));
    }
    Ok(pointer)
}

/// An IORING_OP_URING_CMD for /dev/fuse; with `iov`, the entry's two buffers (REGISTER).
fn fuse_command(
    device_fd: RawFd,
    command: u32,
    request: &abi::UringCmdReq,
    iov: Option<&[libc::iovec; 2]>,
) -> squeue::Entry128 {
    let mut cmd = [0u8; 80];
    cmd[..std::mem::size_of::<abi::UringCmdReq>()].copy_from_slice(request.as_bytes());
    let mut op = opcode::UringCmd80::new(types::Fd(device_fd), command).cmd(cmd);
    if let Some(iov) = iov {
        op = op.addr(Some(iov.as_ptr() as u64));
    }
    let mut entry = op.build();
    if iov.is_some() {
        // The kernel wants sqe->len = 2 (iovecs); the crate's builder has no setter for it.
        // SAFETY: Entry128 is repr(C), 128 bytes (asserted above) of plain integers: the
        // 64-byte io_uring_sqe, whose `len` is the u32 at offset 24, then the command.
        let bytes = unsafe { &mut *(&mut entry as *mut squeue::Entry128).cast::<[u8; 128]>() };
        bytes[24..28].copy_from_slice(&2u32.to_ne_bytes());
    }
    entry
}

/// The CPUs the kernel may run a requester on (`/sys/devices/system/cpu/possible`): it
/// keeps one queue per possible CPU and switches to the rings when all have entries.
pub(crate) fn possible_cpus() -> io::Result<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    parse_cpu_list(text.trim())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("cpu list {text:?}")))
}

fn parse_cpu_list(text: &str) -> Option<usize> {
    let mut highest = None;
    for part in text.split(',') {
        let last = part.rsplit('-').next()?.trim().parse::<usize>().ok()?;
        highest = Some(highest.map_or(last, |h: usize| h.max(last)));
    }
    highest.map(|h| h + 1)
}

struct Queue {
    ring: IoUring<squeue::Entry128>,
    entries: Vec<EntryBuffers>,
    setup: QueueSetup,
    eventfd_buffer: Box<[u8; 8]>,
}

impl Queue {
    fn push(&mut self, entry: squeue::Entry128) -> io::Result<()> {
        // SAFETY: every pointer an SQE carries (entry iovecs, the eventfd buffer) lives in
        // `self`, which outlives the ring's use of it (buffers are freed only after every
        // entry completed for good, or leaked).
        while unsafe { self.ring.submission().push(&entry) }.is_err() {
            self.ring.submit()?;
        }
        Ok(())
    }

    fn arm_eventfd(&mut self, eventfd: RawFd) -> io::Result<()> {
        let read = opcode::Read::new(types::Fd(eventfd), self.eventfd_buffer.as_mut_ptr(), 8)
            .build()
            .user_data(EVENTFD_TAG);
        self.push(read.into())
    }

    fn register_all(&mut self) -> io::Result<()> {
        let request = abi::UringCmdReq { qid: self.setup.qid, ..Default::default() };
        for index in 0..self.entries.len() {
            let command = fuse_command(
                self.setup.device_fd,
                abi::URING_CMD_REGISTER,
                &request,
                Some(&self.entries[index].iov),
            );
            self.push(command.user_data(index as u64))?;
        }
        self.ring.submit()?;
        Ok(())
    }

    /// Writes each queued reply into its entry and commits it (fetching the next request).
    fn commit(&mut self, ring_shared: &RingShared, batch: &mut Vec<Completion>) -> io::Result<()> {
        if let Ok(mut pending) = ring_shared.pending.lock() {
            std::mem::swap(&mut *pending, batch);
        }
        for completion in batch.drain(..) {
            let Some(buffers) = self.entries.get(completion.entry as usize) else { continue };
            let (first, rest): (&[u8], &[Bytes]) = match &completion.data {
                OwnedBody::Inline => (&completion.inline[..completion.inline_len], &[]),
                OwnedBody::One(data) => (data, &[]),
                OwnedBody::Parts(parts) => (&[], parts),
            };
            let body_len = first.len() + rest.iter().map(Bytes::len).sum::<usize>();
            let (error, first, rest, body_len) = if body_len > buffers.payload_bytes {
                tracing::warn!(bytes = body_len, "fuse: reply larger than the ring payload; EIO");
                (-libc::EIO, &[][..], &[][..], 0)
            } else {
                (completion.error, first, rest, body_len)
            };
            let header = abi::OutHeader {
                len: (std::mem::size_of::<abi::OutHeader>() + body_len) as u32,
                error,
                unique: completion.unique,
            };
            let ent = abi::UringEntInOut {
                commit_id: completion.unique,
                payload_sz: body_len as u32,
                ..Default::default()
            };
            // SAFETY: the entry is ours (its request arrived and is not yet committed), so
            // the kernel does not touch its buffers; the writes stay inside them.
            unsafe {
                std::ptr::copy_nonoverlapping(header.as_bytes().as_ptr(), buffers.header, 16);
                std::ptr::copy_nonoverlapping(
                    ent.as_bytes().as_ptr(),
                    buffers.header.add(abi::URING_ENT_IN_OUT_OFFSET),
                    std::mem::size_of::<abi::UringEntInOut>(),
                );
                let mut at = 0;
                for part in std::iter::once(first).chain(rest.iter().map(|p| &p[..])) {
                    std::ptr::copy_nonoverlapping(
                        part.as_ptr(),
                        buffers.payload.add(at),
                        part.len(),
                    );
                    at += part.len();
                }
            }
            let request = abi::UringCmdReq {
                commit_id: completion.unique,
                qid: self.setup.qid,
                ..Default::default()
            };
            let command =
                fuse_command(self.setup.device_fd, abi::URING_CMD_COMMIT_AND_FETCH, &request, None);
            self.push(command.user_data(u64::from(completion.entry)))?;
        }
        Ok(())
    }
}

/// The queue thread: registers its entries, reports to `ready`, then serves until every
/// entry has been ended by the kernel (unmount or abort).
pub(crate) fn serve(
    setup: QueueSetup,
    shared: Arc<SessionShared>,
    ready: Sender<Result<(), String>>,
    _device: Arc<DeviceChannel>,
) {
    let qid = setup.qid;
    let depth = setup.depth;
    let ring_shared = match RingShared::new(depth) {
        Ok(ring) => Arc::new(ring),
        Err(e) => {
            let _ = ready.send(Err(format!("queue {qid}: eventfd: {e}")));
            return;
        }
    };
    let mut queue = match build_queue(setup) {
        Ok(queue) => queue,
        Err(e) => {
            let _ = ready.send(Err(format!("queue {qid}: {e}")));
            return;
        }
    };
    CURRENT_QUEUE.with(|current| current.set(Arc::as_ptr(&ring_shared) as usize));
    let eventfd = ring_shared.eventfd.as_raw_fd();
    let registered = queue.arm_eventfd(eventfd).and_then(|()| queue.register_all());
    // A refused REGISTER completes at once; a good one stays pending until a request comes.
    let mut refused = None;
    let mut live = depth;
    let mut early: Vec<(u64, i32)> = Vec::new();
    for cqe in queue.ring.completion() {
        if cqe.user_data() != EVENTFD_TAG && cqe.result() < 0 {
            refused = Some(io::Error::from_raw_os_error(-cqe.result()));
            live -= 1;
        } else {
            early.push((cqe.user_data(), cqe.result()));
        }
    }
    match (registered, refused) {
        (Err(e), _) | (Ok(()), Some(e)) => {
            let _ = ready.send(Err(format!("queue {qid}: register: {e}")));
            // Entries that did register may still be written by the kernel: keep their
            // buffers (a few MiB, once) rather than risk a write into freed memory.
            std::mem::forget(queue.entries);
            return;
        }
        (Ok(()), None) => {
            let _ = ready.send(Ok(()));
        }
    }
    let mut batch = Vec::with_capacity(depth);
    let mut cqes: Vec<(u64, i32)> = Vec::with_capacity(depth + 1);
    cqes.extend(early);
    while live > 0 {
        for (user_data, result) in cqes.drain(..) {
            if user_data == EVENTFD_TAG {
                ring_shared.wake_sent.store(false, Ordering::Release);
                if queue.arm_eventfd(eventfd).is_err() {
                    tracing::warn!(qid, "fuse: cannot re-arm the queue's eventfd");
                }
                continue;
            }
            let index = user_data as usize;
            if result < 0 {
                live = live.saturating_sub(1);
                if result != -libc::ENOTCONN && result != -libc::ECANCELED {
                    tracing::warn!(
                        qid,
                        index,
                        "fuse: ring entry ended: {}",
                        io::Error::from_raw_os_error(-result)
                    );
                }
                continue;
            }
            handle(&queue, index, &shared, &ring_shared);
        }
        if let Err(e) = queue.commit(&ring_shared, &mut batch) {
            tracing::warn!(qid, "fuse: io_uring submit failed: {e}; the queue stops");
            std::mem::forget(queue.entries);
            return;
        }
        if live == 0 {
            break;
        }
        match queue.ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e)
                if e.raw_os_error() == Some(libc::EINTR)
                    || e.raw_os_error() == Some(libc::EBUSY) => {}
            Err(e) => {
                tracing::warn!(qid, "fuse: io_uring wait failed: {e}; the queue stops");
                std::mem::forget(queue.entries);
                return;
            }
        }
        cqes.extend(queue.ring.completion().map(|cqe| (cqe.user_data(), cqe.result())));
    }
    // Every entry was ended by the kernel: it holds no more pointers into the buffers.
    drop(queue.ring);
    for buffers in queue.entries {
        buffers.free();
    }
    // The eventfd read may still be cancelled asynchronously after the ring closes: its
    // 8-byte buffer is left to the process rather than freed under it.
    Box::leak(queue.eventfd_buffer);
    tracing::debug!(qid, "fuse: io_uring queue ended");
}

fn build_queue(setup: QueueSetup) -> io::Result<Queue> {
    let ring_entries = (setup.depth + 2).next_power_of_two() as u32;
    let ring = IoUring::<squeue::Entry128>::builder()
        .setup_cqsize(ring_entries * 2)
        .build(ring_entries)?;
    let entries = (0..setup.depth)
        .map(|_| EntryBuffers::new(setup.payload_bytes))
        .collect::<io::Result<Vec<_>>>()?;
    Ok(Queue { ring, entries, setup, eventfd_buffer: Box::new([0u8; 8]) })
}

/// A request arrived in entry `index`: parse it in place and dispatch it.
fn handle(queue: &Queue, index: usize, shared: &Arc<SessionShared>, ring: &Arc<RingShared>) {
    let Some(buffers) = queue.entries.get(index) else { return };
    shared.stats.requests_uring.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the entry's completion has arrived and its next command is not yet
    // submitted (that happens in `commit`, after this returns), so the kernel leaves the
    // buffers alone while these slices live.
    let (header, payload) = unsafe {
        let header = buffers.header();
        let ent = abi::UringEntInOut::read_from(&header[abi::URING_ENT_IN_OUT_OFFSET..])
            .unwrap_or_default();
        (header, buffers.payload(ent.payload_sz as usize))
    };
    let in_header = &header[..abi::URING_IN_OUT_HEADER_BYTES];
    let op_in = &header[abi::URING_IN_OUT_HEADER_BYTES..abi::URING_ENT_IN_OUT_OFFSET];
    let from = Dispatch::Ring(ring, index as u32);
    match request::parse_ring(in_header, op_in, payload) {
        Ok(parsed) => shared.dispatch(&parsed, from),
        Err(malformed) => shared.malformed(in_header, malformed, from),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("0-1"), Some(2));
        assert_eq!(parse_cpu_list("0-3,8-11"), Some(12));
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn register_command_carries_two_iovecs_and_the_queue() {
        let iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 2];
        let request = abi::UringCmdReq { qid: 3, commit_id: 9, ..Default::default() };
        let entry = fuse_command(7, abi::URING_CMD_REGISTER, &request, Some(&iov));
        // SAFETY: as in fuse_command: 128 bytes of plain integers.
        let bytes = unsafe { &*(&entry as *const squeue::Entry128).cast::<[u8; 128]>() };
        assert_eq!(bytes[0], io_uring::opcode::UringCmd80::CODE, "opcode");
        assert_eq!(&bytes[4..8], &7i32.to_ne_bytes(), "fd");
        assert_eq!(&bytes[8..12], &abi::URING_CMD_REGISTER.to_ne_bytes(), "cmd_op");
        assert_eq!(&bytes[16..24], &(iov.as_ptr() as u64).to_ne_bytes(), "addr");
        assert_eq!(&bytes[24..28], &2u32.to_ne_bytes(), "len");
        assert_eq!(&bytes[48..72], request.as_bytes(), "fuse_uring_cmd_req at the command area");
    }
}
