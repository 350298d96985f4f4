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

/// How many times [`reexec_with_tunables`] started the process again, so a C library that drops
/// or rejects the tunables cannot make it start itself over and over.
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
    let missing: Vec<String> = wanted
        .iter()
        .filter(|(k, _)| tunable(existing, k).is_none())
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
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

/// Starts of one process, the first included, before it gives up on malloc asking for
/// transparent huge pages. glibc 2.35 and 2.36 (Debian 12's) compare the kernel's THP mode with
/// a buffer they do not terminate, so whether `glibc.malloc.hugetlb=1` takes effect depends on
/// one byte of stale stack, which differs with every start (address-space randomisation): about
/// half the daemon's starts on this machine ignored the tunable. Sixteen starts leave one daemon
/// in 65,000 without huge pages where each start is a coin toss; each costs a few milliseconds.
const HUGE_PAGE_STARTS_MAX: u32 = 16;

/// Whether this process's malloc asks the kernel for transparent huge pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HugePages {
    /// It does: the memory it maps is marked for them (`hg` in /proc/self/smaps).
    Asked,
    /// `glibc.malloc.hugetlb=1` is set and the kernel's mode is `madvise`, yet it does not.
    NotAsked,
    /// Nothing to expect: another C library, a kernel not in `madvise` mode, the tunable not 1
    /// (the user's choice), or /proc unreadable.
    NotExpected,
}

/// What this process's malloc does about transparent huge pages, seen by allocating a buffer
/// it maps on its own and reading that mapping's flags.
pub fn huge_pages() -> HugePages {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return HugePages::NotExpected;
    }
    let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    if tunable(&tunables, "glibc.malloc.hugetlb") != Some("1") || !kernel_thp_mode_is_madvise() {
        return HugePages::NotExpected;
    }
    // Above the largest mmap threshold glibc allows, set or self-adjusted (32 MiB): glibc maps
    // it on its own and, when the tunable took effect, madvises the mapping. Never touched, so
    // it costs address space only; refused (strict overcommit), there is no answer.
    let layout = std::alloc::Layout::from_size_align(33 << 20, 1).expect("a valid layout");
    // SAFETY: a non-zero size; the pointer is only compared, then freed with the same layout.
    let probe = unsafe { std::alloc::alloc(layout) };
    if probe.is_null() {
        return HugePages::NotExpected;
    }
    let marked = std::fs::read_to_string("/proc/self/smaps")
        .ok()
        .and_then(|smaps| mapping_marked_for_huge_pages(&smaps, probe as usize));
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(probe, layout) };
    match marked {
        Some(true) => HugePages::Asked,
        Some(false) => HugePages::NotAsked,
        None => HugePages::NotExpected,
    }
}

/// The value of `key` in a `GLIBC_TUNABLES` string (the first entry with that key).
fn tunable<'a>(tunables: &'a str, key: &str) -> Option<&'a str> {
    tunables
        .split(':')
        .find_map(|entry| entry.split_once('=').filter(|(k, _)| *k == key))
        .map(|(_, v)| v)
}

fn kernel_thp_mode_is_madvise() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|mode| mode.contains("[madvise]"))
}

/// Whether the mapping holding `addr` has the `hg` flag (`madvise(MADV_HUGEPAGE)`), from the
/// text of /proc/PID/smaps; `None` when no mapping there holds it.
pub fn mapping_marked_for_huge_pages(smaps: &str, addr: usize) -> Option<bool> {
    let mut inside = false;
    for line in smaps.lines() {
        // A mapping's first line: "start-end perms offset dev inode [path]", addresses in hex.
        let range = line.split_once(' ').and_then(|(first, _)| first.split_once('-'));
        if let Some((start, end)) = range {
            if let (Ok(start), Ok(end)) =
                (usize::from_str_radix(start, 16), usize::from_str_radix(end, 16))
            {
                inside = (start..end).contains(&addr);
                continue;
            }
        }
        if inside {
            if let Some(flags) = line.strip_prefix("VmFlags:") {
                return Some(flags.split_whitespace().any(|f| f == "hg"));
            }
        }
    }
    None
}

/// Starts this program again, same arguments and process id, with the daemon's tunables, unless
/// it already runs with them; and again, up to [`HUGE_PAGE_STARTS_MAX`] starts in all, while
/// glibc ignores `glibc.malloc.hugetlb=1` (see there). Returns only when it does not start again:
/// what malloc does about huge pages, or the error when `exec` failed (the caller goes on without
/// them).
///
/// Call first thing, before threads or open resources matter: `exec` replaces the process, and
/// only descriptors without close-on-exec (what this process inherited) survive.
pub fn reexec_with_tunables() -> std::io::Result<HugePages> {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return Ok(HugePages::NotExpected);
    }
    let starts_before = restarts_for_tunables();
    let value = match daemon_tunables() {
        Some(value) if starts_before == 0 => value,
        // Started again with them and they are gone: a C library that drops them.
        Some(_) => return Ok(HugePages::NotExpected),
        None => {
            let state = huge_pages();
            if state != HugePages::NotAsked || starts_before + 1 >= HUGE_PAGE_STARTS_MAX {
                return Ok(state);
            }
            std::env::var("GLIBC_TUNABLES").unwrap_or_default()
        }
    };
    use std::os::unix::process::CommandExt;
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_else(|| OsString::from("fardisk"));
    // /proc/self/exe, not argv[0]: the binary this process runs even when PATH or the file
    // changed since (an upgrade replaced it).
    let err = std::process::Command::new("/proc/self/exe")
        .arg0(argv0)
        .args(args)
        .env("GLIBC_TUNABLES", value)
        .env(REEXEC_MARK_ENV, (starts_before + 1).to_string())
        .exec();
    Err(err)
}

/// How many times this process started itself again ([`reexec_with_tunables`]).
pub fn restarts_for_tunables() -> u32 {
    std::env::var(REEXEC_MARK_ENV).ok().and_then(|n| n.parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WANT: &[(&str, &str)] = &[("glibc.malloc.hugetlb", "1")];

    #[test]
    fn the_probe_reads_the_flags_of_the_mapping_that_holds_the_address() {
        let smaps = "\
55d0c0000000-55d0c0200000 rw-p 00000000 00:00 0                          [heap]
Size:               2048 kB
VmFlags: rd wr mr mw me ac
7f0000000000-7f0002100000 rw-p 00000000 00:00 0
Size:              33792 kB
THPeligible:    1
VmFlags: rd wr mr mw me ac hg
7f0002100000-7f0002200000 rw-p 00000000 00:00 0
VmFlags: rd wr mr mw me ac nh
";
        assert_eq!(mapping_marked_for_huge_pages(smaps, 0x7f0000001000), Some(true));
        assert_eq!(mapping_marked_for_huge_pages(smaps, 0x55d0c0100000), Some(false));
        // `nh` (no huge pages) is another flag, not `hg`.
        assert_eq!(mapping_marked_for_huge_pages(smaps, 0x7f0002100000), Some(false));
        // The end is outside the mapping; an address in no mapping has no answer.
        assert_eq!(mapping_marked_for_huge_pages(smaps, 0x55d0c0200000), None);
        assert_eq!(mapping_marked_for_huge_pages(smaps, 0x1000), None);
    }

    #[test]
    fn a_tunable_is_read_by_its_whole_key() {
        let t = "glibc.malloc.hugetlbx=2:glibc.malloc.hugetlb=1:glibc.malloc.hugetlb=0";
        assert_eq!(tunable(t, "glibc.malloc.hugetlb"), Some("1"));
        assert_eq!(tunable(t, "glibc.malloc.arena_max"), None);
        assert_eq!(tunable("", "glibc.malloc.hugetlb"), None);
    }

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
