//! An in-memory sparse [`BlockDevice`] for tests and demos: 4 KiB pages in a BTreeMap,
//! an absent page is a hole that reads as zeroes. Counters record every call so tests
//! can prove the server really forwarded FLUSH, FUA, TRIM, CACHE and friends.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::device::{BlockDevice, DeviceError, Extent};

/// Bytes per page; also the granularity at which holes are tracked.
pub const PAGE_BYTES: u64 = 4096;
/// Most extents one `block_status` call returns (the server asks again for the rest).
const EXTENTS_PER_CALL_MAX: usize = 1024;

type Page = Box<[u8]>;

/// How many times each operation reached the device.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MemDeviceStats {
    pub reads: u64,
    pub writes: u64,
    pub fua_writes: u64,
    pub flushes: u64,
    pub trims: u64,
    pub write_zeroes: u64,
    pub write_zeroes_no_hole: u64,
    pub caches: u64,
    /// The longest range one `cache` call was asked for.
    pub cache_bytes_max: u64,
    pub block_status: u64,
}

#[derive(Default)]
struct Counters {
    reads: AtomicU64,
    writes: AtomicU64,
    fua_writes: AtomicU64,
    flushes: AtomicU64,
    trims: AtomicU64,
    write_zeroes: AtomicU64,
    write_zeroes_no_hole: AtomicU64,
    caches: AtomicU64,
    cache_bytes_max: AtomicU64,
    block_status: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

pub struct MemDevice {
    size_bytes: u64,
    read_only: bool,
    fast_zero: AtomicBool,
    page_limit: u64,
    pages: Mutex<BTreeMap<u64, Page>>,
    counters: Counters,
}

impl MemDevice {
    /// A writable device of `size_bytes`, all hole, that may allocate every page.
    pub fn new(size_bytes: u64) -> MemDevice {
        MemDevice {
            size_bytes,
            read_only: false,
            fast_zero: AtomicBool::new(true),
            page_limit: size_bytes.div_ceil(PAGE_BYTES),
            pages: Mutex::new(BTreeMap::new()),
            counters: Counters::default(),
        }
    }

    pub fn with_read_only(mut self, read_only: bool) -> MemDevice {
        self.read_only = read_only;
        self
    }

    /// Caps allocated pages; writes needing more fail with NoSpace (models a full pool).
    pub fn with_page_limit(mut self, page_limit: u64) -> MemDevice {
        self.page_limit = page_limit;
        self
    }

    pub fn set_fast_zero(&self, fast_zero: bool) {
        self.fast_zero.store(fast_zero, Ordering::Relaxed);
    }

    pub fn allocated_pages(&self) -> u64 {
        self.pages.lock().len() as u64
    }

    pub fn stats(&self) -> MemDeviceStats {
        let c = &self.counters;
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        MemDeviceStats {
            reads: get(&c.reads),
            writes: get(&c.writes),
            fua_writes: get(&c.fua_writes),
            flushes: get(&c.flushes),
            trims: get(&c.trims),
            write_zeroes: get(&c.write_zeroes),
            write_zeroes_no_hole: get(&c.write_zeroes_no_hole),
            caches: get(&c.caches),
            cache_bytes_max: get(&c.cache_bytes_max),
            block_status: get(&c.block_status),
        }
    }

    /// Fills the device from `data` at `offset` (test setup, bypasses read-only).
    pub fn fill(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.check_range(offset, data.len() as u64)?;
        self.write_pages(offset, data)
    }

    /// Copies out `length_bytes` at `offset` (test inspection; holes read as zeroes).
    pub fn contents(&self, offset: u64, length_bytes: u64) -> Result<Vec<u8>, DeviceError> {
        self.check_range(offset, length_bytes)?;
        let mut out = vec![0u8; length_bytes as usize];
        let pages = self.pages.lock();
        Self::for_each_page(offset, length_bytes, |index, in_page, bytes, in_out| {
            if let Some(page) = pages.get(&index) {
                out[in_out..in_out + bytes].copy_from_slice(&page[in_page..in_page + bytes]);
            }
        });
        Ok(out)
    }

    fn check_range(&self, offset: u64, length_bytes: u64) -> Result<(), DeviceError> {
        match offset.checked_add(length_bytes) {
            Some(end) if end <= self.size_bytes => Ok(()),
            _ => Err(DeviceError::InvalidArgument(format!(
                "range {offset}+{length_bytes} beyond device size {}",
                self.size_bytes
            ))),
        }
    }

    fn check_writable(&self) -> Result<(), DeviceError> {
        if self.read_only {
            return Err(DeviceError::ReadOnly);
        }
        Ok(())
    }

    /// Calls `visit(page_index, byte range within page, byte range within request)` for
    /// each page the range touches.
    fn for_each_page(
        offset: u64,
        length_bytes: u64,
        mut visit: impl FnMut(u64, usize, usize, usize),
    ) {
        let end = offset + length_bytes;
        let mut position = offset;
        while position < end {
            let page_index = position / PAGE_BYTES;
            let in_page = (position % PAGE_BYTES) as usize;
            let chunk_bytes = (PAGE_BYTES - in_page as u64).min(end - position) as usize;
            visit(page_index, in_page, chunk_bytes, (position - offset) as usize);
            position += chunk_bytes as u64;
        }
    }

    fn new_pages_needed(pages: &BTreeMap<u64, Page>, offset: u64, length_bytes: u64) -> u64 {
        let first = offset / PAGE_BYTES;
        let last = (offset + length_bytes).div_ceil(PAGE_BYTES);
        let present = pages.range(first..last).count() as u64;
        (last - first) - present
    }

    fn reserve(
        &self,
        pages: &BTreeMap<u64, Page>,
        offset: u64,
        length_bytes: u64,
    ) -> Result<(), DeviceError> {
        let needed = Self::new_pages_needed(pages, offset, length_bytes);
        if pages.len() as u64 + needed > self.page_limit {
            return Err(DeviceError::NoSpace(format!(
                "{needed} more pages needed, limit {}",
                self.page_limit
            )));
        }
        Ok(())
    }

    fn write_pages(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        let mut pages = self.pages.lock();
        // Check space for the whole write first so a failed write changes nothing.
        self.reserve(&pages, offset, data.len() as u64)?;
        Self::for_each_page(offset, data.len() as u64, |index, in_page, bytes, in_data| {
            let page = pages.entry(index).or_insert_with(new_page);
            page[in_page..in_page + bytes].copy_from_slice(&data[in_data..in_data + bytes]);
        });
        Ok(())
    }

    /// Removes whole pages in the range and zeroes the partial ones that exist.
    fn punch_hole(&self, offset: u64, length_bytes: u64) {
        let mut pages = self.pages.lock();
        Self::for_each_page(offset, length_bytes, |index, in_page, bytes, _| {
            if bytes as u64 == PAGE_BYTES {
                pages.remove(&index);
            } else if let Some(page) = pages.get_mut(&index) {
                page[in_page..in_page + bytes].fill(0);
            }
        });
    }

    fn zero_allocated(&self, offset: u64, length_bytes: u64) -> Result<(), DeviceError> {
        let mut pages = self.pages.lock();
        self.reserve(&pages, offset, length_bytes)?;
        Self::for_each_page(offset, length_bytes, |index, in_page, bytes, _| {
            let page = pages.entry(index).or_insert_with(new_page);
            page[in_page..in_page + bytes].fill(0);
        });
        Ok(())
    }

    /// The extent starting at `position` (page aligned or not), ending at `end` at most.
    fn extent_at(pages: &BTreeMap<u64, Page>, position: u64, end: u64) -> Extent {
        let first = position / PAGE_BYTES;
        let next_allocated = pages.range(first..).next().map(|(index, page)| (*index, page));
        match next_allocated {
            Some((index, page)) if index == first => {
                let zero = is_zero(page);
                let mut run_end = (first + 1) * PAGE_BYTES;
                for (index, page) in pages.range(first + 1..) {
                    if run_end >= end || *index * PAGE_BYTES != run_end || is_zero(page) != zero {
                        break;
                    }
                    run_end += PAGE_BYTES;
                }
                let length_bytes = run_end.min(end) - position;
                Extent { length_bytes, hole: false, zero }
            }
            other => {
                let hole_end = other.map_or(end, |(index, _)| (index * PAGE_BYTES).min(end));
                Extent { length_bytes: hole_end - position, hole: true, zero: true }
            }
        }
    }
}

fn new_page() -> Page {
    vec![0u8; PAGE_BYTES as usize].into_boxed_slice()
}

fn is_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|byte| *byte == 0)
}

#[async_trait::async_trait]
impl BlockDevice for MemDevice {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn fast_zero(&self) -> bool {
        self.fast_zero.load(Ordering::Relaxed)
    }

    async fn read(&self, offset: u64, length_bytes: u32) -> Result<Bytes, DeviceError> {
        bump(&self.counters.reads);
        Ok(Bytes::from(self.contents(offset, length_bytes as u64)?))
    }

    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), DeviceError> {
        bump(&self.counters.writes);
        if fua {
            bump(&self.counters.fua_writes);
        }
        self.check_writable()?;
        self.check_range(offset, data.len() as u64)?;
        self.write_pages(offset, &data)
    }

    async fn flush(&self) -> Result<(), DeviceError> {
        // Memory is as durable as this device gets; the count is what tests observe.
        bump(&self.counters.flushes);
        Ok(())
    }

    async fn trim(&self, offset: u64, length_bytes: u32) -> Result<(), DeviceError> {
        bump(&self.counters.trims);
        self.check_writable()?;
        self.check_range(offset, length_bytes as u64)?;
        self.punch_hole(offset, length_bytes as u64);
        Ok(())
    }

    async fn write_zeroes(
        &self,
        offset: u64,
        length_bytes: u32,
        may_trim: bool,
        fua: bool,
    ) -> Result<(), DeviceError> {
        bump(&self.counters.write_zeroes);
        if !may_trim {
            bump(&self.counters.write_zeroes_no_hole);
        }
        if fua {
            bump(&self.counters.fua_writes);
        }
        self.check_writable()?;
        self.check_range(offset, length_bytes as u64)?;
        if may_trim {
            self.punch_hole(offset, length_bytes as u64);
            return Ok(());
        }
        self.zero_allocated(offset, length_bytes as u64)
    }

    async fn cache(&self, offset: u64, length_bytes: u32) -> Result<(), DeviceError> {
        bump(&self.counters.caches);
        self.counters.cache_bytes_max.fetch_max(u64::from(length_bytes), Ordering::Relaxed);
        self.check_range(offset, length_bytes as u64)
    }

    async fn block_status(
        &self,
        offset: u64,
        length_bytes: u32,
    ) -> Result<Vec<Extent>, DeviceError> {
        bump(&self.counters.block_status);
        self.check_range(offset, length_bytes as u64)?;
        let end = offset + length_bytes as u64;
        let pages = self.pages.lock();
        let mut extents: Vec<Extent> = Vec::new();
        let mut position = offset;
        while position < end && extents.len() < EXTENTS_PER_CALL_MAX {
            let extent = Self::extent_at(&pages, position, end);
            position += extent.length_bytes;
            match extents.last_mut() {
                Some(last) if last.hole == extent.hole && last.zero == extent.zero => {
                    last.length_bytes += extent.length_bytes;
                }
                _ => extents.push(extent),
            }
        }
        Ok(extents)
    }
}
