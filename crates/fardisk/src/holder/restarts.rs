//! The holder's restart budget and what it remembers of each engine exit: a crash loop must
//! end (an engine that cannot import would otherwise be restarted forever while the kernel
//! queues requests), and `status`/`history` say how often the engine went and why.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// Engine exits remembered for `status` (the handover message carries them, and it is bounded).
pub const RECENT_EXITS_KEPT: usize = 8;
/// Longest reason kept per exit.
const REASON_CHARS_MAX: usize = 160;

/// How many unplanned engine restarts the holder allows in a sliding window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestartPolicy {
    pub restarts_max: u32,
    pub window_s: u64,
}

impl Default for RestartPolicy {
    fn default() -> RestartPolicy {
        RestartPolicy { restarts_max: 10, window_s: 60 }
    }
}

/// Why an engine went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitKind {
    /// Died or exited without being asked to (counted against the budget).
    Crash,
    /// Handed over to a new engine (`fardisk upgrade`): not counted.
    Upgrade,
}

/// One engine exit as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineExit {
    /// Wall time of the exit (Unix ms).
    pub at_ms: u64,
    pub pid: u32,
    pub kind: ExitKind,
    /// "killed by signal 9 (SIGKILL)", "exit status 1", "upgrade".
    pub reason: String,
}

/// What the holder does after an exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Restart,
    /// The budget is spent: stop, with this line.
    GiveUp(String),
}

/// The exits so far and the budget they are counted against.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RestartLog {
    pub policy: RestartPolicy,
    pub restarts_total: u64,
    pub upgrades_total: u64,
    pub recent: VecDeque<EngineExit>,
    /// Times (Unix ms) of the crashes inside the window.
    crash_times_ms: VecDeque<u64>,
}

impl RestartLog {
    pub fn new(policy: RestartPolicy) -> RestartLog {
        RestartLog { policy, ..RestartLog::default() }
    }

    /// Counts `exit` and says whether another engine may start.
    pub fn record(&mut self, mut exit: EngineExit) -> Verdict {
        exit.reason = exit.reason.chars().take(REASON_CHARS_MAX).collect();
        let at_ms = exit.at_ms;
        let kind = exit.kind;
        self.recent.push_back(exit.clone());
        while self.recent.len() > RECENT_EXITS_KEPT {
            self.recent.pop_front();
        }
        if kind == ExitKind::Upgrade {
            self.upgrades_total += 1;
            return Verdict::Restart;
        }
        let window_ms = self.policy.window_s.saturating_mul(1000);
        self.crash_times_ms.push_back(at_ms);
        while self.crash_times_ms.front().is_some_and(|t| at_ms.saturating_sub(*t) > window_ms) {
            self.crash_times_ms.pop_front();
        }
        if self.crash_times_ms.len() as u64 > u64::from(self.policy.restarts_max) {
            return Verdict::GiveUp(format!(
                "the engine exited {} times within {} s (at most {} restarts allowed; last: {}); the holder stops and the mount goes with it. Read the log, fix the cause, then import again (see README, Restarts)",
                self.crash_times_ms.len(),
                self.policy.window_s,
                self.policy.restarts_max,
                exit.reason
            ));
        }
        self.restarts_total += 1;
        Verdict::Restart
    }

    /// Counts an engine that went before it served (it could not import: the store is
    /// unreachable, a device is missing). Remembered for `status`, but not counted against
    /// the crash budget: such starts are paced by the holder's backoff and bounded by the
    /// operator's `--reimport-wait`, so an outage longer than the window does not end the
    /// holder before the operator's bound does.
    pub fn record_failed_start(&mut self, mut exit: EngineExit) {
        exit.reason = exit.reason.chars().take(REASON_CHARS_MAX).collect();
        self.recent.push_back(exit);
        while self.recent.len() > RECENT_EXITS_KEPT {
            self.recent.pop_front();
        }
        self.restarts_total += 1;
    }

    /// Crashes counted in the current window.
    pub fn crashes_in_window(&self) -> usize {
        self.crash_times_ms.len()
    }
}

/// An exit status in words: "exit status 1" or "killed by signal 9 (SIGKILL)".
pub fn describe(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    match status.signal() {
        Some(signal) => format!("killed by signal {signal} ({})", signal_name(signal)),
        None => "ended in an unknown way".to_owned(),
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGHUP => "SIGHUP",
        libc::SIGQUIT => "SIGQUIT",
        _ => "signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crash(at_ms: u64) -> EngineExit {
        EngineExit { at_ms, pid: 7, kind: ExitKind::Crash, reason: "exit status 1".into() }
    }

    #[test]
    fn a_crash_loop_ends_after_the_budget() {
        let mut log = RestartLog::new(RestartPolicy { restarts_max: 3, window_s: 10 });
        for i in 0..3 {
            assert_eq!(log.record(crash(i * 1000)), Verdict::Restart);
        }
        match log.record(crash(3500)) {
            Verdict::GiveUp(line) => {
                assert!(
                    line.contains("4 times within 10 s") && line.contains("exit status 1"),
                    "{line}"
                )
            }
            Verdict::Restart => panic!("the fourth crash in the window must stop the holder"),
        }
        assert_eq!(log.restarts_total, 3);
    }

    #[test]
    fn crashes_outside_the_window_do_not_count() {
        let mut log = RestartLog::new(RestartPolicy { restarts_max: 2, window_s: 10 });
        for i in 0..20 {
            assert_eq!(log.record(crash(i * 6000)), Verdict::Restart, "crash {i}");
        }
        assert_eq!(log.crashes_in_window(), 2);
        assert_eq!(log.recent.len(), RECENT_EXITS_KEPT);
        assert_eq!(log.restarts_total, 20);
    }

    #[test]
    fn upgrades_are_not_crashes() {
        let mut log = RestartLog::new(RestartPolicy { restarts_max: 0, window_s: 10 });
        let upgrade =
            EngineExit { at_ms: 1, pid: 7, kind: ExitKind::Upgrade, reason: "upgrade".into() };
        for _ in 0..5 {
            assert_eq!(log.record(upgrade.clone()), Verdict::Restart);
        }
        assert_eq!(log.upgrades_total, 5);
        assert!(matches!(log.record(crash(2)), Verdict::GiveUp(_)));
    }

    #[test]
    fn failed_starts_are_remembered_but_do_not_spend_the_budget() {
        let mut log = RestartLog::new(RestartPolicy { restarts_max: 1, window_s: 600 });
        for i in 0..20 {
            log.record_failed_start(crash(i * 1000));
        }
        assert_eq!(log.crashes_in_window(), 0);
        assert_eq!(log.restarts_total, 20);
        assert_eq!(log.recent.len(), RECENT_EXITS_KEPT);
        assert_eq!(log.record(crash(30_000)), Verdict::Restart, "the budget is untouched");
    }

    #[test]
    fn statuses_in_words() {
        assert_eq!(describe(ExitStatus::from_raw(1 << 8)), "exit status 1");
        assert_eq!(describe(ExitStatus::from_raw(9)), "killed by signal 9 (SIGKILL)");
    }
}
