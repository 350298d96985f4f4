//! `fardisk destroy`: deletes an exported pool from its store and clears the labels of its log
//! and cache devices, so they can be reused without `-f`.
//!
//! Order matters for an interrupted destroy: the roots go first, newest last, so until the very
//! last root is deleted the pool still imports as it was; after it, nothing imports it and a
//! second `destroy -f` deletes what is left. Objects under the prefix that fardisk did not write
//! are never touched.

use crate::config::Config;
use crate::store::open_store;
use anyhow::{bail, Context, Result};
use fardisk_engine::root::VdevRole;
use fardisk_engine::{Env, Pool};
use std::io::{Read, Seek, SeekFrom, Write};

#[derive(Debug, clap::Args)]
pub struct DestroyArgs {
    pub pool: String,
    /// Where the pool lives; defaults to the URL it was created or last imported with
    pub store_url: Option<String>,
    /// Destroy even though another host holds the pool imported (its writes will fail), or
    /// delete the leftovers of an interrupted destroy
    #[arg(short = 'f', long)]
    pub force: bool,
    /// The pool's encryption key file (default: FARDISK_KEY, FARDISK_KEY_FILE, or the file
    /// recorded on this host)
    #[arg(long, value_name = "PATH")]
    pub key_file: Option<std::path::PathBuf>,
}

/// Key prefixes fardisk writes (docs/format.md); anything else under the prefix is not ours.
const POOL_KEY_PREFIXES: [&str; 7] =
    ["roots/", "segments/", "history/", "probe/", "leases/", "head", "hotset"];

fn is_pool_key(key: &str) -> bool {
    POOL_KEY_PREFIXES.iter().any(|p| if p.ends_with('/') { key.starts_with(p) } else { key == *p })
}

pub async fn run(a: DestroyArgs, cfg: &Config) -> Result<()> {
    let known = cfg.paths.load_record(&a.pool);
    let url = match (&a.store_url, &known) {
        (Some(u), _) => u.clone(),
        (None, Some(r)) => r.store_url.clone(),
        (None, None) => bail!("pool '{}' is not known on this host; give its STORE_URL", a.pool),
    };
    if crate::control::is_alive(&cfg.paths.control_socket(&a.pool)).await {
        bail!(
            "pool '{}' is imported on this host; export it first (fardisk export {})",
            a.pool,
            a.pool
        );
    }
    let env = Env::system();
    let key = crate::keys::resolve(
        cfg,
        a.key_file.as_deref(),
        known.as_ref().and_then(|r| r.key_file.as_deref()),
    )?;
    // No simulated distance: destroying is not measured, and the user should not wait for it.
    let store = open_store(cfg, &url, &None, &env, false, key.as_ref().map(|k| &k.key))?;
    let mut keys: Vec<String> = store
        .list("")
        .await
        .map_err(|e| anyhow::anyhow!("cannot list {url}: {e}"))?
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    keys.retain(|k| is_pool_key(k));
    let root = match Pool::peek(store.clone(), &env).await {
        Ok(r) => Some(r),
        Err(e) if keys.iter().any(|k| k.starts_with("roots/")) => {
            bail!("cannot read pool '{}' in {url}: {e}", a.pool)
        }
        Err(_) => None,
    };
    match &root {
        Some(r) if r.pool_name != a.pool => bail!("store {url} holds pool '{}', not '{}'; nothing was deleted", r.pool_name, a.pool),
        Some(r) if r.holder.active && !a.force => bail!(
            "pool '{}' is imported by host {} (pid {}); export it there first, or add -f to destroy it under that writer",
            a.pool,
            r.holder.hostname,
            r.holder.pid
        ),
        None if keys.is_empty() => bail!("no fardisk pool in {url}; check the URL"),
        None if !a.force => bail!("no pool in {url}, but {} objects of a destroyed pool remain; add -f to delete them", keys.len()),
        _ => {}
    }
    // Roots ascending (the newest last), then everything else.
    keys.sort_by_key(|k| (!k.starts_with("roots/") && k != "head", k.clone()));
    let bar = crate::progress::bar(cfg.progress, &format!("destroying {}", a.pool), "objects");
    if let Some(b) = &bar {
        b.set_length(keys.len() as u64);
    }
    for k in &keys {
        match store.delete(k).await {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => bail!(
                "cannot delete {k} from {url}: {e}; run 'fardisk destroy {} -f' again to finish",
                a.pool
            ),
        }
        if let Some(b) = &bar {
            b.inc(1);
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let mut cleared = Vec::new();
    if let Some(r) = &root {
        for v in &r.vdevs {
            for p in &v.paths {
                match clear_label(p, r.pool_guid, v.role == VdevRole::Log) {
                    Ok(true) => cleared.push(p.clone()),
                    Ok(false) => {}
                    Err(e) => eprintln!("fardisk: warning: cannot clear the label of {p}: {e}; 'fardisk create -f' can still reuse it"),
                }
            }
        }
    }
    cfg.paths.remove_record(&a.pool);
    let _ = std::fs::remove_file(cfg.paths.log_file(&a.pool));
    println!(
        "destroyed pool '{}': {} objects deleted from {url}{}",
        a.pool,
        keys.len(),
        if cleared.is_empty() {
            String::new()
        } else {
            format!("; labels cleared on {}", cleared.join(", "))
        }
    );
    Ok(())
}

/// Zeroes the label and head area of a device that carries pool `guid`'s label; leaves any other
/// device alone. Returns whether it cleared one.
fn clear_label(path: &str, guid: u128, is_log: bool) -> Result<bool> {
    let mut f = match std::fs::OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e).with_context(|| format!("cannot open {path}")),
    };
    let mut head = vec![0u8; 8192];
    f.read_exact(&mut head).with_context(|| format!("cannot read {path}"))?;
    let owner = if is_log {
        [0usize, 4096]
            .iter()
            .find_map(|&o| fardisk_slog::DeviceLabel::decode(&head[o..o + 4096]).ok())
            .map(|l| l.pool_guid)
    } else {
        fardisk_arc::cache_label_pool_guid(&head)
    };
    if owner != Some(guid) {
        return Ok(false);
    }
    // Log: two labels and two head slots (16 KiB); cache: two label copies (8 KiB).
    let zero_bytes = if is_log { fardisk_slog::layout::RING_START_BYTES as usize } else { 8192 };
    f.seek(SeekFrom::Start(0))?;
    f.write_all(&vec![0u8; zero_bytes])?;
    f.sync_data()?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_keys_fardisk_writes_are_pool_keys() {
        for k in [
            "roots/0000000000000001",
            "segments/0000010000000001",
            "history/1-2",
            "head",
            "hotset",
            "probe/ab",
            "leases/0000000000000001",
        ] {
            assert!(is_pool_key(k), "{k}");
        }
        for k in ["headroom", "backup.tar", "rootsx/1", "notes/hotset"] {
            assert!(!is_pool_key(k), "{k}");
        }
    }
}
