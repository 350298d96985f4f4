//! The root's holder: who imported the pool, and whether a holder that says it is active is
//! really alive (a crashed daemon on this host needs no `--force`).

use crate::pool::Env;
use crate::rng::Rng;
use crate::root::Holder;

/// This process as the holder of a root it publishes.
pub(super) fn holder(env: &Env, rng: &Rng, active: bool) -> Holder {
    Holder {
        hostname: hostname::get()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "unknown".into()),
        pid: std::process::id(),
        import_id: rng.next_u128(),
        since_ms: env.clock.wall_ms(),
        active,
    }
}

/// A holder on this host whose process is gone (a crash or SIGKILL): importing again needs no force.
pub(super) fn holder_is_stale(h: &Holder) -> bool {
    let me = hostname::get().map(|x| x.to_string_lossy().into_owned()).unwrap_or_default();
    if h.hostname != me {
        return false;
    }
    if h.pid == std::process::id() {
        return false; // This very process holds it (a second import in one process is a conflict).
    }
    !process_is_live_fardisk(h.pid)
}

/// True when `pid` is a running (not zombie) fardisk process. A killed daemon whose parent never
/// reaps it stays a zombie, and a recycled pid may belong to anything else.
fn process_is_live_fardisk(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // The state is the first field after the parenthesised command name.
    let state =
        stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).unwrap_or("X");
    if state == "Z" || state == "X" {
        return false;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&cmdline).contains("fardisk")
}
