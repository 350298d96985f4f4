//! Where requests come from and replies go: the /dev/fuse device ([`device`]) and
//! io_uring ring entries ([`uring`]), and the buffers the kernel copies requests into
//! ([`resident`]). A [`Channel`] is the way back for one request.

pub(crate) mod device;
mod resident;
pub(crate) mod uring;

use std::sync::Arc;

use crate::reply::Body;

/// The way back to the kernel for one request: the device file it was read from (the
/// kernel matches a reply only on that file), or the ring entry it arrived in.
pub(crate) enum Channel {
    Device(Arc<device::DeviceChannel>),
    Ring(uring::RingSlot),
}

impl Channel {
    /// Whether a request that came this way and is dropped unanswered must be left in the
    /// kernel for a successor (see [`crate::Session::begin_handover`]) instead of answered
    /// EIO. Never for a ring entry: the kernel does not resend those (Linux 6.18), so one
    /// left unanswered would hang until the connection ends; EIO is the lesser harm.
    pub(crate) fn leaves_dropped_requests(&self) -> bool {
        match self {
            Channel::Device(device) => device.leaves_dropped_requests(),
            Channel::Ring(_) => false,
        }
    }

    pub(crate) fn send(self, unique: u64, opcode: u32, error: i32, body: Body<'_>) {
        // The kernel refuses an error reply that carries data.
        let body = if error != 0 { Body::Empty } else { body };
        match self {
            Channel::Device(device) => device.send(unique, opcode, error, body),
            Channel::Ring(slot) => slot.send(unique, error, body),
        }
    }
}
