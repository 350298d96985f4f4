//! Hands data requests from the transport threads to the tokio runtime.
//!
//! A transport thread (a /dev/fuse worker or an io_uring queue) hands each request to the
//! filesystem synchronously; a
//! device call can take milliseconds (a log write) or seconds (a cold read from the object
//! store), so each data request runs as a task and replies from there (a `Reply`
//! is `Send`). A semaphore bounds the tasks: when `requests_in_flight_max` are
//! running, the transport thread waits for a permit, so further requests stay queued in the
//! kernel instead of in our memory.

use std::future::Future;
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::sync::Semaphore;

pub(crate) struct Dispatcher {
    runtime: Handle,
    permits: Arc<Semaphore>,
}

impl Dispatcher {
    pub(crate) fn new(runtime: Handle, requests_in_flight_max: usize) -> Dispatcher {
        Dispatcher { runtime, permits: Arc::new(Semaphore::new(requests_in_flight_max)) }
    }

    /// Runs `work` on the runtime once a permit is free. Must be called from a thread that
    /// is not a runtime worker (the transport threads are plain threads).
    ///
    /// If the runtime is shutting down the task is dropped unrun; dropping its reply
    /// sends EIO to the kernel, so no request is left hanging.
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
}
