//! Requests parsed from a borrowed buffer. Every length is checked against the header's
//! and the buffer's: a malformed request is an [`Malformed`] error (answered with EIO by
//! the session), never a panic or an out-of-bounds read. Only the opcodes an image-file
//! filesystem needs are decoded; the rest arrive as [`Operation::Unsupported`] (ENOSYS).

use crate::abi::{self, opcode, Pod};

/// A request as the kernel sent it, borrowing the transport's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    pub header: abi::InHeader,
    pub operation: Operation<'a>,
}

impl Request<'_> {
    /// The id the reply must carry (resent requests keep the resend bit).
    pub fn unique(&self) -> u64 {
        self.header.unique
    }

    pub fn nodeid(&self) -> u64 {
        self.header.nodeid
    }

    /// Whether the kernel sends this again after a FUSE_NOTIFY_RESEND (a predecessor read
    /// it and died before answering).
    pub fn is_resend(&self) -> bool {
        self.header.unique & abi::UNIQUE_RESEND != 0
    }
}

/// The decoded operation. Names and strings borrow the request buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation<'a> {
    Init(abi::InitIn),
    Destroy,
    Lookup {
        name: &'a [u8],
    },
    Forget(abi::ForgetIn),
    /// FORGETs in one message; iterate with [`forgets`].
    BatchForget {
        count: u32,
        entries: &'a [u8],
    },
    Getattr(abi::GetattrIn),
    Setattr(abi::SetattrIn),
    Open(abi::OpenIn),
    Read(abi::ReadIn),
    Write {
        arg: abi::WriteIn,
        data: &'a [u8],
    },
    Flush(abi::FlushIn),
    Release(abi::ReleaseIn),
    Fsync(abi::FsyncIn),
    Opendir(abi::OpenIn),
    Readdir {
        arg: abi::ReadIn,
        plus: bool,
    },
    Releasedir(abi::ReleaseIn),
    Fsyncdir(abi::FsyncIn),
    Statfs,
    Access(abi::AccessIn),
    Interrupt(abi::InterruptIn),
    Fallocate(abi::FallocateIn),
    /// An opcode this layer does not decode; answered ENOSYS.
    Unsupported(u32),
}

/// Why a request could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// Shorter than a header: there is not even a unique id to answer.
    NoHeader { len: usize },
    /// The header's length disagrees with what was received.
    Length { header_len: u32, received: usize },
    /// The opcode's arguments are shorter than its struct.
    Arguments { opcode: u32, len: usize },
    /// A name is not NUL-terminated or is empty.
    Name { opcode: u32 },
    /// A WRITE's size disagrees with the data that follows.
    WriteSize { size: u32, data: usize },
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Malformed::NoHeader { len } => write!(f, "request of {len} bytes has no header"),
            Malformed::Length { header_len, received } => {
                write!(f, "header says {header_len} bytes, {received} received")
            }
            Malformed::Arguments { opcode, len } => {
                write!(f, "opcode {opcode}: {len} bytes of arguments are too few")
            }
            Malformed::Name { opcode } => write!(f, "opcode {opcode}: bad name"),
            Malformed::WriteSize { size, data } => {
                write!(f, "WRITE of {size} bytes carries {data} bytes")
            }
        }
    }
}

/// The header alone, for answering a request whose body does not parse.
pub fn parse_header(buffer: &[u8]) -> Option<abi::InHeader> {
    abi::InHeader::read_from(buffer)
}

/// Parses one request from /dev/fuse: `buffer` is what one read returned.
pub fn parse(buffer: &[u8]) -> Result<Request<'_>, Malformed> {
    let header = parse_header(buffer).ok_or(Malformed::NoHeader { len: buffer.len() })?;
    let total = header.len as usize;
    if total < std::mem::size_of::<abi::InHeader>() || total > buffer.len() {
        return Err(Malformed::Length { header_len: header.len, received: buffer.len() });
    }
    let args = &buffer[std::mem::size_of::<abi::InHeader>()..total];
    let args = strip_extensions(&header, args)?;
    let operation = parse_operation(header.opcode, args, None)?;
    Ok(Request { header, operation })
}

/// Parses one request from an io_uring entry: the kernel puts the fuse header and the
/// opcode's own struct into the header buffer and everything after it (names, WRITE data)
/// into the payload buffer, of which `payload` is the part it filled.
pub fn parse_ring<'a>(
    in_header: &[u8],
    op_in: &'a [u8],
    payload: &'a [u8],
) -> Result<Request<'a>, Malformed> {
    let header = parse_header(in_header).ok_or(Malformed::NoHeader { len: in_header.len() })?;
    let operation = parse_operation(header.opcode, op_in, Some(payload))?;
    Ok(Request { header, operation })
}

/// Removes request extensions (security context, supplementary groups), which we never
/// negotiate but whose length the header counts in units of 8 bytes.
fn strip_extensions<'a>(header: &abi::InHeader, args: &'a [u8]) -> Result<&'a [u8], Malformed> {
    let extension_bytes = usize::from(header.total_extlen) * 8;
    args.len()
        .checked_sub(extension_bytes)
        .map(|len| &args[..len])
        .ok_or(Malformed::Arguments { opcode: header.opcode, len: args.len() })
}

/// The opcode's struct from `head`, and what follows it: from `head` itself on /dev/fuse
/// (`tail` None), the ring entry's payload for io_uring (the struct has its own slot there).
fn fixed<'a, T: Pod>(
    opcode: u32,
    head: &'a [u8],
    tail: Option<&'a [u8]>,
) -> Result<(T, &'a [u8]), Malformed> {
    let value = T::read_from(head).ok_or(Malformed::Arguments { opcode, len: head.len() })?;
    let rest = tail.unwrap_or(&head[std::mem::size_of::<T>()..]);
    Ok((value, rest))
}

fn only<T: Pod>(opcode: u32, head: &[u8]) -> Result<T, Malformed> {
    T::read_from(head).ok_or(Malformed::Arguments { opcode, len: head.len() })
}

/// A NUL-terminated, non-empty name at the start of `bytes`.
fn name(opcode: u32, bytes: &[u8]) -> Result<&[u8], Malformed> {
    let end = bytes.iter().position(|byte| *byte == 0).ok_or(Malformed::Name { opcode })?;
    if end == 0 {
        return Err(Malformed::Name { opcode });
    }
    Ok(&bytes[..end])
}

fn parse_operation<'a>(
    code: u32,
    head: &'a [u8],
    tail: Option<&'a [u8]>,
) -> Result<Operation<'a>, Malformed> {
    Ok(match code {
        opcode::INIT => Operation::Init(init_in(head)?),
        opcode::DESTROY => Operation::Destroy,
        opcode::LOOKUP => {
            // LOOKUP has no struct: the name is the whole argument (the payload on a ring).
            Operation::Lookup { name: name(code, tail.unwrap_or(head))? }
        }
        opcode::FORGET => Operation::Forget(only(code, head)?),
        opcode::BATCH_FORGET => {
            let (arg, rest) = fixed::<abi::BatchForgetIn>(code, head, tail)?;
            let wanted = (arg.count as usize).checked_mul(std::mem::size_of::<abi::ForgetOne>());
            match wanted {
                Some(bytes) if bytes <= rest.len() => {
                    Operation::BatchForget { count: arg.count, entries: &rest[..bytes] }
                }
                _ => return Err(Malformed::Arguments { opcode: code, len: head.len() }),
            }
        }
        opcode::GETATTR => Operation::Getattr(only(code, head)?),
        opcode::SETATTR => Operation::Setattr(only(code, head)?),
        opcode::OPEN => Operation::Open(only(code, head)?),
        opcode::OPENDIR => Operation::Opendir(only(code, head)?),
        opcode::READ => Operation::Read(only(code, head)?),
        opcode::READDIR => Operation::Readdir { arg: only(code, head)?, plus: false },
        opcode::READDIRPLUS => Operation::Readdir { arg: only(code, head)?, plus: true },
        opcode::WRITE => {
            let (arg, data) = fixed::<abi::WriteIn>(code, head, tail)?;
            if data.len() < arg.size as usize {
                return Err(Malformed::WriteSize { size: arg.size, data: data.len() });
            }
            Operation::Write { arg, data: &data[..arg.size as usize] }
        }
        opcode::FLUSH => Operation::Flush(only(code, head)?),
        opcode::RELEASE => Operation::Release(only(code, head)?),
        opcode::RELEASEDIR => Operation::Releasedir(only(code, head)?),
        opcode::FSYNC => Operation::Fsync(only(code, head)?),
        opcode::FSYNCDIR => Operation::Fsyncdir(only(code, head)?),
        opcode::STATFS => Operation::Statfs,
        opcode::ACCESS => Operation::Access(only(code, head)?),
        opcode::INTERRUPT => Operation::Interrupt(only(code, head)?),
        opcode::FALLOCATE => Operation::Fallocate(only(code, head)?),
        other => Operation::Unsupported(other),
    })
}

/// INIT: kernels before 7.36 send 16 bytes (no flags2); the rest reads as zero.
fn init_in(head: &[u8]) -> Result<abi::InitIn, Malformed> {
    const INIT_IN_V1_BYTES: usize = 16;
    if head.len() < INIT_IN_V1_BYTES {
        return Err(Malformed::Arguments { opcode: opcode::INIT, len: head.len() });
    }
    let mut padded = [0u8; std::mem::size_of::<abi::InitIn>()];
    let take = head.len().min(padded.len());
    padded[..take].copy_from_slice(&head[..take]);
    abi::InitIn::read_from(&padded).ok_or(Malformed::Arguments { opcode: opcode::INIT, len: take })
}

/// The (node id, lookup count) pairs of a BATCH_FORGET.
pub fn forgets(entries: &[u8]) -> impl Iterator<Item = abi::ForgetOne> + '_ {
    entries
        .chunks_exact(std::mem::size_of::<abi::ForgetOne>())
        .filter_map(abi::ForgetOne::read_from)
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
