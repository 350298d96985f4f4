//! A FUSE session: one connection to the kernel, served by /dev/fuse worker threads and,
//! when negotiated, io_uring queues (one per possible CPU).
//!
//! Three ways in, so that a connection can outlive the process serving it (issue #20):
//! - [`Session::start`]: a fresh connection (just mounted): answers INIT, then serves.
//! - [`Session::resume`]: a connection another process initialised and handed over (its
//!   /dev/fuse descriptor passed with SCM_RIGHTS and the [`Negotiated`] it agreed on):
//!   serves without INIT.
//! - [`Session::notify_resend`]: asks the kernel to send again every request a dead
//!   predecessor read and did not answer (FUSE_NOTIFY_RESEND, Linux 6.9+).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::abi;
use crate::errno::Errno;
use crate::filesystem::Filesystem;
use crate::init::{self, InitOptions, KernelInit, Negotiated};
use crate::mount;
use crate::reply::{Body, Reply};
use crate::request::{self, Malformed, Operation, Request};
use crate::transport::device::{self, DeviceChannel};
use crate::transport::uring::{self, RingShared};
use crate::transport::Channel;

/// How a session serves its connection.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// /dev/fuse worker threads. With io_uring they still carry FORGET and INTERRUPT and
    /// whatever arrives before the rings are ready.
    pub device_threads: usize,
    /// Give each worker its own FUSE_DEV_IOC_CLONE of the session's file (less contention
    /// in the kernel). Off: every worker reads the session's file, so everything read is
    /// on the one file a holder process keeps open, and can be resent after a takeover.
    pub clone_fds: bool,
    /// Ask for FUSE-over-io_uring at INIT; used when the kernel offers it (module
    /// parameter `enable_uring`), else requests stay on /dev/fuse.
    pub uring: bool,
    /// Ring entries (requests in flight) per io_uring queue.
    pub uring_queue_depth: usize,
    /// Thread name prefix.
    pub name: String,
}

impl Default for SessionConfig {
    fn default() -> SessionConfig {
        SessionConfig {
            device_threads: 2,
            clone_fds: true,
            uring: false,
            uring_queue_depth: 32,
            name: "fuse".to_owned(),
        }
    }
}

/// Which transport carries the requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Device,
    IoUring,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Device => "/dev/fuse",
            Transport::IoUring => "io_uring",
        }
    }
}

/// What `status` shows of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionStats {
    pub transport: Transport,
    /// Why the transport is what it is (e.g. why io_uring is not used).
    pub transport_reason: String,
    pub uring_queues: usize,
    /// Memory the io_uring queues' registered buffers hold for as long as the session lives:
    /// queues x depth x (payload + header), the payload sized by the negotiated max_write. 0 on
    /// /dev/fuse.
    pub uring_buffer_bytes: u64,
    pub requests_device: u64,
    pub requests_uring: u64,
    pub malformed_requests: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) requests_device: AtomicU64,
    pub(crate) requests_uring: AtomicU64,
    pub(crate) malformed: AtomicU64,
}

/// Where a request came from, to build its way back.
pub(crate) enum Dispatch<'a> {
    Device(&'a Arc<DeviceChannel>),
    Ring(&'a Arc<RingShared>, u32),
}

impl Dispatch<'_> {
    fn channel(&self) -> Channel {
        match self {
            Dispatch::Device(device) => Channel::Device(Arc::clone(device)),
            Dispatch::Ring(ring, entry) => Channel::Ring(uring::RingSlot::new(ring, *entry)),
        }
    }
}

pub(crate) struct SessionShared {
    pub(crate) fs: Arc<dyn Filesystem>,
    pub(crate) stats: Counters,
    transport: Mutex<TransportState>,
}

/// Which transport serves, why, and what its rings hold (`SessionStats`).
#[derive(Clone)]
struct TransportState {
    transport: Transport,
    reason: String,
    uring_queues: usize,
    uring_buffer_bytes: u64,
}

impl TransportState {
    fn device(reason: String) -> TransportState {
        TransportState {
            transport: Transport::Device,
            reason,
            uring_queues: 0,
            uring_buffer_bytes: 0,
        }
    }
}

impl SessionShared {
    /// Hands one parsed request to the filesystem, or handles it here.
    pub(crate) fn dispatch(&self, request: &Request<'_>, from: Dispatch<'_>) {
        let unique = request.unique();
        let opcode = request.header.opcode;
        match request.operation {
            Operation::Forget(forget) => self.fs.forget(request.nodeid(), forget.nlookup),
            Operation::BatchForget { entries, .. } => {
                for one in request::forgets(entries) {
                    self.fs.forget(one.nodeid, one.nlookup);
                }
            }
            // Requests finish quickly or not at all; the original reply answers both.
            Operation::Interrupt(_) => {}
            Operation::Init(_) => {
                tracing::warn!("fuse: a second INIT on a running connection; refused");
                Reply::new(unique, opcode, from.channel()).error(Errno::EIO);
            }
            Operation::Destroy => {
                self.fs.destroy();
                Reply::new(unique, opcode, from.channel()).ok();
            }
            Operation::Unsupported(_) => {
                Reply::new(unique, opcode, from.channel()).error(Errno::ENOSYS)
            }
            _ => self.fs.request(request, Reply::new(unique, opcode, from.channel())),
        }
    }

    /// A request that does not parse: EIO when its header names it, else it is dropped
    /// (the kernel only sends well-formed requests; this guards against our own bugs).
    pub(crate) fn malformed(&self, bytes: &[u8], why: Malformed, from: Dispatch<'_>) {
        self.stats.malformed.fetch_add(1, Ordering::Relaxed);
        tracing::warn!("fuse: malformed request: {why}");
        if let Some(header) = request::parse_header(bytes) {
            if header.opcode != abi::opcode::FORGET && header.opcode != abi::opcode::BATCH_FORGET {
                Reply::new(header.unique, header.opcode, from.channel()).error(Errno::EIO);
            }
        }
    }

    fn set_transport(&self, new: TransportState) {
        if let Ok(mut state) = self.transport.lock() {
            *state = new;
        }
    }
}

/// Reads a session's statistics (cheap to clone; shares the session's counters).
#[derive(Clone)]
pub struct SessionMonitor(Arc<SessionShared>);

impl SessionMonitor {
    pub fn stats(&self) -> SessionStats {
        let state = self
            .0
            .transport
            .lock()
            .map(|state| state.clone())
            .unwrap_or_else(|_| TransportState::device(String::new()));
        let counters = &self.0.stats;
        SessionStats {
            transport: state.transport,
            transport_reason: state.reason,
            uring_queues: state.uring_queues,
            uring_buffer_bytes: state.uring_buffer_bytes,
            requests_device: counters.requests_device.load(Ordering::Relaxed),
            requests_uring: counters.requests_uring.load(Ordering::Relaxed),
            malformed_requests: counters.malformed.load(Ordering::Relaxed),
        }
    }
}

/// A connection being served. Dropping it does not unmount: the threads end when the
/// kernel ends the connection (unmount, or abort); [`Session::join`] waits for that.
pub struct Session {
    shared: Arc<SessionShared>,
    primary: Arc<DeviceChannel>,
    negotiated: Negotiated,
    threads: Vec<JoinHandle<()>>,
    uring_threads: Arc<AtomicUsize>,
}

impl Session {
    /// Answers INIT on `fd` (which must already be mounted: the kernel sends INIT at
    /// mount), then serves. Returns once the handshake is done and the transports run.
    pub fn start(
        fd: OwnedFd,
        fs: Arc<dyn Filesystem>,
        config: SessionConfig,
    ) -> io::Result<Session> {
        let primary = Arc::new(DeviceChannel::new(fd));
        let (negotiated, kernel) = handshake(&primary, &*fs, config.uring)?;
        let reason = uring_reason(&config, &kernel, &negotiated);
        Session::serve(primary, fs, negotiated, config, reason)
    }

    /// Serves a connection that is already initialised (handed over by a predecessor):
    /// no INIT is read or expected. Call [`Session::notify_resend`] next to get the
    /// requests the predecessor left unanswered.
    pub fn resume(
        fd: OwnedFd,
        negotiated: Negotiated,
        fs: Arc<dyn Filesystem>,
        config: SessionConfig,
    ) -> io::Result<Session> {
        let primary = Arc::new(DeviceChannel::new(fd));
        let reason = if negotiated.over_io_uring() && config.uring {
            "negotiated by the predecessor".to_owned()
        } else {
            "io_uring was not negotiated on this connection".to_owned()
        };
        Session::serve(primary, fs, negotiated, config, reason)
    }

    fn serve(
        primary: Arc<DeviceChannel>,
        fs: Arc<dyn Filesystem>,
        negotiated: Negotiated,
        config: SessionConfig,
        reason: String,
    ) -> io::Result<Session> {
        let shared = Arc::new(SessionShared {
            fs,
            stats: Counters::default(),
            transport: Mutex::new(TransportState::device(reason)),
        });
        let mut session = Session {
            shared,
            primary,
            negotiated,
            threads: Vec::new(),
            uring_threads: Arc::new(AtomicUsize::new(0)),
        };
        session.spawn_device_workers(&config)?;
        if negotiated.over_io_uring() && config.uring {
            session.start_rings(&config);
        }
        Ok(session)
    }

    fn spawn_device_workers(&mut self, config: &SessionConfig) -> io::Result<()> {
        let buffer_bytes = self.negotiated.request_buffer_bytes();
        for index in 0..config.device_threads.max(1) {
            let channel = if config.clone_fds && index > 0 {
                Arc::new(DeviceChannel::new(mount::clone_device(self.primary.fd.as_fd())?))
            } else {
                Arc::clone(&self.primary)
            };
            let shared = Arc::clone(&self.shared);
            let thread = std::thread::Builder::new()
                .name(format!("{}-dev{index}", config.name))
                .spawn(move || device::serve(channel, shared, buffer_bytes))?;
            self.threads.push(thread);
        }
        Ok(())
    }

    /// One queue per possible CPU, as the kernel requires before it switches to the rings;
    /// if any queue fails to register, requests stay on /dev/fuse.
    fn start_rings(&mut self, config: &SessionConfig) {
        let queues = match uring::possible_cpus() {
            Ok(queues) => queues,
            Err(e) => {
                self.shared
                    .set_transport(TransportState::device(format!("cannot count CPUs: {e}")));
                return;
            }
        };
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let depth = config.uring_queue_depth.clamp(1, 1024);
        let payload_bytes = self.negotiated.ring_payload_bytes();
        for qid in 0..queues {
            let setup = uring::QueueSetup {
                qid: qid as u16,
                depth,
                payload_bytes,
                device_fd: self.primary.fd.as_raw_fd(),
            };
            let shared = Arc::clone(&self.shared);
            let primary = Arc::clone(&self.primary);
            let ready = ready_tx.clone();
            let running = Arc::clone(&self.uring_threads);
            let spawned = std::thread::Builder::new()
                .name(format!("{}-uring{qid}", config.name))
                .spawn(move || {
                    running.fetch_add(1, Ordering::SeqCst);
                    // The queue holds the device file open for as long as it serves.
                    uring::serve(setup, shared, ready, primary);
                    running.fetch_sub(1, Ordering::SeqCst);
                });
            match spawned {
                Ok(thread) => self.threads.push(thread),
                Err(e) => {
                    let _ =
                        ready_tx.send(Err(format!("queue {qid}: cannot start its thread: {e}")));
                }
            }
        }
        drop(ready_tx);
        let mut failures = Vec::new();
        for _ in 0..queues {
            match ready_rx.recv_timeout(std::time::Duration::from_secs(10)) {
                Ok(Ok(())) => {}
                Ok(Err(why)) => failures.push(why),
                Err(_) => failures.push("a queue did not report within 10 s".to_owned()),
            }
        }
        if failures.is_empty() {
            let entry_bytes = (payload_bytes + abi::URING_HEADER_BYTES) as u64;
            self.shared.set_transport(TransportState {
                transport: Transport::IoUring,
                reason: format!("{queues} queues of {depth} entries"),
                uring_queues: queues,
                uring_buffer_bytes: queues as u64 * depth as u64 * entry_bytes,
            });
            tracing::info!(
                queues,
                depth = config.uring_queue_depth,
                "fuse: requests go through io_uring"
            );
        } else {
            let reason = format!("io_uring registration failed: {}", failures.join("; "));
            tracing::warn!("fuse: {reason}; requests stay on /dev/fuse");
            self.shared.set_transport(TransportState::device(reason));
        }
    }

    /// FUSE_NOTIFY_RESEND: the kernel queues again every request that was read on this
    /// connection's open files and not answered, marked with [`abi::UNIQUE_RESEND`].
    pub fn notify_resend(&self) -> io::Result<()> {
        device::write_reply(&self.primary.fd, 0, abi::NOTIFY_RESEND, &Body::Empty)
    }

    /// Begins handing the connection over to a successor process (an engine upgrade under
    /// a holder): from now on a request read on the session's own file whose [`Reply`] is
    /// dropped unanswered (its task cancelled, its runtime shut down, a panic unwinding) is
    /// left in the kernel, not answered EIO, and the successor gets it with
    /// [`Session::notify_resend`]. Replies that are sent still go out, so requests that finish
    /// meanwhile are answered as usual.
    ///
    /// Only worth it when another process keeps that file open (the holder, with
    /// [`SessionConfig::clone_fds`] off): the kernel resends only what was read on a file
    /// still open, and ends a closed file's requests with ECONNABORTED. Requests read on
    /// clones or io_uring entries, which cannot be resent, are still answered EIO when
    /// dropped. One way: a session that began a handover is not meant to go back to serving
    /// (nothing would answer what it left), so there is no undo.
    pub fn begin_handover(&self) {
        self.primary.begin_handover();
        tracing::info!(
            "fuse: handing over; requests dropped from now on are left for the successor"
        );
    }

    pub fn negotiated(&self) -> Negotiated {
        self.negotiated
    }

    /// The session's /dev/fuse file, e.g. to hand to a holder process.
    pub fn device_fd(&self) -> BorrowedFd<'_> {
        self.primary.fd.as_fd()
    }

    pub fn stats(&self) -> SessionStats {
        self.monitor().stats()
    }

    /// A handle that reads the session's statistics from anywhere, for as long as it lives.
    pub fn monitor(&self) -> SessionMonitor {
        SessionMonitor(Arc::clone(&self.shared))
    }

    /// Waits until every thread has ended (the kernel ended the connection).
    pub fn join(mut self) {
        for thread in self.threads.drain(..) {
            if thread.join().is_err() {
                tracing::warn!("fuse: a session thread panicked");
            }
        }
    }
}

/// Reads the kernel's INIT from `device` and answers it.
fn handshake(
    device: &Arc<DeviceChannel>,
    fs: &dyn Filesystem,
    want_uring: bool,
) -> io::Result<(Negotiated, KernelInit)> {
    let mut buffer = vec![0u8; abi::MIN_READ_BUFFER_BYTES.max(64 * 1024)];
    // Bounded: the kernel queues INIT at mount and nothing before it; a few interrupted
    // reads are all that can precede it.
    for _ in 0..1000 {
        let Some(n) = device::read_request(&device.fd, &mut buffer)? else { continue };
        let parsed = request::parse(&buffer[..n]).map_err(|why| {
            io::Error::new(io::ErrorKind::InvalidData, format!("first request: {why}"))
        })?;
        let Operation::Init(init_in) = parsed.operation else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("first request is opcode {}, not INIT", parsed.header.opcode),
            ));
        };
        let kernel = KernelInit::from_wire(&init_in);
        let options: InitOptions = fs.init(&kernel);
        let reply =
            Reply::new(parsed.unique(), abi::opcode::INIT, Channel::Device(Arc::clone(device)));
        return match init::negotiate(&kernel, &options, want_uring) {
            Ok((out, negotiated)) => {
                reply.init(&out);
                tracing::info!(
                    minor = negotiated.minor,
                    max_write = negotiated.max_write_bytes,
                    flags = format!("{:#x}", negotiated.flags),
                    "fuse: INIT answered"
                );
                Ok((negotiated, kernel))
            }
            Err(why) => {
                reply.error(Errno::EPROTO);
                Err(io::Error::new(io::ErrorKind::Unsupported, why.to_string()))
            }
        };
    }
    Err(io::Error::other("no INIT from the kernel after 1000 reads"))
}

fn uring_reason(config: &SessionConfig, kernel: &KernelInit, negotiated: &Negotiated) -> String {
    if !config.uring {
        "io_uring not asked for".to_owned()
    } else if !kernel.offers(abi::init_flags::OVER_IO_URING) {
        "the kernel does not offer FUSE over io_uring (needs Linux 6.14+ with CONFIG_FUSE_IO_URING and /sys/module/fuse/parameters/enable_uring = Y)".to_owned()
    } else if negotiated.over_io_uring() {
        "negotiated".to_owned()
    } else {
        "not negotiated".to_owned()
    }
}
