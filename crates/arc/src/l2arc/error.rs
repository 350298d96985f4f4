//! L2ARC errors. Only device management returns them: lookups and writes never fail to the
//! caller, they miss or skip, and a failing device is marked FAULTED instead.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum L2Error {
    #[error("cache device {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cache device {path} has no valid label ({reason})")]
    BadLabel { path: PathBuf, reason: String },
    #[error("cache device {path} belongs to pool {found_pool_guid:032x}, not this pool")]
    ForeignPool { path: PathBuf, found_pool_guid: u128 },
    #[error("cache device {path} is too small: {size_bytes} bytes")]
    DeviceTooSmall { path: PathBuf, size_bytes: u64 },
    #[error(
        "cache device {path} is too large: {size_bytes} bytes would need more than 2^24 log \
         blocks; use a partition of at most 1 PiB"
    )]
    DeviceTooLarge { path: PathBuf, size_bytes: u64 },
    #[error(
        "cache device {path} has the version {version} layout, whose contents this version \
         cannot index"
    )]
    OldFormat { path: PathBuf, version: u32 },
    #[error("cache device {path} is already in use by this L2ARC")]
    DuplicateDevice { path: PathBuf },
    #[error("no cache device with id {0}")]
    UnknownDevice(u32),
    #[error("bad L2ARC configuration: {0}")]
    BadConfig(String),
}

impl L2Error {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        L2Error::Io { path: path.to_path_buf(), source }
    }
}
