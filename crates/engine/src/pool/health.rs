//! The pool's health: ONLINE, or why it is not (a store outage suspends commits, another
//! importer fences the writer, a failed commit faults it), and whether it was imported read-only.
//! Every subsystem reports into it; nothing here calls out.

use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", content = "reason")]
pub enum PoolHealth {
    Online,
    /// Serving with reduced redundancy or speed: a log leg or device is unavailable.
    Degraded(String),
    /// The store is unreachable: txg commits wait and retry; sync writes are acknowledged from
    /// the log until it is full, writes continue up to the dirty limit (`Pool::health` says how
    /// near each bound is).
    Suspended(String),
    /// Another importer took the pool over.
    Fenced(String),
    /// A commit failed for good; the pool must be re-imported.
    Faulted(String),
}

#[derive(Debug)]
pub(crate) struct HealthState {
    pub health: PoolHealth,
    /// Imported read-only at this txg (open/read_only.rs): every change is refused.
    pub read_only_txg: Option<u64>,
}

impl Default for HealthState {
    fn default() -> Self {
        HealthState { health: PoolHealth::Online, read_only_txg: None }
    }
}

impl HealthState {
    pub fn check_writable(&self) -> Result<()> {
        if let Some(t) = self.read_only_txg {
            return Err(Error::BadInput(format!(
                "the pool is imported read-only at txg {t}; export it and import it without --txg/--at/--read-only to change it"
            )));
        }
        self.check_not_fenced()
    }
    pub fn check_not_fenced(&self) -> Result<()> {
        match &self.health {
            PoolHealth::Fenced(w) => Err(Error::Fenced(w.clone())),
            PoolHealth::Faulted(w) => {
                Err(Error::Unavailable(format!("pool is faulted: {w}; export and import it again")))
            }
            _ => Ok(()),
        }
    }
    pub fn suspend(&mut self, why: String) {
        if matches!(self.health, PoolHealth::Online | PoolHealth::Suspended(_)) {
            self.health = PoolHealth::Suspended(why);
        }
    }
    pub fn resume(&mut self) {
        if matches!(self.health, PoolHealth::Suspended(_)) {
            self.health = PoolHealth::Online;
        }
    }
    pub fn fault(&mut self, e: &Error) {
        self.health = match e {
            Error::Fenced(w) => PoolHealth::Fenced(w.clone()),
            other => PoolHealth::Faulted(other.to_string()),
        };
    }
}
