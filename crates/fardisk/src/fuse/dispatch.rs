//! Runs data requests for the transport threads: on the transport thread itself when the
//! device answers at once, else as a tokio task.
//!
//! A transport thread (a /dev/fuse worker or an io_uring queue) hands each request to the
//! filesystem synchronously. Most device calls finish without waiting (a write goes into
//! the dirty set, a read hits the ARC): those are polled once right here and reply from
//! this thread, which saves a wake-up of a tokio worker and a thread crossing per request
//! (the largest CPU cost in docs/design/0004's profile); on io_uring the reply then goes
//! back with the queue's next COMMIT_AND_FETCH without an eventfd wake-up. A call that must
//! wait (a log commit: milliseconds; a cold read from the object store: seconds) continues
//! as a task and replies from there (a `Reply` is `Send`), so it never blocks the transport
//! thread. A semaphore bounds the requests in flight: when `requests_in_flight_max` are
//! running, the transport thread waits for a permit, so further requests stay queued in the
//! kernel instead of in our memory.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::Semaphore;

pub(crate) struct Dispatcher {
    runtime: Handle,
    permits: Arc<Semaphore>,
    pause: Pause,
    counts: Arc<DispatchCounts>,
}

/// How data requests were run: finished on the transport thread, or continued as a task.
#[derive(Debug, Default)]
pub(crate) struct DispatchCounts {
    pub(crate) finished_inline: AtomicU64,
    pub(crate) continued_as_task: AtomicU64,
}

/// Stops a dispatcher from running new data requests, for a handover to the next engine
/// (`fardisk upgrade`): a request that arrives paused is never answered, so the kernel keeps
/// it on the holder's /dev/fuse file and resends it to the next engine (FUSE_NOTIFY_RESEND).
#[derive(Clone)]
pub(crate) struct Pause {
    paused: Arc<AtomicBool>,
    permits: Arc<Semaphore>,
    permits_max: usize,
}

impl Pause {
    /// Pauses and waits (up to `wait`) until no data request runs. Returns whether none runs.
    pub(crate) fn pause_and_drain(&self, wait: Duration) -> bool {
        self.paused.store(true, Ordering::SeqCst);
        // Bounded: `wait` in steps of 5 ms. Real time: the tasks run on real threads.
        let steps = (wait.as_millis() / 5).max(1);
        for _ in 0..steps {
            if self.permits.available_permits() == self.permits_max {
                return true;
            }
            #[allow(clippy::disallowed_methods)] // waiting on real threads, see above
            std::thread::sleep(Duration::from_millis(5));
        }
        self.permits.available_permits() == self.permits_max
    }
}

impl Dispatcher {
    pub(crate) fn new(runtime: Handle, requests_in_flight_max: usize) -> Dispatcher {
        let permits = Arc::new(Semaphore::new(requests_in_flight_max));
        let pause = Pause {
            paused: Arc::new(AtomicBool::new(false)),
            permits: permits.clone(),
            permits_max: requests_in_flight_max,
        };
        Dispatcher { runtime, permits, pause, counts: Arc::default() }
    }

    pub(crate) fn counts(&self) -> Arc<DispatchCounts> {
        self.counts.clone()
    }

    pub(crate) fn pause(&self) -> Pause {
        self.pause.clone()
    }

    /// Runs `work` once a permit is free: polls it once on this thread (inside the runtime's
    /// context, so its timers and I/O work), and if it is not finished, continues it as a
    /// task on the runtime. Must be called from a thread that is not a runtime worker (the
    /// transport threads are plain threads).
    ///
    /// Continuing a future that was polled elsewhere is sound because every future polled
    /// again registers the waker of its new poll (tokio's and std's all do; the engine has
    /// no hand-written futures): the first poll's waker does nothing, and the task's first
    /// poll comes right after the spawn.
    ///
    /// If the runtime is shutting down the task is dropped unrun; dropping its reply
    /// sends EIO to the kernel, so no request is left hanging — unless the session is handing
    /// over (`FuseMount::pause_and_drain` on a held connection), when the request is left for
    /// the next engine.
    pub(crate) fn spawn<F>(&self, work: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                let acquire = self.permits.clone().acquire_owned();
                self.runtime.block_on(acquire).expect("the dispatch semaphore is never closed")
            }
        };
        // Checked after taking the permit, so a drain that sees every permit free knows that
        // every later request sees the pause.
        if self.pause.paused.load(Ordering::SeqCst) {
            // Neither run nor dropped: dropping the reply would answer EIO; unanswered, the
            // request stays with the kernel for the next engine. Leaks one small future per
            // request that arrives during a handover.
            std::mem::forget(work);
            return;
        }
        let mut work = Box::pin(work);
        let finished = {
            let _runtime = self.runtime.enter();
            let mut cx = Context::from_waker(Waker::noop());
            work.as_mut().poll(&mut cx).is_ready()
        };
        if finished {
            self.counts.finished_inline.fetch_add(1, Ordering::Relaxed);
            drop(permit);
            return;
        }
        self.counts.continued_as_task.fetch_add(1, Ordering::Relaxed);
        self.runtime.spawn(async move {
            work.await;
            drop(permit);
        });
    }

    /// Permits free right now (tests and stats).
    #[cfg(test)]
    pub(crate) fn available(&self) -> usize {
        self.permits.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn bounds_tasks_in_flight() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let dispatcher = Dispatcher::new(runtime.handle().clone(), 2);
        let running = Arc::new(AtomicUsize::new(0));
        let running_max = Arc::new(AtomicUsize::new(0));
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        for _ in 0..20 {
            let running = running.clone();
            let running_max = running_max.clone();
            let done_tx = done_tx.clone();
            dispatcher.spawn(async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                running_max.fetch_max(now, Ordering::SeqCst);
                tokio::task::yield_now().await;
                running.fetch_sub(1, Ordering::SeqCst);
                done_tx.send(()).expect("receiver alive");
            });
        }
        for _ in 0..20 {
            done_rx.recv().expect("every task finishes");
        }
        assert!(running_max.load(Ordering::SeqCst) <= 2);
        // The permit is released right after the task body, maybe just after our recv.
        runtime.block_on(async { tokio::task::yield_now().await });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while dispatcher.available() != 2 && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert_eq!(dispatcher.available(), 2);
    }

    #[test]
    fn work_that_need_not_wait_finishes_on_the_calling_thread_and_waiting_work_on_the_runtime() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let dispatcher = Dispatcher::new(runtime.handle().clone(), 4);
        let caller = std::thread::current().id();

        // Ready at its first poll: runs and finishes here, before spawn returns.
        let ran_on = Arc::new(std::sync::Mutex::new(None));
        let ran_on_in_work = ran_on.clone();
        dispatcher.spawn(async move {
            *ran_on_in_work.lock().expect("lock") = Some(std::thread::current().id());
        });
        assert_eq!(*ran_on.lock().expect("lock"), Some(caller), "finished inline");
        assert_eq!(dispatcher.available(), 4, "its permit is back at once");

        // Must wait (for a channel, and then for a timer, which needs the runtime's
        // context on both threads): continues as a task and finishes once woken.
        let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        dispatcher.spawn(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let _ = release_rx.await;
            done_tx.send(std::thread::current().id()).expect("receiver alive");
        });
        assert!(done_rx.try_recv().is_err(), "waiting work has not finished");
        assert_eq!(dispatcher.available(), 3, "it holds its permit while it waits");
        release_tx.send(()).expect("the work waits");
        let finished_on = done_rx.recv_timeout(Duration::from_secs(5)).expect("finishes");
        assert_ne!(finished_on, caller, "finished on a runtime worker");

        let counts = dispatcher.counts();
        assert_eq!(counts.finished_inline.load(Ordering::Relaxed), 1);
        assert_eq!(counts.continued_as_task.load(Ordering::Relaxed), 1);
    }

    struct SetOnDrop(Arc<std::sync::atomic::AtomicBool>);

    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_pause_waits_for_running_work_and_leaves_new_work_unanswered() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let dispatcher = Dispatcher::new(runtime.handle().clone(), 2);
        let pause = dispatcher.pause();
        let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
        dispatcher.spawn(async move {
            let _ = release_rx.await;
        });
        assert!(
            !pause.pause_and_drain(Duration::from_millis(50)),
            "a request still runs: the drain must say so"
        );
        release_tx.send(()).expect("the task waits");
        assert!(pause.pause_and_drain(Duration::from_secs(5)), "the running request finished");
        // Work that arrives paused: not run, and not dropped (dropping a Reply answers EIO).
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let guard = SetOnDrop(dropped.clone());
        let ran_in_task = ran.clone();
        dispatcher.spawn(async move {
            let _guard = guard;
            ran_in_task.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(!ran.load(Ordering::SeqCst), "paused work must not run");
        assert!(!dropped.load(Ordering::SeqCst), "paused work must not be dropped");
        assert_eq!(dispatcher.available(), 2, "its permit is returned");
    }
}
