//! L2ARC log blocks (arc/src/l2arc/log_block.rs), read back slot by slot when the cache index
//! is rebuilt after a restart: the header check and the metadata decoder never panic on
//! arbitrary bytes, read as rebuild reads (the header first, then as much metadata as it says);
//! every accepted entry's data range lies inside the block above the entry table (reads trust
//! them); accepted metadata re-encodes and decodes to the same value. Also tried with the
//! metadata checksum recomputed.
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
    assert!(decoded.data_low() as usize >= meta_len && decoded.data_low() <= place.block_bytes());
    for (offset, len) in decoded.data_ranges() {
        assert!(offset >= decoded.data_low());
        assert!(u64::from(offset) + u64::from(len) <= u64::from(place.block_bytes()));
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
