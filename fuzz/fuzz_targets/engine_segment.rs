//! Segment objects (engine/src/segment.rs): `parse_segment` never panics on arbitrary bytes, and
//! what it accepts is self-consistent (every entry names this segment and its txg, the footer
//! fits in the object). Each input is tried as is, and with the header seal and the footer
//! checksum recomputed so the trailer and footer-entry parsing behind them is fuzzed too.
//! The first input bytes also drive a `SegmentBuilder`, whose output must parse back to exactly
//! the entries it returned (the encoder/decoder round trip).
#![no_main]

use fardisk_engine::codec::checksum64;
use fardisk_engine::compress::Compression;
use fardisk_engine::segment::{
    parse_segment, BlockOwner, SegmentBuilder, FOOTER_ENTRY_BYTES, SEGMENT_HEADER_BYTES,
    SEGMENT_TRAILER_BYTES,
};
use fardisk_fuzz::seeds::{SEGMENT_ID, SEGMENT_POOL_GUID};
use libfuzzer_sys::fuzz_target;

fn check(bytes: &[u8]) {
    let Ok(index) = parse_segment(bytes, SEGMENT_POOL_GUID, SEGMENT_ID) else { return };
    assert_eq!(index.segment_id, SEGMENT_ID);
    // The footer and trailer lie inside the object. (Nothing stops the footer from overlapping
    // the header when both checksums match: harmless, the entries are then read from it.)
    let footer_bytes = index.entries.len() * FOOTER_ENTRY_BYTES + SEGMENT_TRAILER_BYTES;
    assert!(footer_bytes <= bytes.len());
    for e in &index.entries {
        assert_eq!(e.ptr.segment_id, SEGMENT_ID);
        assert_eq!(e.ptr.birth_txg, index.txg);
    }
}

/// Recomputes the header seal and, when the trailer's footer offset lies inside the object,
/// the footer checksum: what a writer with a bug (not a bit flip) would have produced.
fn reseal(bytes: &mut [u8]) {
    if bytes.len() < SEGMENT_HEADER_BYTES + SEGMENT_TRAILER_BYTES {
        return;
    }
    let sum = checksum64(&bytes[..SEGMENT_HEADER_BYTES - 8]);
    bytes[SEGMENT_HEADER_BYTES - 8..SEGMENT_HEADER_BYTES].copy_from_slice(&sum.to_le_bytes());
    let footer_end = bytes.len() - SEGMENT_TRAILER_BYTES;
    let footer_offset =
        u64::from_le_bytes(bytes[footer_end..footer_end + 8].try_into().expect("8 bytes"));
    if footer_offset <= footer_end as u64 {
        let sum = checksum64(&bytes[footer_offset as usize..footer_end + 16]);
        bytes[footer_end + 16..footer_end + 24].copy_from_slice(&sum.to_le_bytes());
    }
}

/// Builds a segment from up to 8 blocks described by the input: each block takes 3 bytes
/// (owner kind and compression, length, fill byte).
fn builder_round_trip(data: &[u8]) {
    let mut b = SegmentBuilder::new(SEGMENT_POOL_GUID, SEGMENT_ID, fardisk_fuzz::le_u64(data, 0));
    for (i, spec) in data.get(8..).unwrap_or_default().chunks_exact(3).take(8).enumerate() {
        let owner = if spec[0] & 1 == 0 {
            BlockOwner::Data { tree_id: spec[0] as u32, block: i as u64 }
        } else {
            BlockOwner::Page { tree_id: spec[0] as u32, level: spec[1] & 7, index: i as u64 }
        };
        let algo = if spec[0] & 2 == 0 { Compression::Off } else { Compression::Lz4 };
        b.add(owner, &vec![spec[2]; spec[1] as usize * 16], algo);
    }
    let (bytes, entries) = b.finish();
    let index =
        parse_segment(&bytes, SEGMENT_POOL_GUID, SEGMENT_ID).expect("a built segment parses");
    assert_eq!(index.entries, entries);
}

fuzz_target!(init: fardisk_fuzz::write_seeds("engine_segment", fardisk_fuzz::seeds::segments), |data: &[u8]| {
    check(data);
    let mut resealed = data.to_vec();
    reseal(&mut resealed);
    check(&resealed);
    builder_round_trip(data);
});
