//! The simulation's hung log leg: one mirror leg stops answering its flushes (a hung disk or
//! path) while a sync request is under way. The request must complete on the other leg once
//! `log_leg_timeout_ms` has passed, on the log's clock and in real waiting, and the leg must be
//! FAULTED; the next sync request must not wait for it. Then the device answers again (the hang
//! ends before any import: an import opens every leg and would wait for it) and stays FAULTED
//! until the replace step swaps it, as for the other leg faults.

use super::{World, SIM_LOG_LEG_TIMEOUT_MS};
use fardisk_slog::CrashDevice;
use std::time::Duration;

/// Bounds the real wait for a sync request that must not wait for the hung leg (it takes
/// `SIM_LOG_LEG_TIMEOUT_MS` of real waiting, a tenth of a second).
const SYNC_WAIT_MAX: Duration = Duration::from_secs(30);

impl World {
    pub(super) async fn hang_leg(&mut self, leg: usize) {
        self.wait_log_idle();
        let Some(hung) = self.log.as_ref().and_then(|l| l.hang(leg)) else { return };
        // The request under way when the leg hangs: it waits for the timeout, once.
        self.write_and_sync(0, &hung, true).await;
        let state = self.pool().status().log["vdevs"][0]["legs"][leg]["state"].clone();
        if state != "FAULTED" {
            hung.release_flushes();
            self.fail(format!("the hung leg {leg} is {state} after its timeout"));
        }
        // Out of service: the next one does not touch it, and the clock does not move.
        self.write_and_sync(1, &hung, false).await;
        hung.release_flushes();
        self.bad_legs.push(leg);
        self.report.leg_faults += 1;
        self.report.leg_hangs += 1;
    }

    /// A block written to volume `vol`, then a sync request on a thread of its own: the commit
    /// writes the legs on the thread that runs it (fardisk-slog `lead`), and a hung flush must
    /// block that thread, not the simulation's. With `stalls`, it is first seen waiting for the
    /// hung flush, and the clock is moved past the timeout. Its wait is bounded either way.
    async fn write_and_sync(&mut self, vol: usize, hung: &CrashDevice, stalls: bool) {
        let data = self.bytes(4096);
        self.write(vol, self.rng.below(256) * 4096, data).await;
        let mark = self.history.mark();
        let pool = self.pool();
        let request = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a runtime for the sync request");
            rt.block_on(pool.sync_request())
        });
        if stalls {
            let waiting = hung.clone();
            let blocked = tokio::task::spawn_blocking(move || {
                waiting.wait_for_blocked_flushes(1, Duration::from_secs(10))
            })
            .await
            .unwrap_or(false);
            if !blocked {
                hung.release_flushes();
                self.fail("a sync request never reached the hung leg's flush");
            }
            self.clock.advance(Duration::from_millis(SIM_LOG_LEG_TIMEOUT_MS));
        }
        let finished = tokio::task::spawn_blocking(move || {
            let polls = SYNC_WAIT_MAX.as_millis() / 10;
            let done = (0..polls).any(|_| {
                request.is_finished() || {
                    #[allow(clippy::disallowed_methods)] // real waiting bounds a real thread
                    std::thread::sleep(Duration::from_millis(10));
                    false
                }
            });
            done.then(|| request.join())
        })
        .await
        .expect("waiting task");
        match finished {
            Some(Ok(Ok(()))) => self.history.ack_through(mark),
            Some(Ok(Err(e))) => {
                hung.release_flushes();
                self.fail(format!("a sync request with a hung leg failed: {e}"));
            }
            Some(Err(_)) => {
                hung.release_flushes();
                self.fail("a sync request with a hung leg panicked");
            }
            None => {
                hung.release_flushes();
                self.fail("a sync request waited for the hung log leg past its timeout");
            }
        }
    }
}
