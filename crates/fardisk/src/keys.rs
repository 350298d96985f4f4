//! Where a pool's encryption key comes from: `--key-file PATH`, then `FARDISK_KEY` (64 hex digits),
//! then `FARDISK_KEY_FILE` (or `key_file` in the config file), then the key file this host
//! recorded for the pool. The key itself is
//! never printed, logged or written to the store; the registry keeps only the file's path.

use crate::config::Config;
use anyhow::{bail, Context, Result};
use fardisk_engine::objstore::EncryptionKey;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A key and the file it was read from (None when it came from `FARDISK_KEY`).
pub struct ResolvedKey {
    pub key: EncryptionKey,
    pub file: Option<PathBuf>,
}

pub fn read_key_file(path: &Path) -> Result<EncryptionKey> {
    let bytes =
        std::fs::read(path).with_context(|| format!("cannot read key file {}", path.display()))?;
    EncryptionKey::parse(&bytes).map_err(|e| anyhow::anyhow!("key file {}: {e}", path.display()))
}

/// The key to use, if any, from the flag, the configuration (`FARDISK_KEY`, then
/// `FARDISK_KEY_FILE` or the config file's `key_file`) or the host's record of the pool.
pub fn resolve(
    config: &Config,
    flag: Option<&Path>,
    recorded: Option<&str>,
) -> Result<Option<ResolvedKey>> {
    if let Some(p) = flag {
        return Ok(Some(ResolvedKey { key: read_key_file(p)?, file: Some(p.to_path_buf()) }));
    }
    if let Some(hex) = &config.key_hex {
        let key = EncryptionKey::parse(hex.expose().as_bytes())
            .map_err(|e| anyhow::anyhow!("FARDISK_KEY: {e}"))?;
        return Ok(Some(ResolvedKey { key, file: None }));
    }
    let file = config.key_file.clone().or_else(|| recorded.map(PathBuf::from));
    match file {
        Some(p) => Ok(Some(ResolvedKey { key: read_key_file(&p)?, file: Some(p) })),
        None => Ok(None),
    }
}

/// For `create --key-file PATH`: uses the key in PATH, or writes a new random one there (mode
/// 0600, never overwriting) and says so.
pub fn load_or_generate(path: &Path) -> Result<EncryptionKey> {
    if path.exists() {
        return read_key_file(path);
    }
    if !path.is_absolute() {
        bail!("key file '{}' must be an absolute path", path.display());
    }
    let mut bytes = [0u8; 32];
    #[allow(clippy::disallowed_methods)] // A key must be unpredictable: entropy, never a seed.
    // SAFETY: a valid buffer of the given length.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if got != bytes.len() as isize {
        bail!("cannot get 32 random bytes from the kernel for a new key");
    }
    let key = EncryptionKey::from_bytes(bytes);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create key file {}", path.display()))?;
    f.write_all(format!("{}\n", key.to_hex()).as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("cannot write key file {}", path.display()))?;
    eprintln!(
        "fardisk: wrote a new encryption key to {} (fingerprint {:016x}); keep a copy elsewhere: without it the pool cannot be read",
        path.display(),
        key.fingerprint()
    );
    Ok(key)
}
