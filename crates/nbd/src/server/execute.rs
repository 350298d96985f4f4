//! Runs a validated [`Action`] against the device and turns the result into a
//! [`Reply`]. Device results are checked before they reach the wire: a read that
//! returns the wrong number of bytes would desynchronise the client, so it becomes EIO.
//!
//! NBD_CMD_CACHE carries no payload, so the protocol lets a client ask for more than the
//! maximum payload size in one request (up to 4 GiB). A device may buffer what it prefetches,
//! so such a request is passed to the device in pieces of at most `max_request_bytes`, one
//! after the other: one request never makes the device hold more than a maximal READ would.

use bytes::Bytes;

use super::command::{Action, Refusal};
use super::reply_sink::Reply;
use super::shaping::block_descriptors;
use crate::device::{BlockDevice, DeviceError};
use crate::wire::consts::NBD_EIO;

fn device_refusal(error: DeviceError) -> Reply {
    Reply::Error(Refusal { errno: error.nbd_errno(), message: error.to_string() })
}

fn done(result: Result<(), DeviceError>) -> Reply {
    match result {
        Ok(()) => Reply::Done,
        Err(error) => device_refusal(error),
    }
}

/// What bounds the work of one request beyond its validation.
#[derive(Debug, Clone, Copy)]
pub struct ExecuteLimits {
    /// Most extents in one block-status reply chunk.
    pub descriptors_max: usize,
    /// Largest piece of an NBD_CMD_CACHE request handed to the device at once (the
    /// maximum payload size).
    pub cache_chunk_bytes: u32,
}

/// Executes `action`; `payload` is the write data (empty for other commands).
pub async fn execute(
    device: &dyn BlockDevice,
    action: Action,
    payload: Bytes,
    limits: ExecuteLimits,
) -> Reply {
    match action {
        // The connection stops at DISC before executing anything; nothing to do.
        Action::Nothing | Action::Disconnect => Reply::Done,
        Action::Read { offset, length_bytes, dont_fragment } => {
            read(device, offset, length_bytes, dont_fragment).await
        }
        Action::Write { offset, fua } => done(device.write(offset, payload, fua).await),
        Action::Flush => done(device.flush().await),
        Action::Trim { offset, length_bytes, fua } => trim(device, offset, length_bytes, fua).await,
        Action::WriteZeroes { offset, length_bytes, may_trim, fua } => {
            done(device.write_zeroes(offset, length_bytes, may_trim, fua).await)
        }
        Action::Cache { offset, length_bytes } => {
            done(cache(device, offset, length_bytes, limits.cache_chunk_bytes).await)
        }
        Action::BlockStatus { offset, length_bytes, req_one } => {
            match device.block_status(offset, length_bytes).await {
                Ok(extents) => Reply::BlockStatus(block_descriptors(
                    &extents,
                    length_bytes,
                    req_one,
                    limits.descriptors_max,
                )),
                Err(error) => device_refusal(error),
            }
        }
    }
}

async fn read(
    device: &dyn BlockDevice,
    offset: u64,
    length_bytes: u32,
    dont_fragment: bool,
) -> Reply {
    match device.read(offset, length_bytes).await {
        Ok(data) if data.len() == length_bytes as usize => {
            Reply::Read { offset, data, dont_fragment }
        }
        Ok(data) => Reply::Error(Refusal {
            errno: NBD_EIO,
            message: format!("device returned {} bytes for a {length_bytes}-byte read", data.len()),
        }),
        Err(error) => device_refusal(error),
    }
}

/// TRIM has no FUA parameter on the device: a FUA trim is a trim followed by a flush.
async fn trim(device: &dyn BlockDevice, offset: u64, length_bytes: u32, fua: bool) -> Reply {
    if let Err(error) = device.trim(offset, length_bytes).await {
        return device_refusal(error);
    }
    if fua {
        return done(device.flush().await);
    }
    Reply::Done
}

/// A CACHE request in pieces of at most `chunk_bytes` (bounded: at most 2^32 / 4096 pieces).
/// Stops at the first piece the device refuses.
async fn cache(
    device: &dyn BlockDevice,
    offset: u64,
    length_bytes: u32,
    chunk_bytes: u32,
) -> Result<(), DeviceError> {
    let chunk_bytes = chunk_bytes.max(4096);
    let mut done_bytes = 0u32;
    while done_bytes < length_bytes {
        let piece = (length_bytes - done_bytes).min(chunk_bytes);
        device.cache(offset + u64::from(done_bytes), piece).await?;
        done_bytes += piece;
    }
    Ok(())
}
