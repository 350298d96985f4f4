//! Property tests of the pure codec and the pure server logic: arbitrary bytes never
//! panic any parser, valid messages survive an encode/parse round trip, and request
//! validation and reply shaping keep the protocol's invariants for any input.

use std::sync::Arc;

use fardisk_nbd::server::negotiate::{Negotiation, Next};
use fardisk_nbd::server::shaping::{block_descriptors, read_pieces};
use fardisk_nbd::server::{validate, Action, ExportLimits};
use fardisk_nbd::wire::consts::*;
use fardisk_nbd::wire::option::{
    encode_rep_meta_context, encode_rep_server, parse_rep_meta_context, parse_rep_server,
};
use fardisk_nbd::wire::{
    parse_greeting, BlockDescriptor, ChunkPayload, ClientFlags, ClientOption, Command, InfoReply,
    InfoRequest, MetaContextRequest, OptionHeader, OptionReply, RequestHeader, SimpleReply,
    StructuredChunk,
};
use fardisk_nbd::{ExportMap, Extent, MemDevice};
use proptest::prelude::*;

fn name() -> impl Strategy<Value = String> {
    // Protocol strings: UTF-8 without NUL, kept short.
    "[a-zA-Z0-9:/._ -]{0,40}"
}

fn info_request() -> impl Strategy<Value = InfoRequest> {
    (name(), prop::collection::vec(any::<u16>(), 0..8))
        .prop_map(|(name, info_requests)| InfoRequest { name, info_requests })
}

fn meta_request() -> impl Strategy<Value = MetaContextRequest> {
    (name(), prop::collection::vec(name(), 0..8))
        .prop_map(|(export_name, queries)| MetaContextRequest { export_name, queries })
}

fn client_option() -> impl Strategy<Value = ClientOption> {
    prop_oneof![
        name().prop_map(ClientOption::ExportName),
        Just(ClientOption::Abort),
        Just(ClientOption::List),
        info_request().prop_map(ClientOption::Info),
        info_request().prop_map(ClientOption::Go),
        Just(ClientOption::StructuredReply),
        meta_request().prop_map(ClientOption::ListMetaContext),
        meta_request().prop_map(ClientOption::SetMetaContext),
        (11u32..).prop_map(ClientOption::Unknown),
    ]
}

fn command() -> impl Strategy<Value = Command> {
    // Mostly the defined commands (0..=7), some unknown ones.
    prop_oneof![3 => 0u16..9, 1 => any::<u16>()].prop_map(Command::from_code)
}

fn request_header() -> impl Strategy<Value = RequestHeader> {
    (any::<u16>(), command(), any::<u64>(), any::<u64>(), any::<u32>()).prop_map(
        |(flags, command, cookie, offset, length_bytes)| RequestHeader {
            flags,
            command,
            cookie,
            offset,
            length_bytes,
        },
    )
}

fn chunk_payload() -> impl Strategy<Value = ChunkPayload> {
    let descriptor = (1u32.., any::<u32>())
        .prop_map(|(length_bytes, status_flags)| BlockDescriptor { length_bytes, status_flags });
    prop_oneof![
        Just(ChunkPayload::None),
        (any::<u64>(), prop::collection::vec(any::<u8>(), 1..64))
            .prop_map(|(offset, data)| ChunkPayload::OffsetData { offset, data }),
        (any::<u64>(), 1u32..)
            .prop_map(|(offset, hole_bytes)| ChunkPayload::OffsetHole { offset, hole_bytes }),
        (any::<u32>(), prop::collection::vec(descriptor, 1..16)).prop_map(
            |(context_id, descriptors)| ChunkPayload::BlockStatus { context_id, descriptors }
        ),
        (1u32.., name()).prop_map(|(error, message)| ChunkPayload::Error { error, message }),
        (1u32.., name(), any::<u64>()).prop_map(|(error, message, offset)| {
            ChunkPayload::ErrorOffset { error, message, offset }
        }),
    ]
}

fn info_reply() -> impl Strategy<Value = InfoReply> {
    prop_oneof![
        (any::<u64>(), any::<u16>()).prop_map(|(size_bytes, transmission_flags)| {
            InfoReply::Export { size_bytes, transmission_flags }
        }),
        name().prop_map(InfoReply::Name),
        name().prop_map(InfoReply::Description),
        (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(
            |(minimum_bytes, preferred_bytes, maximum_bytes)| {
                InfoReply::BlockSize { minimum_bytes, preferred_bytes, maximum_bytes }
            }
        ),
    ]
}

fn provider() -> Arc<ExportMap> {
    let device = Arc::new(MemDevice::new(1 << 20));
    Arc::new(ExportMap::new().with_export("vol", "a volume", device))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic_any_parser(bytes in prop::collection::vec(any::<u8>(), 0..256), code in 0u32..16, kind in any::<u16>()) {
        let _ = parse_greeting(&bytes);
        let _ = ClientFlags::parse(&bytes);
        let _ = OptionHeader::parse(&bytes);
        let _ = ClientOption::parse(code, &bytes);
        let _ = OptionReply::parse(&bytes);
        let _ = InfoReply::parse(&bytes);
        let _ = parse_rep_server(&bytes);
        let _ = parse_rep_meta_context(&bytes);
        let _ = RequestHeader::parse(&bytes);
        let _ = SimpleReply::parse(&bytes);
        let _ = StructuredChunk::parse(&bytes);
        let _ = ChunkPayload::parse(kind, &bytes);
    }

    #[test]
    fn client_options_round_trip(option in client_option()) {
        let (code, data) = option.encode();
        prop_assert_eq!(ClientOption::parse(code, &data), Ok(option));
        let header = OptionHeader { option: code, length_bytes: data.len() as u32 };
        prop_assert_eq!(OptionHeader::parse(&header.encode()), Ok(header));
    }

    #[test]
    fn request_headers_round_trip(header in request_header()) {
        prop_assert_eq!(RequestHeader::parse(&header.encode()), Ok(header));
    }

    #[test]
    fn structured_chunks_round_trip(flags in any::<u16>(), cookie in any::<u64>(), payload in chunk_payload()) {
        let chunk = StructuredChunk { flags, cookie, payload };
        prop_assert_eq!(StructuredChunk::parse(&chunk.encode()), Ok(chunk));
    }

    #[test]
    fn option_replies_and_payloads_round_trip(info in info_reply(), option in any::<u32>(), export in name(), description in name(), id in any::<u32>()) {
        prop_assert_eq!(InfoReply::parse(&info.encode()), Ok(info.clone()));
        let reply = OptionReply { option, reply_type: NBD_REP_INFO, data: info.encode() };
        prop_assert_eq!(OptionReply::parse(&reply.encode()), Ok(reply));
        prop_assert_eq!(parse_rep_server(&encode_rep_server(&export, &description)), Ok((export.clone(), description)));
        prop_assert_eq!(parse_rep_meta_context(&encode_rep_meta_context(id, &export)), Ok((id, export)));
        let simple = SimpleReply { error: id, cookie: option as u64 };
        prop_assert_eq!(SimpleReply::parse(&simple.encode()), Ok(simple));
    }

    /// Any sequence of options, valid or garbage, keeps negotiation well-formed: every
    /// reply parses, and answers the option it was sent for.
    #[test]
    fn negotiation_answers_any_option_sequence(options in prop::collection::vec((0u32..14, prop::collection::vec(any::<u8>(), 0..64)), 1..12)) {
        let mut negotiation = Negotiation::new(provider(), 1 << 25, true);
        for (code, data) in options {
            let outcome = negotiation.handle(code, &data);
            let finished = !matches!(outcome.next, Next::Continue);
            if code != NBD_OPT_EXPORT_NAME {
                let mut rest = &outcome.reply_bytes[..];
                prop_assert!(!rest.is_empty(), "option {} got no reply", code);
                while !rest.is_empty() {
                    let (option, _, length_bytes) = OptionReply::parse_header(&rest[..OPTION_REPLY_HEADER_BYTES]).expect("reply header");
                    prop_assert_eq!(option, code);
                    rest = &rest[OPTION_REPLY_HEADER_BYTES + length_bytes as usize..];
                }
            }
            if finished {
                break;
            }
        }
    }

    /// Whatever the request, a validated action stays inside the export and the limits.
    #[test]
    fn validated_actions_stay_in_bounds(header in request_header(), size_bytes in 0u64..(1 << 40), read_only in any::<bool>(), structured in any::<bool>()) {
        let limits = ExportLimits {
            size_bytes,
            min_block_bytes: 1,
            max_request_bytes: 1 << 25,
            read_only,
            structured_replies: structured,
            base_allocation: structured,
            fast_zero: true,
            fua_always: false,
        };
        if let Ok(action) = validate(&header, &limits) {
            let end = header.offset.checked_add(header.length_bytes as u64);
            match action {
                Action::Flush => prop_assert!(header.offset == 0 && header.length_bytes == 0),
                Action::Nothing => prop_assert_eq!(header.length_bytes, 0),
                Action::Disconnect => prop_assert_eq!(header.command, Command::Disconnect),
                Action::Read { length_bytes, .. } => {
                    prop_assert!(length_bytes <= limits.max_request_bytes);
                    prop_assert!(end.is_some_and(|end| end <= size_bytes));
                }
                Action::Write { .. } | Action::Trim { .. } | Action::WriteZeroes { .. } => {
                    prop_assert!(!read_only);
                    prop_assert!(end.is_some_and(|end| end <= size_bytes));
                }
                Action::Cache { .. } | Action::BlockStatus { .. } => {
                    prop_assert!(end.is_some_and(|end| end <= size_bytes));
                }
            }
        }
    }

    /// Read pieces tile the buffer exactly, and every hole piece is really zero.
    #[test]
    fn read_pieces_tile_the_data(offset in 0u64..(1 << 30), blocks in prop::collection::vec(any::<bool>(), 1..40), tail in 0usize..4096, df in any::<bool>()) {
        let mut data = Vec::new();
        for zero in &blocks {
            data.extend(std::iter::repeat_n(if *zero { 0u8 } else { 0x5a }, 4096));
        }
        data.truncate(data.len().saturating_sub(tail).max(1));
        let pieces = read_pieces(offset, &data, df, 4096);
        if df {
            prop_assert_eq!(pieces.len(), 1);
        }
        let mut position = 0;
        for piece in &pieces {
            prop_assert_eq!(piece.start, position);
            prop_assert!(piece.length_bytes > 0);
            if piece.hole {
                prop_assert!(data[piece.start..piece.start + piece.length_bytes].iter().all(|b| *b == 0));
            }
            position += piece.length_bytes;
        }
        prop_assert_eq!(position, data.len());
    }

    /// Descriptors are non-empty, non-zero, within the request, and one for REQ_ONE.
    #[test]
    fn block_descriptors_obey_the_spec(extents in prop::collection::vec((0u64..(1 << 34), any::<bool>(), any::<bool>()), 0..20), length_bytes in 1u32.., req_one in any::<bool>(), max in 1usize..8) {
        let extents: Vec<Extent> = extents.into_iter().map(|(length_bytes, hole, zero)| Extent { length_bytes, hole, zero }).collect();
        let descriptors = block_descriptors(&extents, length_bytes, req_one, max);
        prop_assert!(!descriptors.is_empty());
        prop_assert!(descriptors.len() <= max.max(1));
        if req_one {
            prop_assert_eq!(descriptors.len(), 1);
        }
        prop_assert!(descriptors.iter().all(|d| d.length_bytes > 0));
        let total: u64 = descriptors.iter().map(|d| d.length_bytes as u64).sum();
        prop_assert!(total <= length_bytes as u64);
    }
}
