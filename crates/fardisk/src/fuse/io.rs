//! Byte-range I/O on a volume for requests of any size and alignment.
//!
//! The kernel sends reads and writes at any byte offset (O_DIRECT through FUSE has no
//! alignment rule), while a device may refuse requests not aligned to its
//! `min_block_bytes`. Reads are widened to whole blocks and sliced; an unaligned write
//! becomes a read-modify-write of its edge blocks. Two unaligned writes into one block must
//! not lose each other's bytes, so read-modify-write cycles hold the volume's gate
//! exclusively and every other write holds it shared.
//!
//! Ranges are clipped at the end of the volume: reads past it are short, writes starting at
//! or past it fail with ENOSPC (what a block device answers), writes crossing it are short.

use bytes::{Bytes, BytesMut};
use fardisk_fuse::Errno;
use fardisk_nbd::{BlockDevice, DeviceError};

use super::errno::Failure;
use super::inodes::RmwGate;

/// Largest trim or zeroing request sent to the device at once (the trait takes a u32 length
/// and devices bound request sizes); larger ranges go out in pieces.
const ZERO_CHUNK_BYTES: u64 = 1 << 30;

/// A validated fallocate(2) mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FallocateOp {
    /// Plain allocation: every byte of a volume is already addressable, nothing to do.
    Allocate { keep_size: bool },
    /// FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE: deallocate; reads return zeroes after.
    /// Sent to the device as `trim`, so this relies on fardisk devices reading a trimmed
    /// range as zeroes (MemDevice and the pool's volumes do; NBD alone does not promise it).
    /// It matters: a loop device sends both discard and non-NOUNMAP write-zeroes as this.
    PunchHole,
    /// FALLOC_FL_ZERO_RANGE: zeroes, allocated.
    ZeroRange { keep_size: bool },
}

impl FallocateOp {
    pub(crate) fn parse(mode: i32) -> Result<FallocateOp, Errno> {
        let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let rest = mode & !libc::FALLOC_FL_KEEP_SIZE;
        match rest {
            0 => Ok(FallocateOp::Allocate { keep_size }),
            libc::FALLOC_FL_PUNCH_HOLE if keep_size => Ok(FallocateOp::PunchHole),
            // fallocate(2): PUNCH_HOLE must be ORed with KEEP_SIZE.
            libc::FALLOC_FL_PUNCH_HOLE => Err(Errno::EINVAL),
            libc::FALLOC_FL_ZERO_RANGE => Ok(FallocateOp::ZeroRange { keep_size }),
            // COLLAPSE_RANGE, INSERT_RANGE, UNSHARE_RANGE change a file's shape or sharing,
            // which a fixed-size volume image has no use for.
            _ => Err(Errno::EOPNOTSUPP),
        }
    }

    fn keeps_size(self) -> bool {
        match self {
            FallocateOp::Allocate { keep_size } | FallocateOp::ZeroRange { keep_size } => keep_size,
            FallocateOp::PunchHole => true,
        }
    }
}

fn block_bytes(device: &dyn BlockDevice) -> u64 {
    u64::from(device.min_block_bytes().max(1))
}

fn align_down(value: u64, block: u64) -> u64 {
    value - value % block
}

fn align_up(value: u64, block: u64) -> u64 {
    value.div_ceil(block).saturating_mul(block)
}

fn length_u32(length: u64) -> Result<u32, DeviceError> {
    u32::try_from(length)
        .map_err(|_| DeviceError::InvalidArgument(format!("request of {length} bytes")))
}

/// Reads `length` bytes at `offset` (fewer past the end of the volume).
#[cfg(test)]
pub(crate) async fn read_at(
    device: &dyn BlockDevice,
    offset: u64,
    length: u32,
) -> Result<Bytes, DeviceError> {
    let parts = read_parts_at(device, offset, length).await?;
    Ok(match parts.as_slice() {
        [] => Bytes::new(),
        [one] => one.clone(),
        _ => parts.concat().into(),
    })
}

/// Reads `length` bytes at `offset` (fewer past the end of the volume) as parts in order, the
/// device's own buffers (a READ reply goes out as them with one writev: no copy into one
/// buffer).
pub(crate) async fn read_parts_at(
    device: &dyn BlockDevice,
    offset: u64,
    length: u32,
) -> Result<Vec<Bytes>, DeviceError> {
    let size = device.size_bytes();
    if offset >= size || length == 0 {
        return Ok(Vec::new());
    }
    let length = u64::from(length).min(size - offset);
    let block = block_bytes(device);
    let start = align_down(offset, block);
    let end = align_up(offset + length, block).min(size);
    let parts = device.read_parts(start, length_u32(end - start)?).await?;
    let got: u64 = parts.iter().map(|p| p.len() as u64).sum();
    if got != end - start {
        return Err(DeviceError::Io(format!(
            "device returned {got} bytes for a {}-byte read at {start}",
            end - start
        )));
    }
    Ok(cut_parts(parts, (offset - start) as usize, length as usize))
}

/// `length` bytes of `parts` after the first `skip`, as parts (empty ones left out).
fn cut_parts(parts: Vec<Bytes>, mut skip: usize, mut length: usize) -> Vec<Bytes> {
    let mut out = Vec::with_capacity(parts.len());
    for part in parts {
        if length == 0 {
            break;
        }
        if skip >= part.len() {
            skip -= part.len();
            continue;
        }
        let n = (part.len() - skip).min(length);
        out.push(if skip == 0 && n == part.len() { part } else { part.slice(skip..skip + n) });
        skip = 0;
        length -= n;
    }
    out
}

/// One device read whose reply length is checked (a short reply must not become a silent
/// hole in the caller's data).
async fn read_exact(
    device: &dyn BlockDevice,
    offset: u64,
    length: u64,
) -> Result<Bytes, DeviceError> {
    let data = device.read(offset, length_u32(length)?).await?;
    if data.len() as u64 != length {
        return Err(DeviceError::Io(format!(
            "device returned {} bytes for a {length}-byte read at {offset}",
            data.len()
        )));
    }
    Ok(data)
}

/// Writes `data` at `offset`; returns the bytes written (short at the end of the volume).
pub(crate) async fn write_at(
    device: &dyn BlockDevice,
    gate: &RmwGate,
    offset: u64,
    data: Bytes,
    fua: bool,
) -> Result<u32, DeviceError> {
    let size = device.size_bytes();
    if data.is_empty() {
        return Ok(0);
    }
    if offset >= size {
        return Err(DeviceError::NoSpace(format!(
            "write at {offset} is past the end of the {size}-byte volume"
        )));
    }
    let length = (data.len() as u64).min(size - offset);
    let data = data.slice(..length as usize);
    let block = block_bytes(device);
    let end = offset + length;
    let aligned = offset.is_multiple_of(block) && (end.is_multiple_of(block) || end == size);
    if aligned {
        let _shared = gate.read().await;
        device.write(offset, data, fua).await?;
    } else {
        let _exclusive = gate.write().await;
        let (start, merged) = merge_edges(device, offset, &data, block, size).await?;
        device.write(start, merged, fua).await?;
    }
    length_u32(length)
}

/// The whole blocks covering `offset..offset+data.len()`, with `data` laid over the
/// current contents of the edge blocks. The caller holds the gate exclusively.
async fn merge_edges(
    device: &dyn BlockDevice,
    offset: u64,
    data: &[u8],
    block: u64,
    size: u64,
) -> Result<(u64, Bytes), DeviceError> {
    let end = offset + data.len() as u64;
    let start = align_down(offset, block);
    let covered_end = align_up(end, block).min(size);
    let mut merged = BytesMut::zeroed((covered_end - start) as usize);
    let head_end = (start + block).min(covered_end);
    if start < offset {
        let head = read_exact(device, start, head_end - start).await?;
        merged[..head.len()].copy_from_slice(&head);
    }
    let tail_start = align_down(end, block);
    let tail_is_head = start < offset && tail_start == start;
    if end < covered_end && !tail_is_head {
        let tail = read_exact(device, tail_start, covered_end - tail_start).await?;
        let at = (tail_start - start) as usize;
        merged[at..at + tail.len()].copy_from_slice(&tail);
    }
    let at = (offset - start) as usize;
    merged[at..at + data.len()].copy_from_slice(data);
    Ok((start, merged.freeze()))
}

/// Carries out a validated fallocate on `offset..offset+length`.
pub(crate) async fn fallocate(
    device: &dyn BlockDevice,
    gate: &RmwGate,
    op: FallocateOp,
    offset: u64,
    length: u64,
) -> Result<(), Failure> {
    let size = device.size_bytes();
    let end = offset.checked_add(length).ok_or(Failure::Refused(Errno::EINVAL))?;
    if end > size && !op.keeps_size() {
        tracing::warn!(
            offset,
            length,
            size,
            "fuse: fallocate would grow a fixed-size volume image"
        );
        return Err(Failure::Refused(Errno::EFBIG));
    }
    let end = end.min(size);
    if offset >= end {
        return Ok(());
    }
    match op {
        FallocateOp::Allocate { .. } => Ok(()),
        FallocateOp::PunchHole => Ok(zero_range(device, gate, offset, end, true).await?),
        FallocateOp::ZeroRange { .. } => Ok(zero_range(device, gate, offset, end, false).await?),
    }
}

/// Zeroes `offset..end` (inside the volume): partial edge blocks by read-modify-write,
/// whole blocks by `trim` (punch) or `write_zeroes` without deallocation (zero range).
async fn zero_range(
    device: &dyn BlockDevice,
    gate: &RmwGate,
    offset: u64,
    end: u64,
    punch: bool,
) -> Result<(), DeviceError> {
    let block = block_bytes(device);
    let size = device.size_bytes();
    let middle_start = align_up(offset, block).min(end);
    let middle_end = if end == size { end } else { align_down(end, block).max(middle_start) };
    if offset < middle_start {
        write_zeroes_by_rmw(device, gate, offset, middle_start).await?;
    }
    if middle_end < end {
        write_zeroes_by_rmw(device, gate, middle_end, end).await?;
    }
    let _shared = gate.read().await;
    let chunk = align_down(ZERO_CHUNK_BYTES, block).max(block);
    let mut position = middle_start;
    while position < middle_end {
        let piece = length_u32((middle_end - position).min(chunk))?;
        if punch {
            device.trim(position, piece).await?;
        } else {
            device.write_zeroes(position, piece, false, false).await?;
        }
        position += u64::from(piece);
    }
    Ok(())
}

async fn write_zeroes_by_rmw(
    device: &dyn BlockDevice,
    gate: &RmwGate,
    offset: u64,
    end: u64,
) -> Result<(), DeviceError> {
    let zeroes = Bytes::from(vec![0u8; (end - offset) as usize]);
    write_at(device, gate, offset, zeroes, false).await.map(|_| ())
}

#[cfg(test)]
#[path = "io_tests.rs"]
mod tests;
