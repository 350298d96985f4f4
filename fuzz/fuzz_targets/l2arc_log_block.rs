//! L2ARC log blocks (arc/src/l2arc/log_block.rs), read back slot by slot when the cache index
//! is rebuilt after a restart: the header check and the metadata decoder never panic on
//! arbitrary bytes, read as rebuild reads (the header first, then as much metadata as it says);
//! every accepted entry's data lies inside the block after the metadata area, on a 4 KiB unit,
//! without overlapping another entry (reads trust them); accepted metadata re-encodes and decodes
//! to the same value. Also tried with the metadata checksum recomputed.
#![no_main]

use fardisk_arc::fuzz_api::{reseal_log_block, L2LogBlock, L2_LOG_HEADER_BYTES};
use fardisk_fuzz::seeds::l2_place;
use libfuzzer_sys::fuzz_target;

fn check(block: &[u8]) {
    let place = l2_place();
    let header = &block[..block.len().min(L2_LOG_HEADER_BYTES)];
    let Ok(meta_len) = L2LogBlock::meta_len(header, &place) else { return };
    assert!(meta_len >= L2_LOG_HEADER_BYTES && meta_len <= place.block_bytes() as usize);
    let Some(meta) = block.get(..meta_len) else { return };
    let Ok(decoded) = L2LogBlock::decode(meta, &place) else { return };
    let meta_area = L2LogBlock::meta_area_bytes(&place);
    assert!(meta_len <= meta_area as usize);
    let mut ranges = decoded.data_ranges(&place);
    ranges.sort_unstable();
    for (offset, len) in &ranges {
        assert!(*offset >= meta_area && offset % 4096 == 0, "data starts on a unit after the table");
        assert!(u64::from(*offset) + u64::from(*len) <= u64::from(place.block_bytes()));
    }
    for pair in ranges.windows(2) {
        assert!(pair[0].0 + pair[0].1.max(1) <= pair[1].0, "entries overlap: {pair:?}");
    }
    let again = decoded.encode(&place);
    assert_eq!(again.len(), meta_len);
    assert_eq!(L2LogBlock::decode(&again, &place), Ok(decoded));
}

fuzz_target!(init: fardisk_fuzz::write_seeds("l2arc_log_block", fardisk_fuzz::seeds::l2_log_blocks), |data: &[u8]| {
    check(data);
    let mut resealed = data.to_vec();
    reseal_log_block(&mut resealed);
    check(&resealed);
});
