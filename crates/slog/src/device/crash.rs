//! `CrashDevice`: an in-memory log device that can show what a power cut would leave.
//!
//! It keeps the durable image (what survived the last flush) apart from the writes issued
//! since. [`CrashDevice::crash_image`] drops, keeps or tears (at 512-byte sector granularity)
//! each unflushed write, chosen by a seeded RNG, which is exactly the freedom a real disk with
//! a volatile write cache has. It also injects I/O errors, a vanished device and a flush gate
//! that holds flushes so tests can crash "between write and flush" deterministically.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::{DeviceProvider, LogDevice};
use crate::layout::SECTOR_SIZE_BYTES;
use crate::rng::Rng;

#[derive(Default)]
struct Faults {
    fail_reads: bool,
    fail_writes: bool,
    fail_flushes: bool,
    vanished: bool,
}

struct PendingWrite {
    offset_bytes: u64,
    data: Vec<u8>,
}

struct CrashState {
    current: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<PendingWrite>,
    faults: Faults,
    writes: u64,
    reads: u64,
    flushes: u64,
    volatile: bool,
}

#[derive(Default)]
struct GateState {
    held: bool,
    blocked: usize,
}

/// Holds flushes while closed, so a test can observe the window between write and flush.
#[derive(Default)]
struct FlushGate {
    state: Mutex<GateState>,
    changed: Condvar,
}

/// An in-memory device with crash and fault injection. Clones share the same device.
#[derive(Clone)]
pub struct CrashDevice {
    path: PathBuf,
    state: Arc<Mutex<CrashState>>,
    gate: Arc<FlushGate>,
}

impl CrashDevice {
    /// A zero-filled device of `len_bytes`.
    pub fn new(path: impl Into<PathBuf>, len_bytes: u64) -> Self {
        let len = usize::try_from(len_bytes).expect("test device size fits in memory");
        Self::from_image(path, vec![0u8; len])
    }

    /// A device whose durable content is `image` (e.g. a previous `crash_image`).
    pub fn from_image(path: impl Into<PathBuf>, image: Vec<u8>) -> Self {
        let state = CrashState {
            current: image.clone(),
            durable: image,
            pending: Vec::new(),
            faults: Faults::default(),
            writes: 0,
            reads: 0,
            flushes: 0,
            volatile: false,
        };
        Self { path: path.into(), state: Arc::new(Mutex::new(state)), gate: Arc::default() }
    }

    /// The image a power cut right now would leave: each unflushed write is dropped, kept
    /// whole, or torn sector by sector, as the seeded RNG decides.
    pub fn crash_image(&self, seed: u64) -> Vec<u8> {
        let state = self.state.lock();
        let rng = Rng::new(seed);
        let mut image = state.durable.clone();
        for write in &state.pending {
            match rng.below(3) {
                0 => {}
                1 => apply(&mut image, write.offset_bytes, &write.data),
                _ => apply_torn(&mut image, write, &rng),
            }
        }
        image
    }

    /// What survived the last flush.
    pub fn durable_image(&self) -> Vec<u8> {
        self.state.lock().durable.clone()
    }

    /// What reads return now.
    pub fn current_image(&self) -> Vec<u8> {
        self.state.lock().current.clone()
    }

    /// Flips every byte of a range, durably (a media error or a stray write).
    pub fn corrupt(&self, offset_bytes: u64, len_bytes: u64) {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        let start = usize::try_from(offset_bytes).expect("offset fits in memory");
        let end = start + usize::try_from(len_bytes).expect("length fits in memory");
        for image in [&mut state.current, &mut state.durable] {
            for byte in &mut image[start..end] {
                *byte ^= 0xA5;
            }
        }
    }

    pub fn set_fail_reads(&self, fail: bool) {
        self.state.lock().faults.fail_reads = fail;
    }

    pub fn set_fail_writes(&self, fail: bool) {
        self.state.lock().faults.fail_writes = fail;
    }

    pub fn set_fail_flushes(&self, fail: bool) {
        self.state.lock().faults.fail_flushes = fail;
    }

    /// Every later operation fails as if the device had been unplugged.
    pub fn vanish(&self) {
        self.state.lock().faults.vanished = true;
    }

    pub fn is_vanished(&self) -> bool {
        self.state.lock().faults.vanished
    }

    /// Pretends the device lives in RAM (status shows the volatile flag).
    pub fn set_volatile(&self, volatile: bool) {
        self.state.lock().volatile = volatile;
    }

    /// Device writes issued so far.
    pub fn write_count(&self) -> u64 {
        self.state.lock().writes
    }

    /// Device reads issued so far (a walk of the log should read it in large pieces).
    pub fn read_count(&self) -> u64 {
        self.state.lock().reads
    }

    /// Flushes completed so far.
    pub fn flush_count(&self) -> u64 {
        self.state.lock().flushes
    }

    /// Writes issued since the last flush.
    pub fn pending_write_count(&self) -> usize {
        self.state.lock().pending.len()
    }

    /// From now on flushes block until [`CrashDevice::release_flushes`].
    pub fn hold_flushes(&self) {
        self.gate.state.lock().held = true;
    }

    pub fn release_flushes(&self) {
        self.gate.state.lock().held = false;
        self.gate.changed.notify_all();
    }

    /// Waits until `count` flushes are blocked at the gate; false on timeout.
    pub fn wait_for_blocked_flushes(&self, count: usize, timeout: Duration) -> bool {
        // A watchdog on real threads blocked at the gate: bounded in real time whatever the
        // injected clock does.
        #[allow(clippy::disallowed_methods)]
        let deadline = Instant::now() + timeout;
        let mut gate = self.gate.state.lock();
        while gate.blocked < count {
            if self.gate.changed.wait_until(&mut gate, deadline).timed_out() {
                return gate.blocked >= count;
            }
        }
        true
    }

    fn wait_at_gate(&self) {
        let mut gate = self.gate.state.lock();
        if !gate.held {
            return;
        }
        gate.blocked += 1;
        self.gate.changed.notify_all();
        while gate.held {
            self.gate.changed.wait(&mut gate);
        }
        gate.blocked -= 1;
    }

    fn check(&self, state: &CrashState, failing: bool, what: &str) -> io::Result<()> {
        if state.faults.vanished {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: device vanished", self.path.display()),
            ));
        }
        if failing {
            return Err(io::Error::other(format!(
                "{}: injected {what} error",
                self.path.display()
            )));
        }
        Ok(())
    }
}

fn apply(image: &mut [u8], offset_bytes: u64, data: &[u8]) {
    let start = usize::try_from(offset_bytes).expect("offset fits in memory");
    image[start..start + data.len()].copy_from_slice(data);
}

fn apply_torn(image: &mut [u8], write: &PendingWrite, rng: &Rng) {
    let sector = usize::try_from(SECTOR_SIZE_BYTES).expect("sector size fits");
    for (index, chunk) in write.data.chunks(sector).enumerate() {
        if rng.one_in(2) {
            let offset = write.offset_bytes + (index * sector) as u64;
            apply(image, offset, chunk);
        }
    }
}

fn range_check(len: usize, offset_bytes: u64, count: usize) -> io::Result<()> {
    let end = offset_bytes.checked_add(count as u64);
    match end {
        Some(end) if end <= len as u64 => Ok(()),
        _ => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "access past the end of the device")),
    }
}

impl LogDevice for CrashDevice {
    /// Torn writes here keep or lose whole 512-byte sectors, never bytes outside the write.
    fn write_unit_bytes(&self) -> u64 {
        SECTOR_SIZE_BYTES
    }

    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()> {
        let mut state = self.state.lock();
        state.reads += 1;
        self.check(&state, state.faults.fail_reads, "read")?;
        range_check(state.current.len(), offset_bytes, buf.len())?;
        let start = offset_bytes as usize;
        buf.copy_from_slice(&state.current[start..start + buf.len()]);
        Ok(())
    }

    fn write_at(&self, offset_bytes: u64, buf: &[u8]) -> io::Result<()> {
        let mut state = self.state.lock();
        self.check(&state, state.faults.fail_writes, "write")?;
        range_check(state.current.len(), offset_bytes, buf.len())?;
        apply(&mut state.current, offset_bytes, buf);
        state.pending.push(PendingWrite { offset_bytes, data: buf.to_vec() });
        state.writes += 1;
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        self.wait_at_gate();
        let mut state = self.state.lock();
        self.check(&state, state.faults.fail_flushes, "flush")?;
        let pending = std::mem::take(&mut state.pending);
        for write in &pending {
            apply(&mut state.durable, write.offset_bytes, &write.data);
        }
        state.flushes += 1;
        Ok(())
    }

    fn len_bytes(&self) -> u64 {
        self.state.lock().current.len() as u64
    }

    fn is_volatile(&self) -> bool {
        self.state.lock().volatile
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

/// A set of named in-memory devices standing in for the file system.
#[derive(Clone, Default)]
pub struct MemProvider {
    devices: Arc<Mutex<BTreeMap<PathBuf, CrashDevice>>>,
}

impl MemProvider {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a device under its path.
    pub fn insert(&self, device: CrashDevice) {
        self.devices.lock().insert(device.path.clone(), device);
    }

    /// Creates a zeroed device of `len_bytes` at `path` and returns it.
    pub fn add(&self, path: impl Into<PathBuf>, len_bytes: u64) -> CrashDevice {
        let device = CrashDevice::new(path, len_bytes);
        self.insert(device.clone());
        device
    }

    pub fn device(&self, path: impl AsRef<Path>) -> Option<CrashDevice> {
        self.devices.lock().get(path.as_ref()).cloned()
    }

    /// Unplugs a device: it is absent for later opens.
    pub fn remove(&self, path: impl AsRef<Path>) -> Option<CrashDevice> {
        self.devices.lock().remove(path.as_ref())
    }

    /// A new provider holding what a power cut now would leave of every device. A vanished
    /// device stays absent.
    pub fn crash(&self, seed: u64) -> MemProvider {
        let crashed = MemProvider::new();
        let rng = Rng::new(seed);
        for (path, device) in self.devices.lock().iter() {
            let device_seed = rng.next_u64();
            if !device.is_vanished() {
                crashed
                    .insert(CrashDevice::from_image(path.clone(), device.crash_image(device_seed)));
            }
        }
        crashed
    }
}

impl DeviceProvider for MemProvider {
    fn open(&self, path: &Path) -> io::Result<Arc<dyn LogDevice>> {
        match self.device(path) {
            Some(device) if !device.is_vanished() => Ok(Arc::new(device)),
            _ => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no such device", path.display()),
            )),
        }
    }

    fn create(&self, path: &Path, size_bytes: u64) -> io::Result<Arc<dyn LogDevice>> {
        if self.device(path).is_none() {
            self.add(path, size_bytes);
        }
        self.open(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unflushed_writes_are_not_durable() {
        let device = CrashDevice::new("/d", 8192);
        device.write_at(0, &[1u8; 4096]).expect("write");
        assert_eq!(device.durable_image()[0], 0);
        let mut buf = [0u8; 4096];
        device.read_at(0, &mut buf).expect("read");
        assert_eq!(buf[0], 1, "reads see unflushed writes");
        device.flush().expect("flush");
        assert_eq!(device.durable_image()[0], 1);
        assert_eq!(device.pending_write_count(), 0);
    }

    #[test]
    fn crash_images_cover_drop_keep_and_tear() {
        let device = CrashDevice::new("/d", 4096);
        device.write_at(0, &[9u8; 4096]).expect("write");
        let (mut dropped, mut kept, mut torn) = (false, false, false);
        for seed in 0..64 {
            let image = device.crash_image(seed);
            let nines = image.iter().filter(|&&b| b == 9).count();
            match nines {
                0 => dropped = true,
                4096 => kept = true,
                n => {
                    assert_eq!(n % 512, 0, "tears happen at sector granularity");
                    torn = true;
                }
            }
            assert_eq!(image, device.crash_image(seed), "deterministic per seed");
        }
        assert!(dropped && kept && torn);
    }

    #[test]
    fn faults_and_vanish() {
        let device = CrashDevice::new("/d", 4096);
        device.set_fail_writes(true);
        assert!(device.write_at(0, &[0u8; 512]).is_err());
        device.set_fail_writes(false);
        device.vanish();
        let err = device.flush().expect_err("vanished");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        let provider = MemProvider::new();
        provider.insert(device);
        assert!(provider.open(Path::new("/d")).is_err());
    }
}
