//! Errors of the intent log.
//!
//! `LogError` is the rich internal error; [`LogError::kind`] folds it into the few things an
//! operator or the engine can do about it.

use std::io;
use std::path::PathBuf;

/// What the caller should do about an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Publish a txg (which releases log space) and retry.
    RetryAfterTxgSync,
    /// Fix the configuration or the device (wrong, missing, too small).
    FixInput,
    /// The device is damaged or failed: replace it.
    DeviceFailed,
    /// The log was shut down.
    Closed,
}

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("I/O error on {path}: {op}: {source}")]
    Io { path: PathBuf, op: &'static str, source: io::Error },

    #[error("log device {path} (vdev {vdev_guid:#x}) is missing")]
    Missing { path: PathBuf, vdev_guid: u64 },

    #[error("{path} carries no fardisk label")]
    NoLabel { path: PathBuf },

    #[error("{path} is the wrong device: it carries {found}, expected {expected}")]
    WrongDevice { path: PathBuf, found: String, expected: String },

    #[error("{path} is in use: it carries {found}; use force to overwrite it")]
    DeviceInUse { path: PathBuf, found: String },

    #[error("{path} is too small: {size_bytes} bytes, at least {min_bytes} needed")]
    TooSmall { path: PathBuf, size_bytes: u64, min_bytes: u64 },

    #[error("log full: {needed_bytes} bytes needed, {free_bytes} of {total_bytes} free")]
    LogFull { needed_bytes: u64, free_bytes: u64, total_bytes: u64 },

    #[error("no healthy log leg left")]
    NoHealthyLeg,

    #[error(
        "an earlier commit failed on every log device; publish txg {txg} and release it first"
    )]
    AwaitingRelease { txg: u64 },

    #[error("invalid log record: {0}")]
    InvalidRecord(String),

    #[error("invalid configuration: {0}")]
    InvalidConfig(String),

    #[error("{path} is not a device of this log")]
    UnknownDevice { path: PathBuf },

    #[error("the intent log is closed")]
    Closed,
}

impl LogError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            LogError::LogFull { .. } | LogError::AwaitingRelease { .. } => {
                ErrorKind::RetryAfterTxgSync
            }
            LogError::Io { .. } | LogError::NoHealthyLeg => ErrorKind::DeviceFailed,
            LogError::Closed => ErrorKind::Closed,
            LogError::Missing { .. }
            | LogError::NoLabel { .. }
            | LogError::WrongDevice { .. }
            | LogError::DeviceInUse { .. }
            | LogError::TooSmall { .. }
            | LogError::InvalidRecord(_)
            | LogError::InvalidConfig(_)
            | LogError::UnknownDevice { .. } => ErrorKind::FixInput,
        }
    }

    pub(crate) fn io(path: &std::path::Path, op: &'static str, source: io::Error) -> Self {
        LogError::Io { path: path.to_path_buf(), op, source }
    }
}
