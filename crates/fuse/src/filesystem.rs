//! What a filesystem implements to be served by a [`crate::Session`].

use crate::init::{InitOptions, KernelInit};
use crate::reply::Reply;
use crate::request::Request;

/// A filesystem served by a session. Requests arrive on the transport's threads (a
/// /dev/fuse worker or an io_uring queue thread); `request` may answer at once or hand the
/// [`Reply`] to another thread and return. Anything it needs from the request (WRITE data,
/// names) it must copy before returning: the transport reuses the buffer.
pub trait Filesystem: Send + Sync + 'static {
    /// What to ask of the kernel at INIT (not called when a session resumes a connection
    /// another process initialised).
    fn init(&self, _kernel: &KernelInit) -> InitOptions {
        InitOptions::default()
    }

    /// Every request except INIT, DESTROY, FORGET, BATCH_FORGET and INTERRUPT, which the
    /// session handles itself.
    fn request(&self, request: &Request<'_>, reply: Reply);

    /// The kernel dropped `nlookup` references to `nodeid`.
    fn forget(&self, _nodeid: u64, _nlookup: u64) {}

    /// The kernel is unmounting (DESTROY).
    fn destroy(&self) {}
}
