//! The I/O of one write cycle on every online leg of a vdev, the legs in parallel.
//!
//! The first leg is written on the calling thread; each other leg on a thread kept for it
//! (`LegThreads`), started the first time a cycle needs it and kept for the vdev's life. A
//! mirror's commit so hands its second leg to a thread that is already waiting, instead of
//! creating a thread and joining it for every commit (`std::thread::scope`), which is what a
//! mirrored commit did before: a `clone`, a stack mapping and an exit per commit. On this 2-core
//! VM (`bench/profile/thread-handoff.rs`): 152-179 µs against 20-22 µs for a hand-off to a
//! waiting thread while a build ran, 66-81 µs against 53-55 µs when quiet (docs/design/0004,
//! "The log file's inode on every commit; a mirror's thread per commit").
//!
//! A kept thread gets its own copy of the cycle's bytes (a log block is a few KiB; the copy
//! costs about a microsecond), so nothing it touches is borrowed from the caller. The caller
//! waits for every leg's answer before it returns, as before: a cycle is over when every leg
//! has answered, and a hung leg holds the cycle as it did. Each leg clears its `LegHealth`'s
//! cycle mark when it answers, so `status` shows which leg a stalled cycle waits for.

use std::io;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::aligned::AlignedBuf;
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
/// today; a mirror has two or three) runs the rest on threads of their own per cycle.
const KEPT_THREADS_MAX: usize = 8;

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

/// The threads a vdev keeps for the legs after its first.
#[derive(Default)]
pub(crate) struct LegThreads {
    threads: Mutex<Vec<LegThread>>,
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

fn spawn_leg_thread(number: usize) -> io::Result<LegThread> {
    let (jobs, job_rx) = sync_channel::<Job>(1);
    let (answer_tx, answers) = sync_channel::<io::Result<()>>(1);
    std::thread::Builder::new().name(format!("slog-leg-{number}")).spawn(move || {
        // Ends when the vdev drops its end (the receive fails) or stops listening.
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
    /// parallel: the first on this thread, each other on a kept thread. Answers come in the
    /// targets' order, one per target.
    pub fn run(
        &self,
        targets: &[LegTarget],
        writes: &[LegWrite<'_>],
        flush: bool,
    ) -> Vec<(usize, io::Result<()>)> {
        let Some((first, rest)) = targets.split_first() else {
            return Vec::new();
        };
        let first_cycle = || cycle_on(first.device.as_ref(), &first.health, writes, flush);
        if rest.is_empty() {
            return vec![(first.index, first_cycle())];
        }
        let mut threads = self.threads.lock();
        // Hand each other leg to its thread first, so they all run while this one writes.
        let mut handed: Vec<bool> = Vec::with_capacity(rest.len());
        for (number, target) in rest.iter().enumerate() {
            handed.push(
                number < KEPT_THREADS_MAX && hand_over(&mut threads, number, target, writes, flush),
            );
        }
        // Legs no kept thread took (past the cap, or a thread could not be started) run on
        // threads of their own, as every cycle did before.
        std::thread::scope(|scope| {
            let own: Vec<_> = rest
                .iter()
                .zip(&handed)
                .map(|(t, handed)| {
                    (!*handed).then(|| {
                        scope.spawn(|| cycle_on(t.device.as_ref(), &t.health, writes, flush))
                    })
                })
                .collect();
            let mut results = vec![(first.index, first_cycle())];
            for (number, (target, own)) in rest.iter().zip(own).enumerate() {
                let result = match own {
                    Some(handle) => {
                        handle.join().unwrap_or_else(|_| Err(io::Error::other("leg I/O panicked")))
                    }
                    None => threads[number].answers.recv().unwrap_or_else(|_| {
                        Err(io::Error::other("log leg thread ended without an answer"))
                    }),
                };
                results.push((target.index, result));
            }
            results
        })
    }
}

/// Gives the cycle of the `number`-th other leg to its kept thread, starting it (or a
/// replacement for one that ended) when needed. False when no thread could take it.
fn hand_over(
    threads: &mut Vec<LegThread>,
    number: usize,
    target: &LegTarget,
    writes: &[LegWrite<'_>],
    flush: bool,
) -> bool {
    let job = || Job {
        device: Arc::clone(&target.device),
        health: Arc::clone(&target.health),
        writes: writes.iter().map(|(o, b)| (*o, AlignedBuf::copy_from(b), b.len())).collect(),
        flush,
    };
    if let Some(thread) = threads.get(number) {
        if thread.jobs.send(job()).is_ok() {
            return true;
        }
    }
    let Ok(fresh) = spawn_leg_thread(number + 1) else {
        return false;
    };
    if fresh.jobs.send(job()).is_err() {
        return false;
    }
    if number < threads.len() {
        threads[number] = fresh;
    } else {
        // Threads are kept in leg order: a gap means an earlier start failed this cycle.
        if number != threads.len() {
            return false;
        }
        threads.push(fresh);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A device that counts its writes and flushes, and panics on every call when told to.
    struct TestDevice {
        path: PathBuf,
        writes: AtomicUsize,
        flushes: AtomicUsize,
        panics: bool,
        last: Mutex<Vec<u8>>,
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
                })
            })
            .collect()
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
                let results = threads.run(&targets(&devices), &[(4096, &bytes)], round == 2);
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
        assert_eq!(threads.threads.lock().len(), 3, "one kept thread per leg after the first");
    }

    #[test]
    fn a_panic_on_either_kind_of_thread_fails_that_leg_alone() {
        let threads = LegThreads::default();
        for bad in 0..3 {
            let devices = devices(3, Some(bad));
            let results = threads.run(&targets(&devices), &[(0, &[7u8; 512][..])], true);
            for (index, result) in results {
                assert_eq!(result.is_err(), index == bad, "bad leg {bad}: leg {index}");
            }
        }
        // The kept threads survived their legs' panics and serve the next cycle.
        let devices = devices(3, None);
        let results = threads.run(&targets(&devices), &[], true);
        assert!(results.iter().all(|(_, r)| r.is_ok()));
        assert!(devices.iter().all(|d| d.flushes.load(Ordering::SeqCst) == 1));
    }
}
