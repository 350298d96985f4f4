//! The kernel's loop driver, spoken to with ioctls through `libc` (no `losetup`): find a free
//! device, bind an image to it with direct I/O, read back what a bound device holds, resize it,
//! and unbind it. Every call here blocks; and since the images live on our own FUSE mount, a
//! call that opens or stats one must never run on a FUSE request handler thread (the request it
//! causes would wait for the thread that sent it).

use std::ffi::CStr;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

// linux/loop.h
const LOOP_SET_FD: libc::c_ulong = 0x4C00;
const LOOP_CLR_FD: libc::c_ulong = 0x4C01;
const LOOP_GET_STATUS64: libc::c_ulong = 0x4C05;
const LOOP_SET_CAPACITY: libc::c_ulong = 0x4C07;
const LOOP_SET_DIRECT_IO: libc::c_ulong = 0x4C08;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
pub const LO_FLAGS_READ_ONLY: u32 = 1;
pub const LO_FLAGS_AUTOCLEAR: u32 = 4;
pub const LO_FLAGS_DIRECT_IO: u32 = 16;
/// `lo_file_name`: 64 bytes, the last one always NUL.
pub const LO_NAME_BYTES_MAX: usize = 63;

/// How many free devices an attach tries when another process binds the one it was given
/// between LOOP_CTL_GET_FREE and LOOP_CONFIGURE (EBUSY): the race is real (udisks, other
/// `losetup -f`), but a few losses in a row mean something else is wrong.
const ATTACH_TRIES_MAX: u32 = 8;

/// `struct loop_info64`.
#[repr(C)]
#[derive(Clone, Copy)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// `struct loop_config`.
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

impl LoopInfo64 {
    fn zeroed() -> LoopInfo64 {
        // SAFETY: a plain C struct of integers and byte arrays; all zeroes is a valid value.
        unsafe { std::mem::zeroed() }
    }
}

/// What a bound loop device reports about itself (LOOP_GET_STATUS64).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopStatus {
    /// st_dev and st_ino of the backing file, as `stat` shows them.
    pub backing_dev: u64,
    pub backing_inode: u64,
    /// The name given at attach (fardisk writes its marker there, see `names::marker`).
    pub file_name: String,
    pub flags: u32,
}

/// `/dev/loopN`.
pub fn device_path(number: u32) -> PathBuf {
    PathBuf::from(format!("/dev/loop{number}"))
}

fn ioctl(file: &File, request: libc::c_ulong, arg: libc::c_ulong) -> io::Result<libc::c_int> {
    // SAFETY: the loop ioctls used here take an integer or a pointer to a struct of the size
    // the kernel expects, which the callers pass and keep alive for the call.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), request as _, arg) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn open_device(number: u32, write: bool) -> io::Result<File> {
    OpenOptions::new().read(true).write(write).open(device_path(number))
}

/// Opens the device exclusively, as mount(2) and mkfs do. EBUSY means it is in use: a file
/// system is mounted on it (or another exclusive opener, e.g. a device mapper table, holds it).
/// While the returned file is open nobody else can mount it.
pub fn claim(number: u32) -> io::Result<File> {
    OpenOptions::new().read(true).custom_flags(libc::O_EXCL).open(device_path(number))
}

/// Binds `image` to a free loop device with direct I/O (read-only when asked) and `name` as its
/// `lo_file_name`; returns the device's number. LOOP_CONFIGURE does it in one call; a kernel
/// without it (before 5.8) gets LOOP_SET_FD then LOOP_SET_DIRECT_IO.
pub fn attach(image: &Path, name: &str, read_only: bool) -> io::Result<u32> {
    let backing = OpenOptions::new().read(true).write(!read_only).open(image)?;
    let control = OpenOptions::new().read(true).write(true).open("/dev/loop-control")?;
    let mut info = LoopInfo64::zeroed();
    let bytes = name.as_bytes();
    let n = bytes.len().min(LO_NAME_BYTES_MAX);
    info.lo_file_name[..n].copy_from_slice(&bytes[..n]);
    info.lo_flags = LO_FLAGS_DIRECT_IO | if read_only { LO_FLAGS_READ_ONLY } else { 0 };
    let mut last = io::Error::from_raw_os_error(libc::EBUSY);
    for _ in 0..ATTACH_TRIES_MAX {
        let number = ioctl(&control, LOOP_CTL_GET_FREE, 0)? as u32;
        let device = match open_device(number, !read_only) {
            Ok(d) => d,
            // Removed (loop_control LOOP_CTL_REMOVE) before we opened it: take another.
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                last = e;
                continue;
            }
            Err(e) => return Err(e),
        };
        let config =
            LoopConfig { fd: backing.as_raw_fd() as u32, block_size: 0, info, reserved: [0; 8] };
        match ioctl(&device, LOOP_CONFIGURE, &config as *const LoopConfig as libc::c_ulong) {
            Ok(_) => return Ok(number),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => last = e,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOTTY)) => {
                return attach_old_way(&device, &backing, number, &info);
            }
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        last.kind(),
        format!("no free loop device after {ATTACH_TRIES_MAX} tries (each taken by another process first: {last})"),
    ))
}

/// LOOP_SET_FD, then the name (LOOP_SET_STATUS64 cannot set direct I/O), then direct I/O.
fn attach_old_way(
    device: &File,
    backing: &File,
    number: u32,
    info: &LoopInfo64,
) -> io::Result<u32> {
    const LOOP_SET_STATUS64: libc::c_ulong = 0x4C04;
    ioctl(device, LOOP_SET_FD, backing.as_raw_fd() as libc::c_ulong)?;
    let mut named = *info;
    named.lo_flags &= !LO_FLAGS_DIRECT_IO;
    let result = ioctl(device, LOOP_SET_STATUS64, &named as *const LoopInfo64 as libc::c_ulong)
        .and_then(|_| ioctl(device, LOOP_SET_DIRECT_IO, 1));
    if let Err(e) = result {
        let _ = ioctl(device, LOOP_CLR_FD, 0);
        return Err(e);
    }
    Ok(number)
}

/// What a bound device holds. Fails when it is not bound (ENXIO), and with ENOTCONN when its
/// backing file is on a FUSE mount whose server died (the kernel stats the file).
pub fn status(number: u32) -> io::Result<LoopStatus> {
    let device = open_device(number, false)?;
    let mut info = LoopInfo64::zeroed();
    ioctl(&device, LOOP_GET_STATUS64, &mut info as *mut LoopInfo64 as libc::c_ulong)?;
    let name = CStr::from_bytes_until_nul(&info.lo_file_name)
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(LoopStatus {
        backing_dev: info.lo_device,
        backing_inode: info.lo_inode,
        file_name: name,
        flags: info.lo_flags,
    })
}

/// Unbinds the device through `file` (best opened with [`claim`], so that nobody can mount it
/// meanwhile). The kernel does not refuse a device that others hold open: it marks it to unbind
/// itself at their last close (LO_FLAGS_AUTOCLEAR) and says nothing, so the caller checks.
pub fn detach(file: &File) -> io::Result<()> {
    ioctl(file, LOOP_CLR_FD, 0).map(|_| ())
}

/// Marks a device that is in use to unbind itself when its last user closes it.
pub fn detach_when_unused(number: u32) -> io::Result<()> {
    detach(&open_device(number, false)?)
}

/// Makes the device take the image's new size (after `volume resize`).
pub fn refresh_capacity(number: u32) -> io::Result<()> {
    ioctl(&open_device(number, false)?, LOOP_SET_CAPACITY, 0).map(|_| ())
}
