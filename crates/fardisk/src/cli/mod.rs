//! The command line, in the shape of `zpool`/`zfs`. Every failure prints one line saying what is
//! wrong and what to do, and exits non-zero.

mod create;
mod destroy;
mod exit_code;
mod held_cmds;
mod import;
mod iostat;
mod query;
mod scrub_cmds;
mod size;
#[cfg(test)]
mod snapshot;
mod snapshot_cmds;
mod utc;
mod vdev_cmds;
mod vdev_spec;
mod volume;

use crate::config::Config;
use crate::control::{one_line, DaemonRunner, Request};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "fardisk", version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("FARDISK_GIT_REV"), ")"), about = "A local-speed block device whose durable home is far-away object storage",
    long_about = None, after_help = "Examples:\n  fardisk create tank file:///var/lib/fardisk/tank --simulate latency=40\n  fardisk import tank file:///var/lib/fardisk/tank --mount /mnt/fardisk\n  fardisk volume create tank/pg 8G\n  fardisk status -v\n  fardisk export tank")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a pool in an object store: `create POOL STORE_URL [log [mirror] DEV...]... [cache DEV...] [-o PROP=VALUE]...`
    #[command(
        after_help = "Examples:\n  fardisk create tank file:///srv/tank\n  fardisk create tank s3://bucket/tank log mirror /dev/nvme0n1p1 /dev/nvme1n1p1 cache /dev/nvme0n1p2 -o compression=zstd"
    )]
    Create(create::CreateArgs),
    /// Import a pool and serve its volumes (FUSE image files, NBD); runs in the background unless --foreground
    #[command(
        after_help = "Examples:\n  fardisk import tank file:///srv/tank --mount /mnt/fardisk\n  fardisk import tank s3://bucket/tank --nbd unix:/run/fardisk/tank.nbd --nbd tcp:127.0.0.1:10809\n  fardisk import tank --at \"2026-11-23 09:00:00\" --as tank-0900 --mount /mnt/tank-0900   # read-only, as it was then\n  fardisk import tank --txg 41230 --as tank-old --nbd unix:/run/fardisk/tank-old.nbd"
    )]
    Import(import::ImportArgs),
    /// Drain everything to the store and stop serving the pool
    #[command(after_help = "Example:\n  fardisk export tank")]
    Export { pool: String },
    /// Replace the running engine with the installed binary under a live mount (pools
    /// imported with --holder): the old engine drains to the store and the new one takes the
    /// FUSE connection over; users of the images see a pause
    #[command(after_help = "Example:\n  fardisk upgrade tank")]
    Upgrade {
        pool: String,
        /// How long to wait for the new engine to answer
        #[arg(long, default_value = "600", value_name = "SECONDS")]
        wait: u64,
    },
    /// Delete an exported pool from its store and clear its log and cache device labels
    #[command(
        after_help = "Examples:\n  fardisk destroy tank\n  fardisk destroy tank s3://bucket/tank\n  fardisk destroy tank -f     # finish an interrupted destroy, or destroy under another host's import"
    )]
    Destroy(destroy::DestroyArgs),
    /// Pool health, txgs, dirty data and space (`-v`: every vdev; `--json`: machine-readable)
    #[command(
        after_help = "Examples:\n  fardisk status\n  fardisk status tank -v\n  fardisk status tank --json"
    )]
    Status(query::StatusArgs),
    /// One line per known pool
    #[command(after_help = "Example:\n  fardisk list --json")]
    List(query::ListArgs),
    /// Operations and bandwidth per interval, as zpool iostat (`-v`: per vdev: store, log, cache devices)
    #[command(
        after_help = "Examples:\n  fardisk iostat tank 1 5\n  fardisk iostat -v tank 1\n  fardisk iostat tank 1 3 --json"
    )]
    Iostat(query::IostatArgs),
    /// Create, destroy, list or resize volumes
    #[command(subcommand)]
    Volume(volume::VolumeCmd),
    /// Take a snapshot of a volume in O(1), no data copied: `snapshot POOL/VOLUME@NAME`; also
    /// `snapshot list POOL` and `snapshot destroy POOL/VOLUME@NAME`. Snapshots appear read-only
    /// as VOLUME@NAME in the mount directory and as NBD exports
    #[command(after_help = "Examples:
  fardisk snapshot tank/pg@nightly
  fardisk snapshot list tank
  fardisk snapshot destroy tank/pg@nightly")]
    Snapshot(snapshot_cmds::SnapshotArgs),
    /// Make a writable volume from a snapshot, sharing all unchanged data: `clone POOL/VOLUME@SNAPSHOT POOL/NEW`
    #[command(after_help = "Example:
  fardisk clone tank/pg@nightly tank/pg-test")]
    Clone(snapshot_cmds::CloneArgs),
    /// Make a clone independent: it takes over its origin's snapshots, so the origin can be destroyed
    #[command(after_help = "Example:
  fardisk promote tank/pg-test")]
    Promote { target: String },
    /// Roll a volume (closed: not mounted, no NBD client) back to a snapshot, discarding later writes; -r also destroys newer snapshots
    #[command(after_help = "Examples:
  fardisk rollback tank/pg@nightly
  fardisk rollback -r tank/pg@last-week")]
    Rollback(snapshot_cmds::RollbackArgs),
    /// Show properties with their source: `get PROP|all POOL [--json]`
    #[command(after_help = "Example:\n  fardisk get all tank")]
    Get(query::GetArgs),
    /// Set a property: `set PROP=VALUE POOL`
    #[command(after_help = "Example:\n  fardisk set compression=zstd tank")]
    Set(query::SetArgs),
    /// Commit the open txg to the store now and wait for it (a SUSPENDED pool answers with the reason)
    #[command(after_help = "Example:\n  fardisk sync tank")]
    Sync { pool: String },
    /// Save the pool's hot set now (it is also saved at export and every 5 minutes); the next
    /// import reads it back into the cache in the background
    #[command(after_help = "Example:\n  fardisk hotset tank")]
    Hotset { pool: String },
    /// Add log or cache devices to an imported pool: `add POOL log [mirror] DEV... | cache DEV...`
    #[command(
        after_help = "Examples:\n  fardisk add tank log mirror /dev/nvme0n1p1 /dev/nvme1n1p1\n  fardisk add tank cache /dev/nvme0n1p2\n  fardisk add tank log /var/lib/fardisk/log1     # a file, created at 1 GiB if missing"
    )]
    Add(vdev_cmds::AddArgs),
    /// Remove a log vdev (after its records reach the store) or a cache device
    #[command(
        after_help = "Examples:\n  fardisk remove tank /dev/nvme0n1p2\n  fardisk remove tank /var/lib/fardisk/log0   # a mirror goes whole: name any leg"
    )]
    Remove(vdev_cmds::RemoveArgs),
    /// Replace a log leg and resilver it (or bring a repaired leg back: omit NEW_DEVICE)
    #[command(
        after_help = "Examples:\n  fardisk replace tank /dev/nvme1n1p1 /dev/nvme2n1p1\n  fardisk replace tank /var/lib/fardisk/log1"
    )]
    Replace(vdev_cmds::ReplaceArgs),
    /// Verify every block the pool references against its checksum, reading it back from the
    /// store; repair from the cache where a good copy exists. `--pause` and `--stop`; run again to resume
    #[command(
        after_help = "Examples:\n  fardisk scrub tank            # start (or resume a paused scrub)\n  fardisk scrub tank -w         # start and wait, with progress; exit 3 on unrepaired errors\n  fardisk scrub tank --pause\n  fardisk scrub tank --stop\n  fardisk set scrub_rate_max=16777216 tank   # bytes/s read from the store (0 = no limit)"
    )]
    Scrub(scrub_cmds::ScrubArgs),
    /// Commands that changed the pool, and events such as import, export and scrub results,
    /// kept in the pool's store (the newest 1000)
    #[command(
        after_help = "Examples:\n  fardisk history tank\n  fardisk history tank -n 10 --json"
    )]
    History(scrub_cmds::HistoryArgs),
    /// Wait until background work of an imported pool ends (scrub, L2ARC rebuild, warm-up),
    /// with progress on a terminal
    #[command(after_help = "Example:\n  fardisk wait tank")]
    Wait { pool: String },
    /// Writes a fenced writer acknowledged from its log and never published (multihost=on or
    /// a forced import elsewhere): `held list`, `held show FILE`, `held discard FILE`
    #[command(
        subcommand,
        after_help = "Examples:\n  fardisk held list\n  fardisk held show /var/lib/fardisk/held/tank-...-txg41-42.held\n  fardisk held discard /var/lib/fardisk/held/tank-...-txg41-42.held"
    )]
    Held(held_cmds::HeldCmd),
    /// ARC and L2ARC statistics, as /proc/spl/kstat/zfs/arcstats (`--json` for all counters)
    #[command(after_help = "Example:\n  fardisk arcstat tank")]
    Arcstat {
        pool: String,
        #[arg(long)]
        json: bool,
    },
}

/// Runs the CLI; returns the process exit code. `run_daemon` serves a pool in this process
/// (`import --foreground`; the binary passes `daemon::run_foreground`).
pub fn main(run_daemon: DaemonRunner) -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    if !matches!(&cli.command, Command::Import(a) if a.foreground) {
        // Like any Unix tool, end quietly when the reader of our output goes away
        // (`fardisk status | head`). The daemon keeps Rust's default (ignored) so a client
        // hanging up never kills it.
        // SAFETY: restoring a default signal disposition; no handler code of ours is involved.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    // Read once (environment, then the config file) and passed down from here.
    let config = match Config::load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("fardisk: {}", one_line(&e));
            return 1;
        }
    };
    let filter = config
        .log
        .as_deref()
        .and_then(|f| tracing_subscriber::EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| "warn".into());
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .try_init();
    let result = match cli.command {
        // The daemon builds its own runtime after daemonizing.
        Command::Import(a) => import::run(a, &config, run_daemon),
        Command::Scrub(a) => {
            match runtime().and_then(|rt| rt.block_on(scrub_cmds::scrub(a, &config))) {
                Ok(code) => return code,
                Err(e) => Err(e),
            }
        }
        other => runtime().and_then(|rt| rt.block_on(dispatch(other, &config))),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("fardisk: {}", one_line(&e));
            exit_code::for_error(&e)
        }
    }
}

pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}

async fn dispatch(c: Command, cfg: &Config) -> anyhow::Result<()> {
    match c {
        Command::Create(a) => create::run(a, cfg).await,
        Command::Held(c) => held_cmds::run(c, cfg),
        Command::Import(_) => unreachable!("handled before the runtime starts"),
        Command::Export { pool } => import::export(&pool, cfg).await,
        Command::Upgrade { pool, wait } => import::upgrade(&pool, wait, cfg).await,
        Command::Destroy(a) => destroy::run(a, cfg).await,
        Command::Status(a) => query::status(a, cfg).await,
        Command::List(a) => query::list(a, cfg).await,
        Command::Iostat(a) => iostat::iostat(a, cfg).await,
        Command::Volume(v) => volume::run(v, cfg).await,
        Command::Snapshot(a) => snapshot_cmds::snapshot(a, cfg).await,
        Command::Clone(a) => snapshot_cmds::clone(a, cfg).await,
        Command::Promote { target } => snapshot_cmds::promote(&target, cfg).await,
        Command::Rollback(a) => snapshot_cmds::rollback(a, cfg).await,
        Command::Get(a) => query::get(a, cfg).await,
        Command::Set(a) => query::set(a, cfg).await,
        Command::Arcstat { pool, json } => query::arcstat(&pool, json, cfg).await,
        Command::Hotset { pool } => {
            let v = query::call(cfg, &pool, Request::HotsetSave).await?;
            println!("pool '{pool}': hot set of {} regions (64 KiB each) saved", v["regions"]);
            Ok(())
        }
        Command::Scrub(_) => unreachable!("handled before dispatch (it has its own exit code)"),
        Command::History(a) => scrub_cmds::history(a, cfg).await,
        Command::Wait { pool } => scrub_cmds::wait(&pool, cfg).await,
        Command::Add(a) => vdev_cmds::add(a, cfg).await,
        Command::Remove(a) => vdev_cmds::remove(a, cfg).await,
        Command::Replace(a) => vdev_cmds::replace(a, cfg).await,
        Command::Sync { pool } => {
            let v = query::call(cfg, &pool, Request::Sync).await?;
            println!("pool '{pool}' synced at txg {}", v["txg"]);
            Ok(())
        }
    }
}
