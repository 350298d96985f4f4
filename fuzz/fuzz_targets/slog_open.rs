//! Opening a whole mirrored log and replaying it (`IntentLog::open` and `replay`: labels, both
//! head slots, the scan of every block of the ring, the merge of two legs, the resync of the
//! weaker one, the cut at the end of the replayable prefix). Two 208 KiB legs are formatted and
//! written by the real log once; each input is a list of patches to their images, as a damaged
//! or stale device would present them (format: `fardisk_fuzz::patches`).
//! Whatever the damage: no panic, no hang, and every record replayed is the very record that was
//! committed at that sequence number, in increasing order. An unpatched pair replays every
//! record not yet released.
#![no_main]

use bytes::Bytes;
use fardisk_slog::{
    CrashDevice, FormatOptions, IntentLog, LogRecord, MemProvider, MissingPolicy, OpenOptions,
    RecordKind, VdevConfig, VdevSpec,
};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

const POOL: &str = "fuzz";
const POOL_GUID: u128 = 0xf022_0000_0000_0000_0000_0000_0000_0001;
/// Labels and head slots (16 KiB), then a ring of 192 KiB: room for what is written below
/// plus released blocks the scan must step over.
const LEG_BYTES: u64 = (16 + 192) << 10;
/// Txgs 1 and 2 are released (published) before the images are taken.
const RELEASED_TXG: u64 = 2;

struct Base {
    legs: [PathBuf; 2],
    images: [Vec<u8>; 2],
    config: VdevConfig,
    /// Every record committed, by the sequence number its receipt gave.
    committed: BTreeMap<u64, LogRecord>,
}

fn record(txg: u64, id: u64) -> LogRecord {
    let len = (id as usize * 733) % 3000;
    if len == 0 {
        return LogRecord {
            txg,
            volume_id: 1,
            kind: RecordKind::Trim,
            offset_bytes: id << 12,
            length_bytes: 8192,
            data: Bytes::new(),
        };
    }
    let data: Vec<u8> =
        (0..len).map(|i| (id as usize).wrapping_mul(131).wrapping_add(i) as u8).collect();
    LogRecord {
        txg,
        volume_id: (id % 3) as u32,
        kind: RecordKind::Write,
        offset_bytes: id << 12,
        length_bytes: len as u32,
        data: Bytes::from(data),
    }
}

/// Formats two legs, commits 5 txgs of records (some batches several records long), releases
/// the first two txgs and closes the log; the images are what the devices then hold.
fn base() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(|| {
        let provider = MemProvider::new();
        let legs = [PathBuf::from("/fuzz/log-0"), PathBuf::from("/fuzz/log-1")];
        for leg in &legs {
            provider.add(leg.clone(), LEG_BYTES);
        }
        let spec = VdevSpec::Mirror(legs.to_vec());
        let config = IntentLog::format(
            POOL,
            POOL_GUID,
            &spec,
            &FormatOptions::new(Arc::new(provider.clone()), 7),
        )
        .expect("format the legs");
        let log = IntentLog::open(
            POOL,
            POOL_GUID,
            std::slice::from_ref(&config),
            &OpenOptions::new(Arc::new(provider.clone())),
        )
        .expect("open the new log");
        let mut committed = BTreeMap::new();
        let mut id = 1u64;
        for txg in 1..=5u64 {
            for batch in 0..3u64 {
                let records: Vec<LogRecord> = (0..1 + (txg + batch) % 3)
                    .map(|_| {
                        id += 1;
                        record(txg, id)
                    })
                    .collect();
                let receipt = fardisk_fuzz::block_on(log.commit(records.clone())).expect("commit");
                for (i, r) in records.into_iter().enumerate() {
                    committed.insert(receipt.first_seq + i as u64, r);
                }
            }
            if txg == RELEASED_TXG {
                log.release_through_txg(RELEASED_TXG);
            }
        }
        // Closing joins the writer thread, which writes the heads the release asked for.
        drop(log);
        let images = legs.clone().map(|leg| provider.device(&leg).expect("leg").current_image());
        Base { legs, images, config, committed }
    })
}

fn seeds() -> Vec<Vec<u8>> {
    use fardisk_fuzz::patches::encode as patch;
    vec![
        Vec::new(),
        patch(0, 8192, &[0u8; 64]), // head slot 0 of leg 0 zeroed
        [patch(0, 8192, &[0xff; 200]), patch(0, 12288, &[0xff; 200])].concat(), // both heads
        patch(1, 0, &[0u8; 255]),   // leg 1's first label
        patch(1, 16384 + 4096 * 3 + 100, &[0x5a; 40]), // a block of leg 1's ring
        [patch(0, 16384 + 4096 * 2, &[1; 255]), patch(1, 16384 + 4096 * 2, &[2; 255])].concat(), // the same block on both
    ]
}

fuzz_target!(init: fardisk_fuzz::write_seeds("slog_open", seeds), |data: &[u8]| {
    let base = base();
    let mut images = base.images.clone();
    fardisk_fuzz::patches::apply(&mut images, data);
    let provider = MemProvider::new();
    for (leg, image) in base.legs.iter().zip(images) {
        provider.insert(CrashDevice::from_image(leg.clone(), image));
    }
    let mut opts = OpenOptions::new(Arc::new(provider));
    opts.missing = MissingPolicy::Degrade;
    let log = match IntentLog::open(POOL, POOL_GUID, std::slice::from_ref(&base.config), &opts) {
        Ok(log) => log,
        Err(e) => {
            assert!(!data.is_empty(), "the undamaged log does not open: {e}");
            return;
        }
    };
    let replay = match log.replay(0) {
        Ok(replay) => replay,
        Err(e) => {
            assert!(!data.is_empty(), "the undamaged log does not replay: {e}");
            return;
        }
    };
    let mut last_seq = None;
    for r in &replay.records {
        assert_eq!(base.committed.get(&r.seq), Some(&r.record), "seq {} replayed a record that was not committed there", r.seq);
        assert!(last_seq.is_none_or(|s| r.seq > s), "sequence numbers not increasing at {}", r.seq);
        last_seq = Some(r.seq);
    }
    if data.is_empty() {
        let live: Vec<u64> = base.committed.iter().filter(|(_, r)| r.txg > RELEASED_TXG).map(|(s, _)| *s).collect();
        let got: Vec<u64> = replay.records.iter().map(|r| r.seq).collect();
        assert_eq!(got, live, "the undamaged log replays every record not released");
    }
});
