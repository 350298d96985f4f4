//! L2ARC cache-device labels (arc/src/l2arc/label.rs): the decoder of one copy, the pick of the
//! first valid of two copies (of this format version, or of this and the previous one), and
//! `cache_label_pool_guid` (what destroy reads: any version) never panic on arbitrary bytes,
//! and agree with each other; a decoded label re-encodes and decodes to the
//! same label. Input: the device's first bytes (two 4 KiB sectors when long enough). Also tried
//! with both copies' checksums recomputed.
#![no_main]

use fardisk_arc::fuzz_api::{cache_label_pool_guid, reseal_label, L2Label};
use libfuzzer_sys::fuzz_target;

const SECTOR_BYTES: usize = 4096;

fn check(buf: &[u8]) {
    if let Ok(label) = L2Label::decode(buf) {
        assert_eq!(L2Label::decode(&label.encode()), Ok(label));
    }
    let (first, second) = buf.split_at(buf.len().min(SECTOR_BYTES));
    let either = L2Label::decode_either(first, second);
    if let Ok(label) = either {
        assert_eq!(L2Label::decode(&label.encode()), Ok(label));
    }
    if buf.len() >= 2 * SECTOR_BYTES {
        let (first, second) = (&buf[..SECTOR_BYTES], &buf[SECTOR_BYTES..2 * SECTOR_BYTES]);
        let any_version = L2Label::decode_either_any_version(first, second);
        assert_eq!(cache_label_pool_guid(buf), any_version.as_ref().ok().map(|(l, _)| l.pool_guid()));
        if let Ok(label) = L2Label::decode(first) {
            assert_eq!(any_version.map(|(l, _)| l), Ok(label), "a current first copy wins both ways");
        }
    }
}

fuzz_target!(init: fardisk_fuzz::write_seeds("l2arc_label", fardisk_fuzz::seeds::l2_labels), |data: &[u8]| {
    check(data);
    let mut resealed = data.to_vec();
    reseal_label(&mut resealed);
    if resealed.len() > SECTOR_BYTES {
        reseal_label(&mut resealed[SECTOR_BYTES..]);
    }
    check(&resealed);
});
