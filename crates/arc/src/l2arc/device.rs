//! One cache device: a file or block device holding two label copies and then a ring of
//! fixed-size log-block slots.
//!
//! ```text
//! 0      label copy A (4 KiB sector)
//! 4096   label copy B (4 KiB sector)
//! 8192   slot 0 | slot 1 | ... | slot (slot_count - 1)      each log_block_bytes
//! ```
//! All I/O is positioned (`pread`/`pwrite`), so readers and the writer share one file handle.
//! Reads go around the page cache (O_DIRECT, a second handle) where the file system allows it:
//! see `direct.rs`. Each device holds the index of its own blocks (`index.rs`), sized from the
//! device when it is opened.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use super::direct::{drop_cached_range, is_direct_refusal, AlignedBuf, DirectReader};
use super::error::L2Error;
use super::geometry::{Geometry, UNIT_BYTES};
use super::index::{DeviceIndex, SLOTS_MAX};
use super::label::{Label, LABEL_SLOT_BYTES, RING_OFFSET_BYTES};
use super::log_block::{
    decode_meta, meta_len_from_header, BlockPlace, BlockReject, LogBlockMeta, LOG_HEADER_BYTES,
};
use super::stats::{DeviceCounters, DeviceState, DeviceStats, RebuildProgress};
use super::DeviceId;

/// Where the writer continues on this device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WriteCursor {
    pub(crate) next_slot: u32,
    pub(crate) next_sequence: u64,
}

/// The file a device was opened as; a different one at the same path means the device was
/// replaced under us.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileIdentity {
    dev: u64,
    ino: u64,
}

#[derive(Debug)]
struct Status {
    state: DeviceState,
    fault_reason: Option<String>,
}

pub(crate) struct CacheDevice {
    pub(crate) id: DeviceId,
    pub(crate) path: PathBuf,
    file: File,
    /// The O_DIRECT read handle; `None` when the file system refuses O_DIRECT.
    direct: Mutex<Option<std::sync::Arc<DirectReader>>>,
    identity: FileIdentity,
    is_regular_file: bool,
    pub(crate) label: Label,
    pub(crate) geometry: Geometry,
    pub(crate) capacity_bytes: u64,
    /// Where each cached block of this device is. Lock order: after `devices`, never held
    /// across device I/O.
    pub(crate) index: RwLock<DeviceIndex>,
    status: Mutex<Status>,
    removed: AtomicBool,
    slot_generations: Vec<AtomicU64>,
    pub(crate) cursor: Mutex<WriteCursor>,
    pub(crate) rebuild: RebuildProgress,
    pub(crate) counters: DeviceCounters,
}

fn open_rw(path: &Path, create: bool) -> Result<File, L2Error> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .open(path)
        .map_err(|e| L2Error::io(path, e))
}

fn identity_of(path: &Path, file: &File) -> Result<(FileIdentity, bool), L2Error> {
    let meta = file.metadata().map_err(|e| L2Error::io(path, e))?;
    Ok((FileIdentity { dev: meta.dev(), ino: meta.ino() }, meta.is_file()))
}

/// Size of a regular file or block device.
fn capacity_of(path: &Path, mut file: &File) -> Result<u64, L2Error> {
    file.seek(SeekFrom::End(0)).map_err(|e| L2Error::io(path, e))
}

impl CacheDevice {
    /// Writes a fresh label (new device guid) and returns the device ready for writes. Old log
    /// blocks left in the ring carry the previous guid and are ignored from now on.
    /// `log_block_bytes_for` picks the log-block size from the device's capacity.
    pub(crate) fn format(
        id: DeviceId,
        path: &Path,
        size_bytes: Option<u64>,
        pool_guid: u128,
        device_guid: u64,
        log_block_bytes_for: impl Fn(u64) -> u32,
    ) -> Result<Self, L2Error> {
        let file = open_rw(path, size_bytes.is_some())?;
        let (identity, is_regular_file) = identity_of(path, &file)?;
        if let (Some(size), true) = (size_bytes, is_regular_file) {
            file.set_len(size).map_err(|e| L2Error::io(path, e))?;
        }
        let capacity_bytes = capacity_of(path, &file)?;
        let log_block_bytes = log_block_bytes_for(capacity_bytes);
        let slot_count =
            capacity_bytes.saturating_sub(RING_OFFSET_BYTES) / u64::from(log_block_bytes);
        if slot_count < 2 {
            return Err(L2Error::DeviceTooSmall {
                path: path.to_path_buf(),
                size_bytes: capacity_bytes,
            });
        }
        if slot_count > SLOTS_MAX {
            return Err(L2Error::DeviceTooLarge {
                path: path.to_path_buf(),
                size_bytes: capacity_bytes,
            });
        }
        let label =
            Label { pool_guid, device_guid, log_block_bytes, slot_count: slot_count as u32 };
        let encoded = label.encode();
        for copy in 0..2 {
            file.write_all_at(&encoded, copy * LABEL_SLOT_BYTES)
                .map_err(|e| L2Error::io(path, e))?;
        }
        // The label must outlive a crash, or the device's contents could not be rebuilt.
        file.sync_data().map_err(|e| L2Error::io(path, e))?;
        let device = Self::assemble(
            id,
            path,
            file,
            identity,
            is_regular_file,
            label,
            capacity_bytes,
            DeviceState::Online,
        );
        device.rebuild.done.store(true, Ordering::Release);
        Ok(device)
    }

    /// Opens a device formatted earlier for this pool; it starts in `Rebuilding`.
    pub(crate) fn open_existing(
        id: DeviceId,
        path: &Path,
        pool_guid: u128,
    ) -> Result<Self, L2Error> {
        let file = open_rw(path, false)?;
        let (identity, is_regular_file) = identity_of(path, &file)?;
        let capacity_bytes = capacity_of(path, &file)?;
        let mut sectors = vec![0u8; RING_OFFSET_BYTES as usize];
        if capacity_bytes < RING_OFFSET_BYTES {
            return Err(L2Error::DeviceTooSmall {
                path: path.to_path_buf(),
                size_bytes: capacity_bytes,
            });
        }
        file.read_exact_at(&mut sectors, 0).map_err(|e| L2Error::io(path, e))?;
        let (first, second) = sectors.split_at(LABEL_SLOT_BYTES as usize);
        let (label, version) = Label::decode_either_any_version(first, second)
            .map_err(|reason| L2Error::BadLabel { path: path.to_path_buf(), reason })?;
        if label.pool_guid != pool_guid {
            return Err(L2Error::ForeignPool {
                path: path.to_path_buf(),
                found_pool_guid: label.pool_guid,
            });
        }
        if Label::is_old_version(version) {
            return Err(L2Error::OldFormat { path: path.to_path_buf(), version });
        }
        let block = label.log_block_bytes;
        let ring_end = RING_OFFSET_BYTES + u64::from(label.slot_count) * u64::from(block);
        let block_ok = block.is_multiple_of(UNIT_BYTES)
            && (super::config::LOG_BLOCK_BYTES_MIN..=super::config::LOG_BLOCK_BYTES_MAX)
                .contains(&block);
        if !block_ok || u64::from(label.slot_count) > SLOTS_MAX {
            let reason = format!("log_block_bytes {block} with {} slots", label.slot_count);
            return Err(L2Error::BadLabel { path: path.to_path_buf(), reason });
        }
        if ring_end > capacity_bytes || label.slot_count < 2 {
            let reason = format!("ring needs {ring_end} bytes, device has {capacity_bytes}");
            return Err(L2Error::BadLabel { path: path.to_path_buf(), reason });
        }
        Ok(Self::assemble(
            id,
            path,
            file,
            identity,
            is_regular_file,
            label,
            capacity_bytes,
            DeviceState::Rebuilding,
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        id: DeviceId,
        path: &Path,
        file: File,
        identity: FileIdentity,
        is_regular_file: bool,
        label: Label,
        capacity_bytes: u64,
        state: DeviceState,
    ) -> Self {
        let geometry = Geometry::new(label.log_block_bytes);
        Self {
            id,
            path: path.to_path_buf(),
            file,
            direct: Mutex::new(DirectReader::open(path).map(std::sync::Arc::new)),
            identity,
            is_regular_file,
            label,
            geometry,
            capacity_bytes,
            index: RwLock::new(DeviceIndex::new(label.slot_count, geometry.data_units)),
            status: Mutex::new(Status { state, fault_reason: None }),
            removed: AtomicBool::new(false),
            slot_generations: (0..label.slot_count).map(|_| AtomicU64::new(0)).collect(),
            cursor: Mutex::new(WriteCursor { next_slot: 0, next_sequence: 1 }),
            rebuild: RebuildProgress::default(),
            counters: DeviceCounters::default(),
        }
    }

    pub(crate) fn slot_count(&self) -> u32 {
        self.label.slot_count
    }

    pub(crate) fn block_bytes(&self) -> u32 {
        self.label.log_block_bytes
    }

    pub(crate) fn slot_offset(&self, slot: u32) -> u64 {
        RING_OFFSET_BYTES + u64::from(slot) * u64::from(self.label.log_block_bytes)
    }

    pub(crate) fn place(&self, slot: u32) -> BlockPlace {
        BlockPlace {
            pool_guid: self.label.pool_guid,
            device_guid: self.label.device_guid,
            slot_index: slot,
            block_bytes: self.label.log_block_bytes,
        }
    }

    /// Reads exactly `units` whole units at `offset` (a multiple of 4096) into an aligned
    /// buffer; a short read (a truncated device) is an error.
    pub(crate) fn read_units(&self, offset: u64, units: u32) -> std::io::Result<Bytes> {
        debug_assert!(offset.is_multiple_of(u64::from(UNIT_BYTES)));
        let len = (units * UNIT_BYTES) as usize;
        let mut buf = AlignedBuf::zeroed(len);
        let direct = self.direct.lock().clone();
        match direct.map(|d| d.read_exact_into(&mut buf, offset)) {
            Some(Ok(())) => {}
            Some(Err(err)) if is_direct_refusal(&err) => {
                self.stop_direct_reads();
                self.file.read_exact_at(buf.as_mut_slice(), offset)?;
            }
            Some(Err(err)) => return Err(err),
            None => self.file.read_exact_at(buf.as_mut_slice(), offset)?,
        }
        self.counters.bytes_read.fetch_add(len as u64, Ordering::Relaxed);
        Ok(Bytes::from_owner(buf))
    }

    /// Reads and verifies the metadata (header and entry table) of the log block in `slot`.
    /// `Ok(Err(_))` when the slot holds no valid block of this device incarnation.
    pub(crate) fn read_meta(
        &self,
        slot: u32,
    ) -> std::io::Result<Result<LogBlockMeta, BlockReject>> {
        let place = self.place(slot);
        let base = self.slot_offset(slot);
        let first = self.read_units(base, 1)?;
        let meta_len = match meta_len_from_header(&first[..LOG_HEADER_BYTES], &place) {
            Ok(len) => len,
            Err(reject) => return Ok(Err(reject)),
        };
        let meta = if meta_len <= first.len() {
            first
        } else {
            self.read_units(base, (meta_len as u32).div_ceil(UNIT_BYTES))?
        };
        Ok(decode_meta(&meta[..meta_len], &place))
    }

    /// True while reads bypass the page cache.
    pub(crate) fn direct_reads(&self) -> bool {
        self.direct.lock().is_some()
    }

    /// The O_DIRECT handle, while the file system takes O_DIRECT reads.
    pub(crate) fn direct_reader(&self) -> Option<std::sync::Arc<DirectReader>> {
        self.direct.lock().clone()
    }

    /// The file system refused an O_DIRECT read: read through the page cache from now on.
    pub(crate) fn stop_direct_reads(&self) {
        if self.direct.lock().take().is_some() {
            tracing::warn!(path = %self.path.display(), "O_DIRECT read refused; cache device reads go through the page cache from now on");
        }
    }

    pub(crate) fn buffered_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.file.as_raw_fd()
    }

    /// Fills `buf` from `offset` through the page cache; returns the bytes read, all of them.
    pub(crate) fn read_buffered_into(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.file.read_exact_at(buf, offset)?;
        Ok(buf.len())
    }

    /// A finished log block leaves the page cache (reads of it are direct); advisory only.
    pub(crate) fn drop_cached(&self, offset: u64, len: u64) {
        if self.direct_reads() {
            drop_cached_range(&self.file, offset, len);
        }
    }

    pub(crate) fn write_at(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.file.write_all_at(data, offset)?;
        self.counters.bytes_written.fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    pub(crate) fn sync_data(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }

    pub(crate) fn slot_generation(&self, slot: u32) -> u64 {
        self.slot_generations[slot as usize].load(Ordering::SeqCst)
    }

    /// Byte offset on the device of data unit `unit` of `slot`.
    pub(crate) fn unit_offset(&self, slot: u32, unit: u32) -> u64 {
        self.slot_offset(slot) + u64::from(self.geometry.unit_offset(unit))
    }

    /// Marks a slot as being reused; readers that read it under the old generation discard
    /// what they read. Returns the new generation.
    pub(crate) fn bump_slot_generation(&self, slot: u32) -> u64 {
        self.slot_generations[slot as usize].fetch_add(1, Ordering::SeqCst) + 1
    }

    pub(crate) fn state(&self) -> DeviceState {
        self.status.lock().state
    }

    /// Serves reads (entries of a device being rebuilt are already valid).
    pub(crate) fn readable(&self) -> bool {
        self.state() != DeviceState::Faulted && !self.is_removed()
    }

    pub(crate) fn writable(&self) -> bool {
        self.state() == DeviceState::Online && !self.is_removed()
    }

    /// Rebuilding -> Online; a device faulted meanwhile stays faulted.
    pub(crate) fn finish_rebuild(&self) {
        let mut status = self.status.lock();
        if status.state == DeviceState::Rebuilding {
            status.state = DeviceState::Online;
        }
    }

    /// Takes the device out of service. Returns true if this call faulted it.
    pub(crate) fn fault(&self, reason: String) -> bool {
        let mut status = self.status.lock();
        if status.state == DeviceState::Faulted {
            return false;
        }
        tracing::warn!(path = %self.path.display(), %reason, "cache device faulted");
        status.state = DeviceState::Faulted;
        status.fault_reason = Some(reason);
        true
    }

    pub(crate) fn mark_removed(&self) {
        self.removed.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Ordering::SeqCst)
    }

    /// Checks that the path still names the file we opened, at its full size. An unlinked
    /// file keeps working through our handle, so only this check notices it vanished.
    pub(crate) fn check_identity(&self) -> Result<(), String> {
        let meta =
            std::fs::metadata(&self.path).map_err(|e| format!("device path unusable: {e}"))?;
        let found = FileIdentity { dev: meta.dev(), ino: meta.ino() };
        if found != self.identity {
            return Err("device path now names a different file".into());
        }
        let ring_end = self.slot_offset(self.slot_count());
        if self.is_regular_file && meta.len() < ring_end {
            return Err(format!(
                "device truncated to {} bytes (ring ends at {ring_end})",
                meta.len()
            ));
        }
        Ok(())
    }

    pub(crate) fn stats(&self) -> DeviceStats {
        let index = self.index.read();
        let status = self.status.lock();
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DeviceStats {
            id: self.id,
            path: self.path.clone(),
            device_guid: self.label.device_guid,
            state: status.state,
            fault_reason: status.fault_reason.clone(),
            entries: index.len(),
            size_bytes: index.size_bytes(),
            index_bytes: index.memory_bytes() + self.slot_generations.len() as u64 * 8,
            index_entry_bits: index.entry_bits(),
            index_full_drops: index.full_drops(),
            capacity_bytes: self.capacity_bytes,
            direct_reads: self.direct_reads(),
            log_block_bytes: self.label.log_block_bytes,
            slot_count: self.label.slot_count,
            bytes_written: load(&self.counters.bytes_written),
            bytes_read: load(&self.counters.bytes_read),
            log_blocks_written: load(&self.counters.log_blocks_written),
            io_errors: load(&self.counters.io_errors),
            checksum_errors: load(&self.counters.checksum_errors),
            rebuild: self.rebuild.snapshot(u64::from(self.label.slot_count)),
        }
    }
}
