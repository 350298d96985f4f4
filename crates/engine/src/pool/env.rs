//! The injected environment of a pool: time, the seed of its randomness, and whether CPU and
//! device work runs on tokio's blocking threads or inline (the simulation). Nothing in the pool
//! reads the wall clock or draws entropy except through this, so a simulation seed replays.

use crate::clock::Clock;
use crate::rng::Rng;
use std::sync::Arc;

/// Shared environment: injected time, randomness and threads.
#[derive(Debug, Clone)]
pub struct Env {
    pub clock: Arc<dyn Clock>,
    pub seed: u64,
    /// Runs CPU and device work (packing segments, cache-device reads, copying a log leg) on the
    /// calling task instead of tokio's blocking threads. Only for a simulation on one thread:
    /// another thread finishing sooner or later would reorder the tasks that run meanwhile, and
    /// a seed would not replay.
    pub blocking_inline: bool,
}

impl Env {
    pub fn system() -> Env {
        // The production environment is where the system clock and a fresh seed come in.
        #[allow(clippy::disallowed_methods)]
        let seed = Rng::from_entropy().next_u64();
        Env { clock: Arc::new(crate::clock::SystemClock::default()), seed, blocking_inline: false }
    }

    /// Runs `work` off the async workers (or inline, see `blocking_inline`).
    pub(crate) async fn blocking<R: Send + 'static>(
        &self,
        what: &str,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> crate::error::Result<R> {
        if self.blocking_inline {
            return Ok(work());
        }
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| crate::error::Error::Bug(format!("{what} task failed: {e}")))
    }
}
