//! Cache-device (L2ARC) reads from async code without a thread hop: one io_uring per block
//! cache. A read is submitted from the task that wants it (one `io_uring_enter`); the ring posts
//! its completion to an eventfd that tokio's reactor watches, and a reaper task hands each
//! completion to its waiting task. A blocking read (`spawn_blocking` + `pread`) costs a wake of
//! a blocking thread and two context switches per read; on a loaded machine that, not the device,
//! limited L2ARC reads (issue #21, `cache-reads`).
//!
//! At most [`READS_IN_FLIGHT_MAX`] reads are in flight (a semaphore, taken before submission and
//! released at completion), so the ring can never overflow. Each in-flight read's buffer is held
//! by the in-flight table, not by the waiting future: a read whose waiter gave up still has a
//! buffer for the kernel to fill, and the buffer is freed only when its completion is reaped.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fardisk_arc::{PlannedRead, ReadBuf};
use io_uring::{opcode, types, IoUring};
use parking_lot::Mutex;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

/// Reads in flight at once, and the ring's submission queue length.
pub const READS_IN_FLIGHT_MAX: u32 = 128;
/// When the reads' owner goes away with reads in flight, it waits for them this many times for
/// 10 ms; buffers of reads still running after that are leaked rather than freed under the
/// kernel.
const DRAIN_WAITS_MAX: u32 = 500;

type Completion = (ReadBuf, std::io::Result<usize>);

struct Pending {
    buf: ReadBuf,
    done: oneshot::Sender<Completion>,
    _permit: OwnedSemaphorePermit,
}

/// In-flight reads by id (the SQE's user data), with a free list: bounded by the semaphore.
#[derive(Default)]
struct Inflight {
    slots: Vec<Option<Pending>>,
    free: Vec<usize>,
    count: usize,
}

impl Inflight {
    fn insert(&mut self, pending: Pending) -> usize {
        self.count += 1;
        match self.free.pop() {
            Some(id) => {
                self.slots[id] = Some(pending);
                id
            }
            None => {
                self.slots.push(Some(pending));
                self.slots.len() - 1
            }
        }
    }

    fn take(&mut self, id: usize) -> Option<Pending> {
        let pending = self.slots.get_mut(id)?.take()?;
        self.free.push(id);
        self.count -= 1;
        Some(pending)
    }
}

struct Shared {
    // `Drop` waits for the reads in flight first; then the ring closes before the table (and
    // any buffer left in it) is freed.
    ring: Mutex<IoUring>,
    inflight: Mutex<Inflight>,
    permits: Arc<Semaphore>,
    eventfd: AsyncFd<OwnedFd>,
    stopping: AtomicBool,
    /// Cleared when the reaper task ends, also when its runtime shuts down and drops it: no
    /// completion would be delivered any more, so the owner starts another reader.
    reaper_alive: AtomicBool,
}

/// The io_uring reader of one block cache. Dropping it stops its reaper once the reads in
/// flight have completed.
pub struct DeviceReads {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for DeviceReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceReads").finish_non_exhaustive()
    }
}

fn new_eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: plain syscall; a non-negative result is a new descriptor that we own.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl DeviceReads {
    /// A ring and its reaper task on the current tokio runtime; an error when the kernel or the
    /// sandbox refuses io_uring (the caller then reads on blocking threads).
    pub fn start() -> std::io::Result<DeviceReads> {
        let ring = IoUring::new(READS_IN_FLIGHT_MAX)?;
        let eventfd = new_eventfd()?;
        ring.submitter().register_eventfd(eventfd.as_raw_fd())?;
        // SAFETY: the `OwnedFd` owns the eventfd and moves into the `AsyncFd`, so the descriptor
        // stays open and the same for the `AsyncFd`'s whole life.
        let eventfd = unsafe { AsyncFd::register_with_interest(eventfd, Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
        let shared = Arc::new(Shared {
            ring: Mutex::new(ring),
            inflight: Mutex::new(Inflight::default()),
            permits: Arc::new(Semaphore::new(READS_IN_FLIGHT_MAX as usize)),
            eventfd,
            stopping: AtomicBool::new(false),
            reaper_alive: AtomicBool::new(true),
        });
        tokio::spawn(reap(Arc::clone(&shared)));
        Ok(DeviceReads { shared })
    }

    /// Whether completions are still delivered (the reaper's runtime is running).
    pub fn is_alive(&self) -> bool {
        self.shared.reaper_alive.load(Ordering::Acquire)
    }

    /// Reads `plan`'s units into a fresh buffer; returns the buffer and the bytes read.
    pub async fn read(&self, plan: &PlannedRead) -> std::io::Result<(ReadBuf, usize)> {
        let permit = Arc::clone(&self.shared.permits)
            .acquire_owned()
            .await
            .map_err(|_| std::io::Error::other("device reads closed"))?;
        let mut buf = plan.buffer();
        let (ptr, len) = (buf.as_mut_ptr(), buf.len() as u32);
        let (done, wait) = oneshot::channel();
        let id = self.shared.inflight.lock().insert(Pending { buf, done, _permit: permit });
        let entry = opcode::Read::new(types::Fd(plan.fd()), ptr, len)
            .offset(plan.offset_bytes())
            .build()
            .user_data(id as u64);
        let done = {
            let mut ring = self.shared.ring.lock();
            // SAFETY: the buffer behind `ptr` is owned by the in-flight table until this entry's
            // completion is reaped (moving `ReadBuf` does not move its heap allocation), and the
            // ring holds a reference to the file from submission on. The semaphore keeps the
            // entries in flight within the queue's length, so the push cannot find it full.
            let pushed = unsafe { ring.submission().push(&entry) };
            if pushed.is_err() {
                drop(ring);
                self.shared.inflight.lock().take(id);
                return Err(std::io::Error::other("io_uring submission queue full"));
            }
            // A failed enter leaves the entry queued: the next submission carries it.
            if let Err(err) = ring.submit() {
                tracing::debug!(%err, "io_uring submit failed; the entry stays queued");
            }
            // Completions that are ready go to their readers now, not after the reactor gets
            // round to the eventfd (a busy worker polls it only every so many tasks).
            take_completions(&mut ring)
        };
        deliver(&self.shared, done);
        let (buf, result) =
            wait.await.map_err(|_| std::io::Error::other("device read abandoned"))?;
        result.map(|n| (buf, n))
    }
}

impl Drop for DeviceReads {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::Release);
        wake(&self.shared);
    }
}

/// Makes the eventfd readable so the reaper looks at its stop flag.
fn wake(shared: &Shared) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a live buffer to a descriptor we own; the result is ignored
    // (a full counter already wakes the reaper).
    unsafe { libc::write(shared.eventfd.get_ref().as_raw_fd(), one.as_ptr().cast(), 8) };
}

/// The completions the ring holds, as (read id, result).
fn take_completions(ring: &mut IoUring) -> Vec<(usize, i32)> {
    ring.completion().map(|cqe| (cqe.user_data() as usize, cqe.result())).collect()
}

/// Hands every completion the ring holds to its waiting read.
fn reap_completions(shared: &Shared) {
    let done = take_completions(&mut shared.ring.lock());
    deliver(shared, done);
}

/// Sends each completion's buffer and result to its waiting read.
fn deliver(shared: &Shared, done: Vec<(usize, i32)>) {
    if done.is_empty() {
        return;
    }
    let mut inflight = shared.inflight.lock();
    for (id, result) in done {
        let Some(pending) = inflight.take(id) else { continue };
        let result = if result < 0 {
            Err(std::io::Error::from_raw_os_error(-result))
        } else {
            Ok(result as usize)
        };
        // The waiter may have given up; the buffer is then freed here, after the kernel is done.
        let _ = pending.done.send((pending.buf, result));
    }
}

/// Marks the reaper gone when its future is dropped, however that happens.
struct AliveGuard(Arc<Shared>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.reaper_alive.store(false, Ordering::Release);
    }
}

async fn reap(shared: Arc<Shared>) {
    let _alive = AliveGuard(Arc::clone(&shared));
    loop {
        let Ok(mut guard) = shared.eventfd.readable().await else {
            tracing::warn!("io_uring eventfd failed; cache-device reads stop");
            return;
        };
        guard.clear_ready();
        let mut counter = [0u8; 8];
        // SAFETY: reads 8 bytes into a live buffer from a non-blocking descriptor we own;
        // EAGAIN (nothing pending) is fine.
        unsafe { libc::read(shared.eventfd.get_ref().as_raw_fd(), counter.as_mut_ptr().cast(), 8) };
        reap_completions(&shared);
        if shared.stopping.load(Ordering::Acquire) && shared.inflight.lock().count == 0 {
            return;
        }
    }
}

impl Drop for Shared {
    /// The runtime may drop the reaper with reads in flight: wait for them (bounded) so the
    /// kernel never writes into a freed buffer; leak the buffers of reads that never finish.
    fn drop(&mut self) {
        let timeout = types::Timespec::new().nsec(10_000_000);
        let args = types::SubmitArgs::new().timespec(&timeout);
        for _ in 0..DRAIN_WAITS_MAX {
            if self.inflight.lock().count == 0 {
                return;
            }
            let _ = self.ring.lock().submitter().submit_with_args(1, &args);
            reap_completions(self);
        }
        let mut inflight = self.inflight.lock();
        for slot in inflight.slots.iter_mut() {
            if let Some(pending) = slot.take() {
                std::mem::forget(pending.buf);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use fardisk_arc::{BlockKey, EvictionFeed, FeedItem, L2Arc, L2ArcConfig, ManualClock};

    fn block(i: u64) -> Bytes {
        Bytes::from((0..4096).map(|j| (i * 131 + j) as u8).collect::<Vec<u8>>())
    }

    /// A fresh scratch directory (on tmpfs the device is read through the page cache: the
    /// reads still go through the ring).
    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir()
            .join(format!("fardisk-device-reads-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    /// An L2ARC on a file in `dir` holding `n` blocks.
    fn filled_l2(dir: &std::path::Path, n: u64) -> L2Arc {
        let config = L2ArcConfig { log_block_bytes: 64 << 10, ..L2ArcConfig::default() };
        let clock = Arc::new(ManualClock::starting_at(std::time::Duration::ZERO));
        let l2 = L2Arc::new(config, 7, clock.clone(), 1).expect("l2arc");
        l2.add_device(&dir.join("cache0"), Some(4 << 20)).expect("device");
        let feed = EvictionFeed::new(4096, 64 << 20);
        for i in 0..n {
            feed.push(FeedItem::new(BlockKey::new(i + 1, 0), block(i)));
        }
        for _ in 0..100 {
            if feed.is_empty() {
                break;
            }
            clock.advance_ms(1000);
            l2.write_tick(&feed);
        }
        l2.flush();
        l2
    }

    async fn read_one(reads: &DeviceReads, l2: &L2Arc, i: u64, checksum: u64) -> Option<Bytes> {
        let key = BlockKey::new(i + 1, 0);
        let mut tried = Vec::new();
        for plan in l2.plan_read(&key, 4096) {
            let read = reads.read(&plan).await;
            if let Some(hit) = l2.finish_read(4096, checksum, &plan, read) {
                return Some(hit);
            }
            tried.push(plan);
        }
        l2.missed(&key, 4096, &tried);
        None
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_concurrent_reads_return_exactly_the_cached_bytes() {
        let dir = scratch("many");
        let n = 400u64;
        let l2 = filled_l2(&dir, n);
        let Ok(reads) = DeviceReads::start() else {
            eprintln!("io_uring refused here; nothing to check");
            return;
        };
        let reads = Arc::new(reads);
        let mut tasks = tokio::task::JoinSet::new();
        // More reads at once than READS_IN_FLIGHT_MAX: the rest wait for a permit.
        for i in 0..n {
            let (reads, l2) = (Arc::clone(&reads), l2.clone());
            tasks.spawn(async move {
                let want = block(i);
                let sum = xxhash_rust::xxh3::xxh3_64(&want);
                (i, read_one(&reads, &l2, i, sum).await == Some(want))
            });
        }
        let mut hits = 0;
        let all = async {
            while let Some(done) = tasks.join_next().await {
                let (i, same) = done.expect("task");
                assert!(same, "block {i} did not come back exactly");
                hits += 1;
            }
        };
        let waited = tokio::time::timeout(std::time::Duration::from_secs(60), all).await;
        assert!(waited.is_ok(), "reads did not complete within 60 s");
        assert_eq!(hits, n);
        // A wrong expected checksum is a miss, never bytes.
        assert_eq!(read_one(&reads, &l2, 3, 12345).await, None);
        assert_eq!(l2.stats().checksum_errors, 1, "the entry was this key's: dropped");
        assert_eq!(l2.stats().hits, n);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn abandoned_reads_and_a_dropped_reader_are_safe() {
        let dir = scratch("abandoned");
        let l2 = filled_l2(&dir, 64);
        let Ok(reads) = DeviceReads::start() else { return };
        let reads = Arc::new(reads);
        // Start reads and give up on them at once: their buffers stay with the ring.
        for i in 0..64u64 {
            let (reads, l2) = (Arc::clone(&reads), l2.clone());
            let task = tokio::spawn(async move { read_one(&reads, &l2, i, 0).await });
            task.abort();
        }
        let want = block(5);
        let sum = xxhash_rust::xxh3::xxh3_64(&want);
        assert_eq!(read_one(&reads, &l2, 5, sum).await, Some(want));
        drop(reads);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_reader_whose_runtime_is_gone_says_so() {
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        let Ok(reads) = runtime.block_on(async { DeviceReads::start() }) else { return };
        runtime.block_on(tokio::task::yield_now());
        assert!(reads.is_alive());
        drop(runtime);
        assert!(!reads.is_alive(), "its owner must start another reader");
    }
}
