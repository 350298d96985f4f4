//! The simulation's local devices: a mirrored intent log on crash-able in-memory devices (a power
//! cut drops, keeps or tears every unflushed write; a leg can fail its I/O, vanish or rot), and an
//! L2ARC cache device on a real file that a crash can leave torn, rotten, short or gone.

use fardisk_arc::{L2Arc, L2ArcConfig};
use fardisk_engine::arc_cache::ArcBlockCache;
use fardisk_engine::clock::ManualClock;
use fardisk_engine::rng::Rng;
use fardisk_slog::{CrashDevice, MemProvider};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const LOG_LEG_BYTES: u64 = 16 << 20;
pub const CACHE_DEVICE_BYTES: u64 = 24 << 20;
/// Small, so the working set spills from RAM to the cache device and back.
pub const ARC_BYTES: u64 = 1 << 20;

/// What can happen to one log leg while the pool runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegFault {
    /// Writes fail: the leg is FAULTED and the mirror carries on DEGRADED.
    FailWrites,
    /// Flushes fail (a device that lies about its cache).
    FailFlushes,
    /// Unplugged: absent at the next import too.
    Vanish,
    /// A range of the leg is overwritten with garbage (media rot or a stray write).
    Rot,
    /// Stops answering its flushes mid-commit, and is given up on (hung_leg.rs).
    Hang,
}

pub struct LogDevices {
    pub provider: MemProvider,
    pub legs: Vec<PathBuf>,
    /// Replacement legs get new names, as an operator would plug in a new device.
    next_leg: u32,
}

impl LogDevices {
    pub fn new() -> LogDevices {
        let legs = vec![PathBuf::from("/sim/log-0"), PathBuf::from("/sim/log-1")];
        let provider = MemProvider::new();
        for leg in &legs {
            provider.add(leg.clone(), LOG_LEG_BYTES);
        }
        LogDevices { provider, legs, next_leg: 2 }
    }

    fn device(&self, leg: usize) -> Option<CrashDevice> {
        self.provider.device(&self.legs[leg])
    }

    /// A power cut now: every device keeps what its last flush made durable, plus whatever of
    /// the writes since then the seed lets through, whole or torn.
    pub fn power_cut(&mut self, seed: u64) {
        let crashed = self.provider.crash(seed);
        // The dead process's flushes held at the gate may finish now: on devices nobody opens.
        for leg in 0..self.legs.len() {
            if let Some(d) = self.device(leg) {
                d.release_flushes();
            }
        }
        self.provider = crashed;
    }

    /// Holds flushes on every leg, so a commit in flight can be cut between write and flush.
    pub fn hold_flushes(&self) -> Vec<CrashDevice> {
        (0..self.legs.len()).filter_map(|l| self.device(l)).inspect(|d| d.hold_flushes()).collect()
    }

    /// Holds one leg's flushes (a hung device); the caller lets them go.
    pub fn hang(&self, leg: usize) -> Option<CrashDevice> {
        self.device(leg).inspect(|d| d.hold_flushes())
    }

    pub fn inject(&self, leg: usize, fault: LegFault, rng: &Rng) {
        let Some(d) = self.device(leg) else { return };
        match fault {
            LegFault::FailWrites => d.set_fail_writes(true),
            LegFault::FailFlushes => d.set_fail_flushes(true),
            LegFault::Vanish => d.vanish(),
            LegFault::Rot => {
                // Anywhere past the labels: records, heads, free space.
                let len = 512 * (1 + rng.below(64));
                let offset = (64 << 10) + rng.below(LOG_LEG_BYTES - (64 << 10) - len) / 512 * 512;
                d.corrupt(offset, len);
            }
            // Needs a commit under way and the clock moved: the step does it (hung_leg.rs).
            LegFault::Hang => unreachable!("a hang is injected by World::hang_leg"),
        }
    }

    /// A new, empty device for replacing `leg`; returns (old path, new path).
    pub fn new_leg_for(&mut self, leg: usize) -> (String, String) {
        let new = PathBuf::from(format!("/sim/log-{}", self.next_leg));
        self.next_leg += 1;
        self.provider.add(new.clone(), LOG_LEG_BYTES);
        let old = std::mem::replace(&mut self.legs[leg], new.clone());
        (old.display().to_string(), new.display().to_string())
    }

    pub fn engine_devices(&self) -> fardisk_engine::pool::LogDevices {
        fardisk_engine::pool::LogDevices(Arc::new(self.provider.clone()))
    }
}

/// What a crash did to the cache device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheDamage {
    None,
    /// Ranges zeroed: writes the device never made durable.
    Torn,
    /// Bytes flipped in place.
    Rot,
    /// Cut short.
    Truncated,
    /// Gone: the pool imports without it.
    Deleted,
}

pub fn l2_config() -> L2ArcConfig {
    L2ArcConfig { log_block_bytes: 128 << 10, flush_interval_ms: 20, ..L2ArcConfig::default() }
}

/// The ARC with an L2ARC over `path` (formatted when absent or unusable, as the daemon does),
/// with no writer thread, on the simulation's clock: the simulation feeds it at chosen steps, and waits
/// for the index rebuild, so the device holds the same blocks on every replay.
pub fn open_cache(
    path: &Path,
    pool_guid: u128,
    seed: u64,
    clock: Arc<ManualClock>,
) -> (Arc<ArcBlockCache>, bool) {
    let opened = if path.exists() {
        L2Arc::open(l2_config(), pool_guid, clock.clone(), seed, &[path.to_path_buf()])
            .ok()
            .filter(|(_, failed)| failed.is_empty())
            .map(|(l2, _)| l2)
    } else {
        None
    };
    let reused = opened.is_some();
    let l2 = opened.unwrap_or_else(|| {
        let _ = std::fs::remove_file(path);
        let l2 = L2Arc::new(l2_config(), pool_guid, clock, seed).expect("L2ARC");
        l2.add_device(path, Some(CACHE_DEVICE_BYTES)).expect("cache device");
        l2
    });
    for _ in 0..10_000 {
        if l2.stats().rebuild.done {
            break;
        }
        // The rebuild runs on the L2ARC's own OS thread: wait for it in real time (bounded).
        #[allow(clippy::disallowed_methods)]
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(l2.stats().rebuild.done, "the cache index rebuild did not finish in 10 s");
    (Arc::new(ArcBlockCache::with_manual_l2(ARC_BYTES, l2, l2_config(), seed)), reused)
}

/// Damages the cache file as a crash (or a dying SSD) might.
pub fn damage_cache(path: &Path, rng: &Rng) -> CacheDamage {
    let Ok(mut bytes) = std::fs::read(path) else { return CacheDamage::None };
    let len = bytes.len() as u64;
    let damage = match rng.below(5) {
        0 => CacheDamage::None,
        1 => CacheDamage::Torn,
        2 => CacheDamage::Rot,
        3 => CacheDamage::Truncated,
        _ => CacheDamage::Deleted,
    };
    match damage {
        CacheDamage::None => return damage,
        CacheDamage::Deleted => {
            std::fs::remove_file(path).expect("delete cache file");
            return damage;
        }
        CacheDamage::Truncated => bytes.truncate(rng.below(len) as usize),
        CacheDamage::Torn => {
            for _ in 0..1 + rng.below(8) {
                let start = rng.below(len / 4096) * 4096;
                let n = (4096 * (1 + rng.below(32))).min(len - start);
                bytes[start as usize..(start + n) as usize].fill(0);
            }
        }
        CacheDamage::Rot => {
            for _ in 0..1 + rng.below(64) {
                let at = rng.below(len) as usize;
                bytes[at] ^= 1 << rng.below(8);
            }
        }
    }
    std::fs::write(path, bytes).expect("rewrite cache file");
    damage
}
