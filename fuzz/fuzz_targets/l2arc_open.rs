//! Opening a whole cache device and rebuilding its index (`L2Arc::open`: both labels, then the
//! rebuild thread's walk of every log block, l2arc/rebuild.rs), then reading every block back
//! (`L2Arc::get`, l2arc/reader.rs). A 640 KiB device is formatted and written by the real L2ARC
//! once; each input is a list of patches to its image, as a torn write, rot or a stale device
//! would present it (format: `fardisk_fuzz::patches`).
//! Whatever the damage: no panic, a rebuild that ends, and every block read back is exactly the
//! one written under that key (anything else must be a miss). The undamaged image gives every
//! block back.
#![no_main]

use bytes::Bytes;
use fardisk_arc::{BlockKey, EvictionFeed, FeedItem, L2Arc, L2ArcConfig, ManualClock};
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

const POOL_GUID: u128 = 0xf022_0000_0000_0000_0000_0000_0000_0002;
const DEVICE_BYTES: u64 = 640 << 10;
/// Rebuilding a damaged 640 KiB device takes microseconds; this long is a hang.
const REBUILD_WAIT_MS: u64 = 20_000;

struct Base {
    dir: PathBuf,
    image: Vec<u8>,
    blocks: Vec<(BlockKey, Bytes, u64)>,
}

fn config() -> L2ArcConfig {
    L2ArcConfig {
        log_block_bytes: 16 << 10,
        write_max_bytes_per_s: 1 << 30,
        flush_interval_ms: 1,
        health_check_interval_ms: 1 << 30,
    }
}

fn block(i: u64) -> Bytes {
    let len = 512 + (i as usize * 977) % 5000;
    Bytes::from(
        (0..len).map(|j| (i as usize).wrapping_mul(61).wrapping_add(j) as u8).collect::<Vec<u8>>(),
    )
}

/// Formats the device, writes 48 blocks through the writer in several log blocks (some spill
/// past one block), syncs, and keeps the image.
fn base() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(|| {
        // tmpfs when there is one: it refuses O_DIRECT, so the device reads come from memory
        // instead of forcing each freshly written image out to disk (12 times the executions).
        let tmp = [std::path::Path::new("/dev/shm")]
            .into_iter()
            .find(|d| d.is_dir())
            .map(|d| d.to_path_buf())
            .unwrap_or_else(std::env::temp_dir);
        remove_dead_runs(&tmp);
        let dir = tmp.join(format!("{DIR_PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("base.img");
        let _ = std::fs::remove_file(&path);
        let clock = Arc::new(ManualClock::default());
        let l2 = L2Arc::new(config(), POOL_GUID, clock.clone(), 3).expect("L2ARC");
        l2.add_device(&path, Some(DEVICE_BYTES)).expect("format the cache device");
        let feed = EvictionFeed::new(1024, 64 << 20);
        let mut blocks = Vec::new();
        for i in 0..48u64 {
            let key = BlockKey::new(1000 + i / 8, (i % 8) as u32 * 65536);
            let data = block(i);
            blocks.push((key, data.clone(), xxhash_rust::xxh3::xxh3_64(&data)));
            feed.push(FeedItem::new(key, data));
            if i % 8 == 7 {
                clock.advance_ms(10);
                l2.write_tick(&feed);
            }
        }
        clock.advance_ms(10);
        l2.write_tick(&feed);
        l2.sync();
        drop(l2);
        let image = std::fs::read(&path).expect("read the image");
        Base { dir, image, blocks }
    })
}

const DIR_PREFIX: &str = "fardisk-fuzz-l2arc-open-";

/// libFuzzer ends the process without unwinding, so a run cannot remove its own directory: the
/// next run removes those of processes that are gone.
fn remove_dead_runs(tmp: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(DIR_PREFIX).and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn seeds() -> Vec<Vec<u8>> {
    let patch = |offset: u32, bytes: &[u8]| fardisk_fuzz::patches::encode(0, offset, bytes);
    vec![
        Vec::new(),
        patch(0, &[0u8; 255]), // the first label
        [patch(0, &[0xff; 255]), patch(4096, &[0xff; 255])].concat(), // both labels, if there
        patch(64 << 10, &[0x5a; 64]), // inside the ring
        patch((64 << 10) + (16 << 10), &[0u8; 255]), // a block header, perhaps
    ]
}

fuzz_target!(init: fardisk_fuzz::write_seeds("l2arc_open", seeds), |data: &[u8]| {
    let base = base();
    let mut images = [base.image.clone()];
    fardisk_fuzz::patches::apply(&mut images, data);
    let [image] = images;
    let path = base.dir.join("device.img");
    std::fs::write(&path, &image).expect("write the patched image");
    let clock = Arc::new(ManualClock::starting_at(std::time::Duration::from_millis(1_000_000)));
    let (l2, failed) = L2Arc::open(config(), POOL_GUID, clock, 4, &[path]).expect("a valid config");
    if !failed.is_empty() {
        assert!(!data.is_empty(), "the undamaged device does not open: {:?}", failed[0].1);
        return;
    }
    let started = std::time::Instant::now();
    while !l2.stats().rebuild.done {
        assert!(started.elapsed().as_millis() < u128::from(REBUILD_WAIT_MS), "the index rebuild did not end in {REBUILD_WAIT_MS} ms");
        std::thread::yield_now();
    }
    let mut hits = 0;
    for (key, want, checksum) in &base.blocks {
        if let Some(got) = l2.get(key, want.len() as u32, *checksum) {
            assert_eq!(&got, want, "{key:?} read back different bytes");
            hits += 1;
        }
    }
    assert!(l2.get(&BlockKey::new(9999, 0), 4096, 0).is_none(), "a key never written was found");
    if data.is_empty() {
        assert_eq!(hits, base.blocks.len(), "the undamaged device gives every block back");
    }
});
