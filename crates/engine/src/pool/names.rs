//! Names of pools, volumes and snapshots: what the CLI accepts, the same rule everywhere.

use crate::error::{Error, Result};

/// Pool names: 1-64 letters, digits, `-_.:`, starting with a letter.
pub fn check_pool_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c));
    if ok {
        Ok(())
    } else {
        Err(Error::BadInput(format!(
            "invalid name '{name}': use 1-64 letters, digits, '-', '_', '.', ':' starting with a letter"
        )))
    }
}

/// Volume and snapshot names follow the pool-name rule.
pub fn check_volume_name(name: &str) -> Result<()> {
    check_pool_name(name)
}

/// Splits `VOLUME@SNAPSHOT`.
pub fn split_snapshot_name(full: &str) -> Result<(&str, &str)> {
    match full.split_once('@') {
        Some((v, s)) if !v.is_empty() && !s.is_empty() => Ok((v, s)),
        _ => Err(Error::BadInput(format!("'{full}' is not a snapshot name: use VOLUME@SNAPSHOT"))),
    }
}
