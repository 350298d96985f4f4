//! Request validation: a pure function from a request header and the export's limits
//! to the device action to run, or the NBD error to answer with. Every bound the
//! protocol asks the server to enforce is checked here, before the device is touched.

use crate::wire::consts::*;
use crate::wire::{Command, RequestHeader};

/// What validation needs to know about the negotiated export.
#[derive(Debug, Clone, Copy)]
pub struct ExportLimits {
    pub size_bytes: u64,
    pub min_block_bytes: u32,
    pub max_request_bytes: u32,
    pub read_only: bool,
    pub structured_replies: bool,
    pub base_allocation: bool,
    /// Cheap zeroing available (otherwise FAST_ZERO requests get ENOTSUP).
    pub fast_zero: bool,
    /// Every write, trim and write-zeroes runs with FUA (`ServerConfig::writes_durable_before_reply`).
    pub fua_always: bool,
}

/// A validated request, ready to run against the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Read {
        offset: u64,
        length_bytes: u32,
        dont_fragment: bool,
    },
    Write {
        offset: u64,
        fua: bool,
    },
    Flush,
    Trim {
        offset: u64,
        length_bytes: u32,
        fua: bool,
    },
    WriteZeroes {
        offset: u64,
        length_bytes: u32,
        may_trim: bool,
        fua: bool,
    },
    Cache {
        offset: u64,
        length_bytes: u32,
    },
    BlockStatus {
        offset: u64,
        length_bytes: u32,
        req_one: bool,
    },
    /// A zero-length request: succeeds without touching the device.
    Nothing,
    /// NBD_CMD_DISC: no reply; the connection finishes in-flight requests and closes.
    Disconnect,
}

/// An NBD error value with a message for the human reading the client's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub errno: u32,
    pub message: String,
}

fn refuse(errno: u32, message: impl Into<String>) -> Refusal {
    Refusal { errno, message: message.into() }
}

/// Decides what to do with `header`.
pub fn validate(header: &RequestHeader, limits: &ExportLimits) -> Result<Action, Refusal> {
    let command = header.command;
    if command == Command::Disconnect {
        // The spec requires offset and length 0 but has no reply to refuse with: a
        // disconnect is honoured whatever its fields say.
        return Ok(Action::Disconnect);
    }
    check_flags(header, limits)?;
    if command == Command::Flush {
        if header.offset != 0 || header.length_bytes != 0 {
            return Err(refuse(NBD_EINVAL, "NBD_CMD_FLUSH needs offset and length 0"));
        }
        return Ok(Action::Flush);
    }
    let writes = matches!(command, Command::Write | Command::Trim | Command::WriteZeroes);
    if writes && limits.read_only {
        return Err(refuse(NBD_EPERM, "export is read-only"));
    }
    check_length(header, limits)?;
    check_range(header, limits)?;
    if header.length_bytes == 0 {
        return Ok(Action::Nothing);
    }
    Ok(action_for(header, limits))
}

fn check_flags(header: &RequestHeader, limits: &ExportLimits) -> Result<(), Refusal> {
    let command = header.command;
    if let Command::Unknown(code) = command {
        return Err(refuse(NBD_EINVAL, format!("unknown command {code}")));
    }
    let unexpected = header.flags & !command.allowed_flags();
    if unexpected != 0 {
        return Err(refuse(NBD_EINVAL, format!("flags {unexpected:#x} not valid for {command:?}")));
    }
    // DF is only advertised with structured replies; FAST_ZERO only on writable exports.
    if header.has_flag(NBD_CMD_FLAG_DF) && !limits.structured_replies {
        return Err(refuse(NBD_EINVAL, "NBD_CMD_FLAG_DF needs structured replies"));
    }
    if header.has_flag(NBD_CMD_FLAG_FAST_ZERO) && limits.read_only {
        return Err(refuse(NBD_EINVAL, "NBD_CMD_FLAG_FAST_ZERO was not advertised"));
    }
    Ok(())
}

fn check_length(header: &RequestHeader, limits: &ExportLimits) -> Result<(), Refusal> {
    let length_bytes = header.length_bytes;
    match header.command {
        Command::Read | Command::Write if length_bytes > limits.max_request_bytes => Err(refuse(
            NBD_EINVAL,
            format!(
                "length {length_bytes} exceeds the maximum payload {}",
                limits.max_request_bytes
            ),
        )),
        Command::BlockStatus if !limits.base_allocation => {
            Err(refuse(NBD_EINVAL, "NBD_CMD_BLOCK_STATUS without a negotiated metadata context"))
        }
        Command::BlockStatus if length_bytes == 0 => {
            Err(refuse(NBD_EINVAL, "NBD_CMD_BLOCK_STATUS with length 0"))
        }
        _ => Ok(()),
    }
}

fn check_range(header: &RequestHeader, limits: &ExportLimits) -> Result<(), Refusal> {
    let end = header.offset.checked_add(header.length_bytes as u64);
    if end.is_none_or(|end| end > limits.size_bytes) {
        // The spec asks for ENOSPC on writes past the end, EINVAL for everything else.
        let errno = match header.command {
            Command::Write | Command::WriteZeroes => NBD_ENOSPC,
            _ => NBD_EINVAL,
        };
        let message = format!(
            "range {}+{} exceeds export size {}",
            header.offset, header.length_bytes, limits.size_bytes
        );
        return Err(refuse(errno, message));
    }
    let block = limits.min_block_bytes.max(1) as u64;
    let end = header.offset + header.length_bytes as u64;
    let end_aligned = end.is_multiple_of(block) || end == limits.size_bytes;
    if !header.offset.is_multiple_of(block) || !end_aligned {
        return Err(refuse(NBD_EINVAL, format!("request not aligned to {block} bytes")));
    }
    Ok(())
}

fn action_for(header: &RequestHeader, limits: &ExportLimits) -> Action {
    let offset = header.offset;
    let length_bytes = header.length_bytes;
    let fua = (header.has_flag(NBD_CMD_FLAG_FUA) || limits.fua_always) && !limits.read_only;
    match header.command {
        Command::Read => {
            Action::Read { offset, length_bytes, dont_fragment: header.has_flag(NBD_CMD_FLAG_DF) }
        }
        Command::Write => Action::Write { offset, fua },
        Command::Trim => Action::Trim { offset, length_bytes, fua },
        Command::WriteZeroes => Action::WriteZeroes {
            offset,
            length_bytes,
            may_trim: !header.has_flag(NBD_CMD_FLAG_NO_HOLE),
            fua,
        },
        Command::Cache => Action::Cache { offset, length_bytes },
        Command::BlockStatus => Action::BlockStatus {
            offset,
            length_bytes,
            req_one: header.has_flag(NBD_CMD_FLAG_REQ_ONE),
        },
        // Dealt with in `validate` before we get here.
        Command::Flush => Action::Flush,
        Command::Disconnect => Action::Disconnect,
        Command::Unknown(_) => Action::Nothing,
    }
}

/// FAST_ZERO must fail fast with ENOTSUP when the device cannot zero cheaply; checked
/// separately because it depends on the device at the time of the request.
pub fn check_fast_zero(header: &RequestHeader, limits: &ExportLimits) -> Result<(), Refusal> {
    if header.command == Command::WriteZeroes
        && header.has_flag(NBD_CMD_FLAG_FAST_ZERO)
        && !limits.fast_zero
    {
        return Err(refuse(NBD_ENOTSUP, "fast zeroing is not available"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(read_only: bool, fua_always: bool) -> ExportLimits {
        ExportLimits {
            size_bytes: 1 << 20,
            min_block_bytes: 512,
            max_request_bytes: 1 << 20,
            read_only,
            structured_replies: true,
            base_allocation: false,
            fast_zero: true,
            fua_always,
        }
    }

    fn header(command: Command, flags: u16) -> RequestHeader {
        RequestHeader { flags, command, cookie: 1, offset: 4096, length_bytes: 4096 }
    }

    fn fua_of(action: Action) -> bool {
        match action {
            Action::Write { fua, .. }
            | Action::Trim { fua, .. }
            | Action::WriteZeroes { fua, .. } => fua,
            other => panic!("not a write: {other:?}"),
        }
    }

    #[test]
    fn with_fua_always_every_write_trim_and_write_zeroes_runs_with_fua() {
        for command in [Command::Write, Command::Trim, Command::WriteZeroes] {
            let plain = validate(&header(command, 0), &limits(false, false)).expect("valid");
            assert!(!fua_of(plain), "{command:?} without the flag and without fua_always");
            let asked = validate(&header(command, NBD_CMD_FLAG_FUA), &limits(false, false));
            assert!(fua_of(asked.expect("valid")), "{command:?} with the flag");
            let always = validate(&header(command, 0), &limits(false, true)).expect("valid");
            assert!(fua_of(always), "{command:?} under fua_always, without the flag");
        }
    }
}
