//! Errors in two layers (SlateDB RFC-0007): a rich internal [`Error`] and a small public
//! [`ErrorKind`] that tells the operator what to do. Front ends map kinds to errno in one place.

use crate::objstore::StoreError;

/// What an operator (or a front end) should do about an error. Travels with a failed control
/// request from the daemon to the CLI (as `retry_later`, `bad_input`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// A transient condition (store outage past the retry budget, throttle): retry later.
    RetryLater,
    /// The request or the configuration is wrong: fix the input.
    BadInput,
    /// Stored bytes failed verification: run scrub; data was not returned.
    DataDamaged,
    /// Another importer took over the pool; this writer must stop.
    Fenced,
    /// The pool or store cannot be used as asked (missing device, no conditional writes, ...).
    Unavailable,
    /// An invariant broke: a bug in fardisk.
    Bug,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("object store: {0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    BadInput(String),
    #[error("checksum mismatch in {what}: expected {expected:#018x}, found {found:#018x}")]
    Checksum { what: String, expected: u64, found: u64 },
    #[error("corrupt {what}: {why}")]
    Corrupt { what: String, why: String },
    #[error("pool is fenced: {0}")]
    Fenced(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("pool is suspended: {0}")]
    Suspended(String),
    #[error("internal error (a bug): {0}")]
    Bug(String),
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Store(e) if e.is_transient() => ErrorKind::RetryLater,
            Error::Store(e) if e.kind == crate::objstore::StoreErrorKind::Corrupt => {
                ErrorKind::DataDamaged
            }
            Error::Store(_) => ErrorKind::Unavailable,
            Error::BadInput(_) => ErrorKind::BadInput,
            Error::Checksum { .. } | Error::Corrupt { .. } => ErrorKind::DataDamaged,
            Error::Fenced(_) => ErrorKind::Fenced,
            Error::Unavailable(_) => ErrorKind::Unavailable,
            Error::Suspended(_) => ErrorKind::RetryLater,
            Error::Bug(_) => ErrorKind::Bug,
        }
    }

    /// The errno a block-device front end returns for this error.
    pub fn errno(&self) -> i32 {
        match self.kind() {
            ErrorKind::BadInput => libc::EINVAL,
            ErrorKind::Fenced => libc::EROFS,
            _ => libc::EIO,
        }
    }

    pub fn corrupt(what: impl Into<String>, why: impl Into<String>) -> Error {
        Error::Corrupt { what: what.into(), why: why.into() }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
