//! Runs a validated [`Action`] against the device and turns the result into a
//! [`Reply`]. Device results are checked before they reach the wire: a read that
//! returns the wrong number of bytes would desynchronise the client, so it becomes EIO.

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

/// Executes `action`; `payload` is the write data (empty for other commands).
pub async fn execute(
    device: &dyn BlockDevice,
    action: Action,
    payload: Bytes,
    descriptors_max: usize,
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
        Action::Cache { offset, length_bytes } => done(device.cache(offset, length_bytes).await),
        Action::BlockStatus { offset, length_bytes, req_one } => {
            match device.block_status(offset, length_bytes).await {
                Ok(extents) => Reply::BlockStatus(block_descriptors(
                    &extents,
                    length_bytes,
                    req_one,
                    descriptors_max,
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
