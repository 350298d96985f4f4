//! Parsing: well-formed requests decode, malformed ones are errors (never panics), checked
//! on hand-made requests and on random bytes (proptest).

use super::*;
use crate::abi::{InHeader, Pod, ReadIn, WriteIn};
use proptest::prelude::*;

/// A /dev/fuse request: header (with the right length) followed by `args`.
fn request(opcode: u32, unique: u64, args: &[u8]) -> Vec<u8> {
    let header =
        InHeader { len: (40 + args.len()) as u32, opcode, unique, nodeid: 5, ..Default::default() };
    let mut bytes = header.as_bytes().to_vec();
    bytes.extend_from_slice(args);
    bytes
}

#[test]
fn write_carries_its_data() {
    let arg =
        WriteIn { fh: 3, offset: 4096, size: 5, flags: libc::O_DSYNC as u32, ..Default::default() };
    let mut args = arg.as_bytes().to_vec();
    args.extend_from_slice(b"hello");
    let bytes = request(opcode::WRITE, 77, &args);
    let parsed = parse(&bytes).expect("parses");
    assert_eq!(parsed.unique(), 77);
    assert_eq!(parsed.nodeid(), 5);
    assert_eq!(parsed.operation, Operation::Write { arg, data: b"hello" });
}

#[test]
fn write_shorter_than_its_size_is_malformed() {
    let arg = WriteIn { size: 4096, ..Default::default() };
    let mut args = arg.as_bytes().to_vec();
    args.extend_from_slice(&[0u8; 100]);
    let bytes = request(opcode::WRITE, 1, &args);
    assert_eq!(parse(&bytes), Err(Malformed::WriteSize { size: 4096, data: 100 }));
}

#[test]
fn lookup_needs_a_terminated_name() {
    let bytes = request(opcode::LOOKUP, 1, b"vol\0");
    assert_eq!(parse(&bytes).expect("parses").operation, Operation::Lookup { name: b"vol" });
    assert_eq!(
        parse(&request(opcode::LOOKUP, 1, b"vol")).map(|r| r.operation),
        Err(Malformed::Name { opcode: opcode::LOOKUP })
    );
    assert!(parse(&request(opcode::LOOKUP, 1, b"\0")).is_err(), "empty name");
}

#[test]
fn short_arguments_and_lengths_are_malformed() {
    let read = ReadIn { size: 4096, ..Default::default() };
    let bytes = request(opcode::READ, 1, &read.as_bytes()[..20]);
    assert!(matches!(parse(&bytes), Err(Malformed::Arguments { opcode: opcode::READ, len: 20 })));
    let mut lying = request(opcode::READ, 1, read.as_bytes());
    lying[0] = 200; // header claims more than was received
    assert!(matches!(parse(&lying), Err(Malformed::Length { .. })));
    assert!(matches!(parse(&lying[..10]), Err(Malformed::NoHeader { len: 10 })));
}

#[test]
fn batch_forget_count_is_bounded_by_the_data() {
    let mut args = abi::BatchForgetIn { count: 2, dummy: 0 }.as_bytes().to_vec();
    args.extend_from_slice(abi::ForgetOne { nodeid: 9, nlookup: 1 }.as_bytes());
    assert!(parse(&request(opcode::BATCH_FORGET, 1, &args)).is_err(), "two announced, one sent");
    args.extend_from_slice(abi::ForgetOne { nodeid: 10, nlookup: 2 }.as_bytes());
    let bytes = request(opcode::BATCH_FORGET, 1, &args);
    let Operation::BatchForget { count, entries } = parse(&bytes).expect("parses").operation else {
        panic!("not a batch forget");
    };
    assert_eq!(count, 2);
    let ids: Vec<u64> = forgets(entries).map(|one| one.nodeid).collect();
    assert_eq!(ids, vec![9, 10]);
    let huge = abi::BatchForgetIn { count: u32::MAX, dummy: 0 };
    assert!(parse(&request(opcode::BATCH_FORGET, 1, huge.as_bytes())).is_err());
}

#[test]
fn old_kernels_short_init_is_accepted() {
    let mut args = Vec::new();
    for word in [7u32, 31, 131_072, 0xff] {
        args.extend_from_slice(&word.to_ne_bytes());
    }
    let bytes = request(opcode::INIT, 1, &args);
    let Operation::Init(init) = parse(&bytes).expect("parses").operation else {
        panic!("not init");
    };
    assert_eq!((init.major, init.minor, init.flags, init.flags2), (7, 31, 0xff, 0));
}

#[test]
fn ring_requests_take_the_struct_and_payload_apart() {
    let header = InHeader { len: 0, opcode: opcode::WRITE, unique: 4, ..Default::default() };
    let arg = WriteIn { size: 3, offset: 8, ..Default::default() };
    let parsed = parse_ring(header.as_bytes(), arg.as_bytes(), b"abcdef").expect("parses");
    assert_eq!(parsed.operation, Operation::Write { arg, data: b"abc" });
    let lookup = InHeader { opcode: opcode::LOOKUP, ..header };
    let parsed = parse_ring(lookup.as_bytes(), &[], b"name\0").expect("parses");
    assert_eq!(parsed.operation, Operation::Lookup { name: b"name" });
}

#[test]
fn resend_bit_is_seen() {
    let bytes = request(opcode::STATFS, 5 | abi::UNIQUE_RESEND, &[]);
    let parsed = parse(&bytes).expect("parses");
    assert!(parsed.is_resend());
    assert_eq!(parsed.unique(), 5 | abi::UNIQUE_RESEND, "the reply must echo the bit");
}

#[test]
fn unknown_opcodes_are_unsupported() {
    let bytes = request(9999, 1, &[1, 2, 3]);
    assert_eq!(parse(&bytes).expect("parses").operation, Operation::Unsupported(9999));
}

proptest! {
    /// Random bytes: never a panic; whatever parses stays inside the buffer.
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = parse(&bytes);
        let split = bytes.len() / 3;
        let _ = parse_ring(&bytes[..split], &bytes[split..2 * split], &bytes[2 * split..]);
    }

    /// A valid header with a random opcode and random arguments: never a panic, and an
    /// error only names lengths that were really short.
    #[test]
    fn random_arguments_never_panic(
        code in 0u32..64,
        args in proptest::collection::vec(any::<u8>(), 0..300),
        extlen in 0u16..4,
    ) {
        let mut bytes = request(code, 1, &args);
        bytes[36..38].copy_from_slice(&extlen.to_ne_bytes());
        match parse(&bytes) {
            Ok(parsed) => prop_assert_eq!(parsed.header.opcode, code),
            Err(Malformed::Arguments { len, .. }) => prop_assert!(len <= args.len()),
            Err(_) => {}
        }
    }
}
