//! The C allocator's settings for fardisk's long-running processes: the engine (daemon) and the
//! benchmark that measures it, so a benchmark's engine rows are what the daemon does
//! (docs/resources.md, "Allocator settings", has the measurements behind each value).
//!
//! Two kinds of setting, because glibc reads them at two times:
//! - `mallopt` parameters, set from inside the process before it starts threads
//!   ([`tune_allocator`]);
//! - tunables glibc reads from `GLIBC_TUNABLES` only when a process starts, which no call can
//!   change later ([`DAEMON_TUNABLES`]): a process that was started without them starts itself
//!   again with them ([`reexec_with_tunables`]), and one that starts the daemon hands them over in
//!   its environment ([`with_tunables`]).
//!
//! A key the user already set in `GLIBC_TUNABLES` keeps the user's value (`glibc.malloc.hugetlb=0`
//! turns transparent huge pages off again). Other C libraries ignore the variable.

use std::ffi::OsString;

/// Buffers of this size or more get their own mapping from glibc's malloc (see [`tune_allocator`]).
pub const MALLOC_MMAP_THRESHOLD_BYTES: i32 = 4 << 20;

/// `GLIBC_TUNABLES` entries the daemon runs with.
///
/// `glibc.malloc.hugetlb=1`: malloc asks for transparent huge pages (`madvise(MADV_HUGEPAGE)`) on
/// the memory it takes from the kernel, which a machine with `transparent_hugepage=madvise` (the
/// common default) otherwise backs with 4 KiB pages only. The daemon fills gigabytes of cache
/// with fresh memory and receives every GET's body into fresh buffers; a fault per 4 KiB page
/// was about a third of its CPU while reading a cold volume (bench/notes/engine-store.md,
/// "Huge pages"). Resident memory under the bounded-resources load did not change.
pub const DAEMON_TUNABLES: &[(&str, &str)] = &[("glibc.malloc.hugetlb", "1")];

/// Marks a process started again by [`reexec_with_tunables`], so a C library that drops or
/// rejects the tunables cannot make it start itself over and over.
const REEXEC_MARK_ENV: &str = "FARDISK_MALLOC_REEXEC";

/// Keeps memory the daemon frees from staying resident (docs/resources.md has the measurements).
///
/// glibc's malloc raises its mmap threshold to the size of every large mapped buffer freed (up to
/// 32 MiB); after that, segment buffers, NBD payloads and coalesced GET ranges come from its heap
/// arenas, where they fragment and freed memory is not returned. Under mixed NBD load the daemon
/// grew without levelling off, to 3.4x its cache and dirty limits in a minute. A fixed threshold
/// turns the adjustment off: every buffer of 4 MiB or more (segments, coalesced GET ranges) is
/// mapped on its own and unmapped when freed. Smaller ones (a GET body's receive buffers, NBD
/// payloads) come from the arenas and are reused: at 128 KiB each was mapped afresh, a fault per
/// 4 KiB page of every byte received, for no less resident memory under the bounded-resources
/// load (docs/resources.md).
///
/// glibc also gives threads up to 8 arenas per CPU; the blocking pool's threads (store file I/O,
/// cache-device reads) come and go, and what they freed in their arenas stays there. One arena per
/// CPU keeps that slack ~35 MiB smaller at a 64 MiB ARC.
///
/// Call before any thread starts. Other C libraries: nothing to do.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let arenas =
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).clamp(2, 64) as i32;
        // SAFETY: mallopt only sets malloc parameters; called before the process starts threads.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD_BYTES);
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
}

/// `existing` (the current `GLIBC_TUNABLES`) with every entry of `wanted` whose key it lacks
/// appended, or `None` when it already has them all.
pub fn merged_tunables(existing: Option<&str>, wanted: &[(&str, &str)]) -> Option<String> {
    let existing = existing.unwrap_or("");
    let has = |key: &str| {
        existing.split(':').any(|entry| entry.split_once('=').is_some_and(|(k, _)| k == key))
    };
    let missing: Vec<String> =
        wanted.iter().filter(|(k, _)| !has(k)).map(|(k, v)| format!("{k}={v}")).collect();
    if missing.is_empty() {
        return None;
    }
    let mut out: Vec<&str> = existing.split(':').filter(|e| !e.is_empty()).collect();
    out.extend(missing.iter().map(String::as_str));
    Some(out.join(":"))
}

/// The daemon's `GLIBC_TUNABLES` value for a process started from this one, or `None` when this
/// process's environment already carries them (a child inherits them).
pub fn daemon_tunables() -> Option<String> {
    let existing = std::env::var("GLIBC_TUNABLES").ok();
    merged_tunables(existing.as_deref(), DAEMON_TUNABLES)
}

/// Gives `cmd` (a process that will run the daemon) the daemon's tunables, so it need not start
/// itself again to get them.
pub fn with_tunables(cmd: &mut std::process::Command) {
    if let Some(value) = daemon_tunables() {
        cmd.env("GLIBC_TUNABLES", value);
    }
}

/// Starts this program again, same arguments and process id, with the daemon's tunables, unless
/// it already runs with them. Returns only when it does not start again: `Ok` when nothing was
/// needed, the error when `exec` failed (the caller goes on without them).
///
/// Call first thing, before threads or open resources matter: `exec` replaces the process, and
/// only descriptors without close-on-exec (what this process inherited) survive.
pub fn reexec_with_tunables() -> std::io::Result<()> {
    if !cfg!(all(target_os = "linux", target_env = "gnu"))
        || std::env::var_os(REEXEC_MARK_ENV).is_some()
    {
        return Ok(());
    }
    let Some(value) = daemon_tunables() else { return Ok(()) };
    use std::os::unix::process::CommandExt;
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_else(|| OsString::from("fardisk"));
    // /proc/self/exe, not argv[0]: the binary this process runs even when PATH or the file
    // changed since (an upgrade replaced it).
    let err = std::process::Command::new("/proc/self/exe")
        .arg0(argv0)
        .args(args)
        .env("GLIBC_TUNABLES", value)
        .env(REEXEC_MARK_ENV, "1")
        .exec();
    Err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WANT: &[(&str, &str)] = &[("glibc.malloc.hugetlb", "1")];

    #[test]
    fn tunables_are_added_to_what_the_user_set_and_never_override_it() {
        assert_eq!(merged_tunables(None, WANT).as_deref(), Some("glibc.malloc.hugetlb=1"));
        assert_eq!(merged_tunables(Some(""), WANT).as_deref(), Some("glibc.malloc.hugetlb=1"));
        assert_eq!(
            merged_tunables(Some("glibc.malloc.arena_max=1"), WANT).as_deref(),
            Some("glibc.malloc.arena_max=1:glibc.malloc.hugetlb=1")
        );
        assert_eq!(
            merged_tunables(Some("glibc.malloc.hugetlb=0"), WANT),
            None,
            "the user's 0 stays"
        );
        assert_eq!(
            merged_tunables(Some("glibc.malloc.tcache_count=0:glibc.malloc.hugetlb=2"), WANT),
            None
        );
        // A key that only starts like ours is another key.
        assert_eq!(
            merged_tunables(Some("glibc.malloc.hugetlbx=1"), WANT).as_deref(),
            Some("glibc.malloc.hugetlbx=1:glibc.malloc.hugetlb=1")
        );
    }
}
