//! A process started without the daemon's allocator tunables starts itself again with them,
//! in place (same process id, same arguments), and only once (crates/common/src/malloc.rs).
//!
//! The test binary is the process: it holds this one test, so replacing the process replaces
//! nothing else. The harness starts again with the same arguments, runs this test again, and
//! the second run finds the tunables and checks what the first one could not see.

use fardisk_common::malloc::{daemon_tunables, reexec_with_tunables, DAEMON_TUNABLES};

/// The process id and the `GLIBC_TUNABLES` before the first run, for the run after the exec.
const PID_BEFORE_ENV: &str = "FARDISK_TEST_PID_BEFORE";
const TUNABLES_BEFORE_ENV: &str = "FARDISK_TEST_TUNABLES_BEFORE";

#[test]
fn a_process_without_the_tunables_starts_itself_again_once_with_them() {
    if std::env::var_os(PID_BEFORE_ENV).is_none() {
        let before = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
        // Edition 2021: setting the environment is safe; no other thread reads it here.
        std::env::set_var(PID_BEFORE_ENV, std::process::id().to_string());
        std::env::set_var(TUNABLES_BEFORE_ENV, &before);
    }
    // Returns only when no start again is needed (or exec failed, which the test reports).
    reexec_with_tunables().expect("exec of /proc/self/exe");
    let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    for (key, value) in DAEMON_TUNABLES {
        assert!(
            tunables.split(':').any(|e| e.split_once('=').is_some_and(|(k, _)| k == *key)),
            "{key} missing from GLIBC_TUNABLES={tunables:?} (wanted {key}={value})"
        );
    }
    assert_eq!(daemon_tunables(), None, "nothing left to add: a further call would not exec");
    let before = std::env::var(TUNABLES_BEFORE_ENV).unwrap_or_default();
    if daemon_tunables_missing_from(&before) {
        // It did start again: same process, and it says so.
        let pid_before: u32 = std::env::var(PID_BEFORE_ENV).unwrap().parse().unwrap();
        assert_eq!(std::process::id(), pid_before, "exec keeps the process id");
        assert!(fardisk_common::malloc::restarts_for_tunables() >= 1, "it says it started again");
        // What the user had set is kept, in front of what was added.
        assert!(tunables.starts_with(&before), "{tunables:?} does not keep {before:?}");
    }
}

fn daemon_tunables_missing_from(value: &str) -> bool {
    fardisk_common::malloc::merged_tunables(Some(value), DAEMON_TUNABLES).is_some()
}
