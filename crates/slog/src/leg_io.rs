//! The I/O of one write cycle on every online leg of a vdev, the legs in parallel.
//!
//! A single leg is written on the calling thread. A mirror hands every leg to a thread kept
//! for it (`LegThreads`, one per leg index), started the first time a cycle needs it and kept
//! for the vdev's life, and the caller waits for their answers; with a timeout of 0 (never give
//! up) the first leg is written on the calling thread instead, the others handed over. Before, a mirrored commit
//! created a thread per leg and joined it (`std::thread::scope`): a `clone`, a stack mapping
//! and an exit per commit. On this 2-core VM (`bench/profile/thread-handoff.rs`): 152-179 µs
//! against 20-22 µs for a hand-off to a waiting thread while a build ran, 66-81 µs against
//! 53-55 µs when quiet (docs/design/0004, "The log file's inode on every commit; a mirror's
//! thread per commit").
//!
//! A kept thread gets its own copy of the cycle's bytes (a log block is a few KiB; the copy
//! costs about a microsecond), so nothing it touches is borrowed from the caller, and the
//! caller need not wait for it: a leg that has not answered `timeout_ms` after the cycle began,
//! when another leg has answered it with success, is given up on. It answers
//! `ErrorKind::TimedOut` (the vdev takes it out of service) and its thread is let go: the
//! thread ends when its device finally answers, and a later cycle on that leg starts a new one.
//! A sync write so waits for a hung leg of a mirror at most that long, once, instead of for as
//! long as the device hangs. With no leg answered the caller keeps waiting: the cycle is not
//! on any device, and the first leg to answer ends that wait. Each leg clears its
//! `LegHealth`'s cycle mark when it answers, so `status` shows which leg a cycle waits for.
//!
//! The price: a mirror's first leg, which the caller wrote itself, now waits for a thread to
//! wake, and the caller for a leg to wake it. Alternated one-writer runs (BENCHMARKS.md
//! sync-writes, bench/notes/sync-writes.md): about 15 % fewer sync writes per second on a
//! mirror, p99 about 60 µs more. A timeout of 0 keeps the old path for who prefers that to
//! surviving a hung leg.

use std::io;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::aligned::AlignedBuf;
use crate::clock::Clock;
use crate::device::LogDevice;
use crate::status::LegHealth;

/// One write of a cycle: bytes at an offset.
pub(crate) type LegWrite<'a> = (u64, &'a [u8]);

/// A leg a cycle writes: its index in the vdev, its device, and its health (whose cycle mark
/// the leg clears when it answers).
pub(crate) struct LegTarget {
    pub index: usize,
    pub device: Arc<dyn LogDevice>,
    pub health: Arc<LegHealth>,
}

/// Threads beyond this many legs are not kept: a vdev with more legs than this (none is made
/// today; a mirror has two or three) starts a thread per cycle for the rest.
const KEPT_THREADS_MAX: usize = 8;

/// How long the caller blocks on one leg's answer before it looks at the deadline again. A
/// leg is given up on only when both the log's clock and the caller's own waiting say the
/// timeout passed: the clock is injected (a test or the simulation moves it, and may move it
/// by seconds at once while another thread sleeps), and a jump of it alone must not fault a
/// leg that answers in real time; the slices counted alone would ignore a manual clock.
const WAIT_SLICE_MS: u64 = 10;

/// What a kept thread does for one cycle: its leg's writes (its own copy of the bytes), then a
/// flush when asked.
struct Job {
    device: Arc<dyn LogDevice>,
    health: Arc<LegHealth>,
    writes: Vec<(u64, AlignedBuf, usize)>,
    flush: bool,
}

/// A kept thread: one job at a time in, one answer out.
struct LegThread {
    jobs: SyncSender<Job>,
    answers: Receiver<io::Result<()>>,
}

/// The threads a vdev keeps for its legs, by leg index (`None`: not started, or let go).
#[derive(Default)]
pub(crate) struct LegThreads {
    threads: Mutex<Vec<Option<LegThread>>>,
}

/// When a cycle gives up on a leg that does not answer (see the module comment).
pub(crate) struct LegDeadline<'a> {
    pub clock: &'a dyn Clock,
    /// The log clock's monotonic ms when the cycle began.
    pub started_ms: u64,
    /// 0: never give up on a leg (the first is then written on the calling thread).
    pub timeout_ms: u64,
}

/// The cycle on one device: the writes in order, then the flush when `flush`. A panic in the
/// device fails this leg alone. The leg's cycle mark is cleared when it answers.
fn cycle_on(
    device: &dyn LogDevice,
    health: &LegHealth,
    writes: &[LegWrite<'_>],
    flush: bool,
) -> io::Result<()> {
    let run = || {
        for (offset, bytes) in writes {
            device.write_at(*offset, bytes)?;
        }
        if flush {
            device.flush()?;
        }
        Ok(())
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run))
        .unwrap_or_else(|_| Err(io::Error::other("leg I/O panicked")));
    health.io_finished();
    result
}

fn spawn_leg_thread(index: usize) -> io::Result<LegThread> {
    let (jobs, job_rx) = sync_channel::<Job>(1);
    let (answer_tx, answers) = sync_channel::<io::Result<()>>(1);
    std::thread::Builder::new().name(format!("slog-leg-{index}")).spawn(move || {
        // Ends when the vdev drops its end (the receive or the send fails): when the vdev goes,
        // or when a cycle gave up on this leg.
        while let Ok(job) = job_rx.recv() {
            let writes: Vec<LegWrite<'_>> =
                job.writes.iter().map(|(offset, buf, len)| (*offset, &buf[..*len])).collect();
            let result = cycle_on(job.device.as_ref(), &job.health, &writes, job.flush);
            if answer_tx.send(result).is_err() {
                return;
            }
        }
    })?;
    Ok(LegThread { jobs, answers })
}

impl LegThreads {
    /// Runs the cycle (`writes`, then a flush when `flush`) on every target device, in
    /// parallel. Answers come in the targets' order, one per target; a leg given up on at the
    /// deadline answers `ErrorKind::TimedOut`.
    pub fn run(
        &self,
        targets: &[LegTarget],
        writes: &[LegWrite<'_>],
        flush: bool,
        deadline: &LegDeadline<'_>,
    ) -> Vec<(usize, io::Result<()>)> {
        let Some((first, rest)) = targets.split_first() else {
            return Vec::new();
        };
        if rest.is_empty() {
            return vec![(
                first.index,
                cycle_on(first.device.as_ref(), &first.health, writes, flush),
            )];
        }
        let first_here = deadline.timeout_ms == 0;
        let mut threads = self.threads.lock();
        // Every leg is handed over before any answer is awaited, so they all run at once.
        let handed: Vec<Option<Handed>> = targets
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if i == 0 && first_here {
                    None
                } else {
                    hand_over(&mut threads, t, writes, flush)
                }
            })
            .collect();
        // The first leg when it is written here, and a leg no thread took (none could be
        // started): here, after the others started.
        let mut answers: Vec<Option<io::Result<()>>> = targets
            .iter()
            .zip(&handed)
            .map(|(t, h)| {
                h.is_none().then(|| cycle_on(t.device.as_ref(), &t.health, writes, flush))
            })
            .collect();
        let receivers: Vec<Option<&Receiver<io::Result<()>>>> =
            handed.iter().map(|h| h.as_ref().map(|h| h.answers(&threads))).collect();
        let given_up = await_answers(&receivers, &mut answers, deadline);
        drop(receivers);
        for &i in &given_up {
            // Its thread is still in the device: let it go (it ends when the device answers).
            if let Some(slot) = threads.get_mut(targets[i].index) {
                *slot = None;
            }
        }
        targets
            .iter()
            .zip(answers)
            .map(|(target, answer)| {
                (target.index, answer.expect("every leg answered or was given up on"))
            })
            .collect()
    }
}

/// Collects the answer of every leg that has a receiver, until all have answered or the
/// deadline has passed (by the clock and by this caller's waiting, `WAIT_SLICE_MS`) with at
/// least one success; those still out then answer `TimedOut`. Returns their positions.
fn await_answers(
    pending: &[Option<&Receiver<io::Result<()>>>],
    answers: &mut [Option<io::Result<()>>],
    deadline: &LegDeadline<'_>,
) -> Vec<usize> {
    let gone = || Err(io::Error::other("log leg thread ended without an answer"));
    let mut waited_slices_ms = 0u64;
    loop {
        for (rx, answer) in pending.iter().zip(answers.iter_mut()) {
            if let (Some(rx), None) = (rx, &answer) {
                match rx.try_recv() {
                    Ok(result) => *answer = Some(result),
                    Err(TryRecvError::Disconnected) => *answer = Some(gone()),
                    Err(TryRecvError::Empty) => {}
                }
            }
        }
        let Some(first_out) = answers.iter().position(Option::is_none) else {
            return Vec::new();
        };
        let succeeded = answers.iter().any(|a| matches!(a, Some(Ok(()))));
        let waited_ms = deadline.clock.mono_ms().saturating_sub(deadline.started_ms);
        let timeout_ms = deadline.timeout_ms;
        let passed = timeout_ms > 0 && waited_ms >= timeout_ms && waited_slices_ms >= timeout_ms;
        if succeeded && passed {
            let out: Vec<usize> = (0..answers.len()).filter(|&i| answers[i].is_none()).collect();
            for &i in &out {
                answers[i] = Some(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no answer within {} ms", deadline.timeout_ms),
                )));
            }
            return out;
        }
        let rx = pending[first_out].expect("a leg still out has a receiver");
        match rx.recv_timeout(Duration::from_millis(WAIT_SLICE_MS)) {
            Ok(result) => answers[first_out] = Some(result),
            Err(RecvTimeoutError::Disconnected) => answers[first_out] = Some(gone()),
            Err(RecvTimeoutError::Timeout) => waited_slices_ms += WAIT_SLICE_MS,
        }
    }
}

/// Which thread took a leg's cycle.
enum Handed {
    /// The one kept for this leg index.
    Kept(usize),
    /// One started for this cycle (legs past [`KEPT_THREADS_MAX`]); it ends once dropped.
    Once(LegThread),
}

impl Handed {
    fn answers<'a>(&'a self, threads: &'a [Option<LegThread>]) -> &'a Receiver<io::Result<()>> {
        match self {
            Handed::Kept(index) => &threads[*index].as_ref().expect("a kept thread").answers,
            Handed::Once(thread) => &thread.answers,
        }
    }
}

/// Gives the cycle of `target` to the thread kept for its leg, starting it (or a replacement
/// for one that ended or was let go) when needed. Legs past [`KEPT_THREADS_MAX`] get a thread
/// for this cycle only. `None` when no thread could take it.
fn hand_over(
    threads: &mut Vec<Option<LegThread>>,
    target: &LegTarget,
    writes: &[LegWrite<'_>],
    flush: bool,
) -> Option<Handed> {
    let job = || Job {
        device: Arc::clone(&target.device),
        health: Arc::clone(&target.health),
        writes: writes.iter().map(|(o, b)| (*o, AlignedBuf::copy_from(b), b.len())).collect(),
        flush,
    };
    let index = target.index;
    if index >= KEPT_THREADS_MAX {
        let once = spawn_leg_thread(index).ok()?;
        once.jobs.send(job()).ok()?;
        return Some(Handed::Once(once));
    }
    if threads.len() <= index {
        threads.resize_with(index + 1, || None);
    }
    // A kept thread is idle between cycles (its channel holds one job), so a send to a live
    // one cannot block; a failed send means the thread ended.
    if let Some(thread) = &threads[index] {
        if thread.jobs.try_send(job()).is_ok() {
            return Some(Handed::Kept(index));
        }
    }
    let fresh = spawn_leg_thread(index).ok()?;
    fresh.jobs.send(job()).ok()?;
    threads[index] = Some(fresh);
    Some(Handed::Kept(index))
}

#[cfg(test)]
// Real time is the point of the deadline tests: a leg's real waiting is half of the deadline.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A device that counts its writes and flushes, panics on every call when told to, and
    /// holds its flushes while `hang` is set.
    struct TestDevice {
        path: PathBuf,
        writes: AtomicUsize,
        flushes: AtomicUsize,
        panics: bool,
        last: Mutex<Vec<u8>>,
        hang: Mutex<bool>,
        hang_changed: parking_lot::Condvar,
        flushes_held: AtomicUsize,
    }

    impl TestDevice {
        fn set_hang(&self, hang: bool) {
            *self.hang.lock() = hang;
            self.hang_changed.notify_all();
        }
    }

    impl LogDevice for TestDevice {
        fn read_at(&self, _offset_bytes: u64, _buf: &mut [u8]) -> io::Result<()> {
            Ok(())
        }
        fn write_at(&self, _offset_bytes: u64, buf: &[u8]) -> io::Result<()> {
            assert!(!self.panics, "injected");
            self.writes.fetch_add(1, Ordering::SeqCst);
            *self.last.lock() = buf.to_vec();
            Ok(())
        }
        fn flush(&self) -> io::Result<()> {
            assert!(!self.panics, "injected");
            let mut hang = self.hang.lock();
            if *hang {
                self.flushes_held.fetch_add(1, Ordering::SeqCst);
                while *hang {
                    self.hang_changed.wait(&mut hang);
                }
            }
            self.flushes.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn len_bytes(&self) -> u64 {
            1 << 20
        }
        fn is_volatile(&self) -> bool {
            false
        }
        fn path(&self) -> &Path {
            &self.path
        }
    }

    fn devices(n: usize, panics: Option<usize>) -> Vec<Arc<TestDevice>> {
        (0..n)
            .map(|i| {
                Arc::new(TestDevice {
                    path: PathBuf::from(format!("leg{i}")),
                    writes: AtomicUsize::new(0),
                    flushes: AtomicUsize::new(0),
                    panics: panics == Some(i),
                    last: Mutex::new(Vec::new()),
                    hang: Mutex::new(false),
                    hang_changed: parking_lot::Condvar::new(),
                    flushes_held: AtomicUsize::new(0),
                })
            })
            .collect()
    }

    /// A deadline that never passes.
    fn never() -> LegDeadline<'static> {
        let frozen: &'static crate::clock::ManualClock = Box::leak(Box::default());
        LegDeadline { clock: frozen, started_ms: 0, timeout_ms: u64::MAX }
    }

    fn targets(devices: &[Arc<TestDevice>]) -> Vec<LegTarget> {
        devices
            .iter()
            .enumerate()
            .map(|(i, d)| LegTarget {
                index: i,
                device: Arc::clone(d) as Arc<dyn LogDevice>,
                health: Arc::new(LegHealth::new(crate::status::HealthState::Online, false)),
            })
            .collect()
    }

    #[test]
    fn every_leg_gets_the_same_bytes_once_and_answers_in_order() {
        let threads = LegThreads::default();
        let bytes: Vec<u8> = (0..4608u32).map(|i| (i % 251) as u8).collect();
        for n in 0..5 {
            let devices = devices(n, None);
            // Twice: the second cycle reuses the threads the first started.
            for round in 1..=2 {
                let results =
                    threads.run(&targets(&devices), &[(4096, &bytes)], round == 2, &never());
                let order: Vec<usize> = results.iter().map(|(i, _)| *i).collect();
                assert_eq!(order, (0..n).collect::<Vec<_>>());
                assert!(results.iter().all(|(_, r)| r.is_ok()));
            }
            for d in &devices {
                assert_eq!(d.writes.load(Ordering::SeqCst), 2, "{}", d.path.display());
                assert_eq!(d.flushes.load(Ordering::SeqCst), 1, "{}", d.path.display());
                assert_eq!(*d.last.lock(), bytes, "{}", d.path.display());
            }
        }
        let kept = threads.threads.lock().iter().filter(|t| t.is_some()).count();
        assert_eq!(kept, 4, "one kept thread per leg of a mirror, none for a single leg");
    }

    #[test]
    fn a_panic_on_either_kind_of_thread_fails_that_leg_alone() {
        let threads = LegThreads::default();
        for bad in 0..3 {
            let devices = devices(3, Some(bad));
            let results = threads.run(&targets(&devices), &[(0, &[7u8; 512][..])], true, &never());
            for (index, result) in results {
                assert_eq!(result.is_err(), index == bad, "bad leg {bad}: leg {index}");
            }
        }
        // The kept threads survived their legs' panics and serve the next cycle.
        let devices = devices(3, None);
        let results = threads.run(&targets(&devices), &[], true, &never());
        assert!(results.iter().all(|(_, r)| r.is_ok()));
        assert!(devices.iter().all(|d| d.flushes.load(Ordering::SeqCst) == 1));
    }

    /// Runs one flushed cycle on another thread, with a deadline of `timeout_ms` on `clock`.
    fn cycle_in_background(
        threads: &Arc<LegThreads>,
        targets: Vec<LegTarget>,
        clock: &Arc<crate::clock::ManualClock>,
        timeout_ms: u64,
    ) -> std::thread::JoinHandle<Vec<(usize, io::Result<()>)>> {
        let (threads, clock) = (Arc::clone(threads), Arc::clone(clock));
        std::thread::spawn(move || {
            let deadline =
                LegDeadline { clock: clock.as_ref(), started_ms: clock.mono_ms(), timeout_ms };
            threads.run(&targets, &[(0, &[9u8; 512][..])], true, &deadline)
        })
    }

    fn wait_for(what: &str, done: impl Fn() -> bool) {
        for _ in 0..3000 {
            if done() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("timed out waiting for {what}");
    }

    #[test]
    fn a_mirror_gives_up_on_a_hung_leg_once_another_answered_and_the_deadline_passed() {
        let threads = Arc::new(LegThreads::default());
        let clock = Arc::new(crate::clock::ManualClock::default());
        let devices = devices(2, None);
        devices[1].set_hang(true);
        let cycle = cycle_in_background(&threads, targets(&devices), &clock, 100);
        wait_for("leg 1's flush to hang", || devices[1].flushes_held.load(Ordering::SeqCst) == 1);
        // Real waiting alone does not give up on it: the log's clock has not moved.
        std::thread::sleep(Duration::from_millis(300));
        assert!(!cycle.is_finished(), "the cycle waits while the log's clock stands still");
        clock.advance(Duration::from_millis(100));
        let results = cycle.join().expect("cycle");
        assert!(results[0].1.is_ok());
        let err = results[1].1.as_ref().expect_err("leg 1 was given up on");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(threads.threads.lock()[1].is_none(), "the hung leg's thread was let go");
        // The device answers at last: its thread ends. A later cycle on it starts a new one.
        devices[1].set_hang(false);
        let results = threads.run(&targets(&devices), &[], true, &never());
        assert!(results.iter().all(|(_, r)| r.is_ok()), "{results:?}");
        // Both flushes finish: the new cycle's and the released one, whose thread (let go) may
        // count it after this cycle returned.
        wait_for("both of leg 1's flushes", || devices[1].flushes.load(Ordering::SeqCst) == 2);
    }

    #[test]
    fn a_clock_jump_alone_does_not_give_up_on_a_leg_nor_does_a_cycle_with_no_answer() {
        let threads = Arc::new(LegThreads::default());
        let clock = Arc::new(crate::clock::ManualClock::default());
        let devices = devices(2, None);
        // Both legs hang: nothing to go on with, so the cycle waits past its deadline.
        devices[0].set_hang(true);
        devices[1].set_hang(true);
        let cycle = cycle_in_background(&threads, targets(&devices), &clock, 50);
        wait_for("both flushes to hang", || {
            devices.iter().all(|d| d.flushes_held.load(Ordering::SeqCst) == 1)
        });
        clock.advance(Duration::from_secs(3600));
        std::thread::sleep(Duration::from_millis(300));
        assert!(!cycle.is_finished(), "no leg answered: the cycle is on no device yet");
        devices[0].set_hang(false);
        let results = cycle.join().expect("cycle");
        assert!(results[0].1.is_ok());
        assert_eq!(results[1].1.as_ref().map_err(|e| e.kind()), Err(io::ErrorKind::TimedOut));
        devices[1].set_hang(false);
        // The clock jumps by an hour (another thread's manual sleep) while leg 1 is slow for a
        // tenth of a second, far less than its timeout of real waiting: it is not given up on.
        let clock = Arc::new(crate::clock::ManualClock::default());
        devices[1].set_hang(true);
        let cycle = cycle_in_background(&threads, targets(&devices), &clock, 5_000);
        wait_for("leg 1's flush to hang", || devices[1].flushes_held.load(Ordering::SeqCst) == 2);
        clock.advance(Duration::from_secs(3600));
        std::thread::sleep(Duration::from_millis(100));
        devices[1].set_hang(false);
        let results = cycle.join().expect("cycle");
        assert!(results.iter().all(|(_, r)| r.is_ok()), "{results:?}");
    }

    #[test]
    fn with_a_timeout_of_0_the_first_leg_is_written_here_and_no_leg_is_given_up_on() {
        let threads = Arc::new(LegThreads::default());
        let clock = Arc::new(crate::clock::ManualClock::default());
        let devices = devices(3, None);
        devices[2].set_hang(true);
        let cycle = cycle_in_background(&threads, targets(&devices), &clock, 0);
        wait_for("leg 2's flush to hang", || devices[2].flushes_held.load(Ordering::SeqCst) == 1);
        clock.advance(Duration::from_secs(3600));
        std::thread::sleep(Duration::from_millis(100));
        assert!(!cycle.is_finished(), "0 means no leg is ever given up on");
        devices[2].set_hang(false);
        let results = cycle.join().expect("cycle");
        assert!(results.iter().all(|(_, r)| r.is_ok()), "{results:?}");
        let kept: Vec<bool> = threads.threads.lock().iter().map(Option::is_some).collect();
        assert_eq!(kept, [false, true, true], "the first leg was written on the calling thread");
    }
}
