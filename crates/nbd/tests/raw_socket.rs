//! Hand-made (often malformed) packets over a raw socket: what the server must do
//! with bad magic, oversized lengths, unknown options/commands/flags, clients that
//! vanish mid-request, and pipelined requests that complete out of order.

mod common;

use common::raw_client::{reply_error, RawClient, RawReply};
use common::*;
use fardisk_nbd::wire::consts::*;
use fardisk_nbd::wire::option::parse_rep_server;
use fardisk_nbd::wire::{
    ChunkPayload, ClientOption, Command, InfoReply, InfoRequest, MetaContextRequest, OptionHeader,
};
use fardisk_nbd::ServerConfig;

const MIB: u64 = 1 << 20;

fn server() -> (std::sync::Arc<fardisk_nbd::MemDevice>, TestServer) {
    let (device, exports) = mem_export(4 * MIB);
    (device, TestServer::start(exports, ServerConfig::default()))
}

/// The server still serves a fresh client normally.
fn assert_healthy(server: &TestServer) {
    let mut client = RawClient::open(&server.socket, "vol", false);
    client.write(77, 0, &[9; 512]);
    assert_eq!(reply_error(&client.read_simple(0)), 0);
    client.request(Command::Read, 0, 78, 0, 512);
    match client.read_simple(512) {
        RawReply::Simple { error: 0, cookie: 78, data } => assert_eq!(data, vec![9; 512]),
        other => panic!("unexpected reply {other:?}"),
    }
}

#[test]
fn unknown_client_flags_close_the_connection() {
    let (_, server) = server();
    let mut client = RawClient::connect_raw(&server.socket);
    client.send(&0x8000_0001u32.to_be_bytes());
    assert!(client.is_closed());
    assert_healthy(&server);
}

#[test]
fn bad_option_magic_closes_the_connection() {
    let (_, server) = server();
    let mut client = RawClient::connect(&server.socket);
    client.send(&[0x55; OPTION_HEADER_BYTES]);
    assert!(client.is_closed());
    assert_healthy(&server);
}

#[test]
fn unknown_options_get_unsup_and_negotiation_continues() {
    let (_, server) = server();
    let mut client = RawClient::connect(&server.socket);
    for code in [0u32, 4, NBD_OPT_STARTTLS, 11, 0xdead_beef] {
        client.option_raw(code, b"some data the server must skip");
        let reply = client.read_option_reply();
        assert_eq!((reply.option, reply.reply_type), (code, NBD_REP_ERR_UNSUP));
    }
    client.option(&ClientOption::Go(InfoRequest { name: "vol".to_owned(), info_requests: vec![] }));
    let replies = client.read_option_replies();
    assert_eq!(replies.last().map(|reply| reply.reply_type), Some(NBD_REP_ACK));
}

#[test]
fn malformed_option_data_gets_invalid_and_negotiation_continues() {
    let (_, server) = server();
    let mut client = RawClient::connect(&server.socket);
    // Name length 100 but only 3 bytes follow.
    client.option_raw(NBD_OPT_GO, &[0, 0, 0, 100, b'v', b'o', b'l']);
    assert_eq!(client.read_option_reply().reply_type, NBD_REP_ERR_INVALID);
    client.option_raw(NBD_OPT_LIST, b"unexpected");
    assert_eq!(client.read_option_reply().reply_type, NBD_REP_ERR_INVALID);
    // Query count claims far more queries than the data holds.
    let mut data = vec![0, 0, 0, 3];
    data.extend_from_slice(b"vol");
    data.extend_from_slice(&u32::MAX.to_be_bytes());
    client.option_raw(NBD_OPT_LIST_META_CONTEXT, &data);
    assert_eq!(client.read_option_reply().reply_type, NBD_REP_ERR_INVALID);
    client.option(&ClientOption::List);
    let replies = client.read_option_replies();
    assert_eq!(replies.len(), 2);
    assert_eq!(
        parse_rep_server(&replies[0].data).expect("server reply"),
        ("vol".to_owned(), "test volume".to_owned())
    );
}

#[test]
fn oversized_option_is_drained_and_refused() {
    let (_, server) = server();
    let mut client = RawClient::connect(&server.socket);
    let big = vec![0u8; 1 << 20];
    client.option_raw(NBD_OPT_GO, &big);
    assert_eq!(client.read_option_reply().reply_type, NBD_REP_ERR_TOO_BIG);
    client.option(&ClientOption::StructuredReply);
    assert_eq!(client.read_option_reply().reply_type, NBD_REP_ACK);
}

#[test]
fn export_name_unknown_closes_known_enters_transmission() {
    let (_, server) = server();
    let mut client = RawClient::connect(&server.socket);
    client.option(&ClientOption::ExportName("missing".to_owned()));
    assert!(client.is_closed());

    // Without NO_ZEROES the reply carries 124 bytes of padding.
    let mut client = RawClient::connect_raw(&server.socket);
    client.send(&NBD_FLAG_C_FIXED_NEWSTYLE.to_be_bytes());
    client.option(&ClientOption::ExportName("vol".to_owned()));
    let reply = client.read_exact_vec(8 + 2 + 124).expect("export name reply");
    assert_eq!(u64::from_be_bytes(reply[0..8].try_into().expect("8 bytes")), 4 * MIB);
    let flags = u16::from_be_bytes([reply[8], reply[9]]);
    assert_ne!(flags & NBD_FLAG_HAS_FLAGS, 0);
    assert_eq!(flags & NBD_FLAG_SEND_DF, 0, "DF without structured replies");
    assert!(reply[10..].iter().all(|byte| *byte == 0));
    client.request(Command::Read, 0, 5, 0, 4096);
    assert_eq!(reply_error(&client.read_simple(4096)), 0);
}

#[test]
fn info_answers_requested_items() {
    let (_, server) = server();
    let mut client = RawClient::connect(&server.socket);
    client.option(&ClientOption::Info(InfoRequest {
        name: String::new(),
        info_requests: vec![NBD_INFO_NAME, NBD_INFO_DESCRIPTION, NBD_INFO_BLOCK_SIZE],
    }));
    let replies = client.read_option_replies();
    let infos: Vec<InfoReply> = replies
        .iter()
        .filter(|reply| reply.reply_type == NBD_REP_INFO)
        .map(|reply| InfoReply::parse(&reply.data).expect("info reply"))
        .collect();
    assert!(infos.contains(&InfoReply::Name("vol".to_owned())), "{infos:?}");
    assert!(infos.contains(&InfoReply::Description("test volume".to_owned())));
    assert!(infos.contains(&InfoReply::BlockSize {
        minimum_bytes: 1,
        preferred_bytes: 4096,
        maximum_bytes: 32 << 20
    }));
    assert!(infos.iter().any(
        |info| matches!(info, InfoReply::Export { size_bytes, .. } if *size_bytes == 4 * MIB)
    ));
    // INFO does not enter transmission: another option still works.
    client.option(&ClientOption::Abort);
    assert_eq!(client.read_option_reply().reply_type, NBD_REP_ACK);
    assert!(client.is_closed());
}

#[test]
fn set_meta_context_requires_structured_replies() {
    let (_, server) = server();
    let mut client = RawClient::connect(&server.socket);
    client.option(&ClientOption::SetMetaContext(MetaContextRequest {
        export_name: "vol".to_owned(),
        queries: vec!["base:allocation".to_owned()],
    }));
    assert_eq!(client.read_option_reply().reply_type, NBD_REP_ERR_INVALID);
}

#[test]
fn bad_request_magic_closes_the_connection() {
    let (_, server) = server();
    let mut client = RawClient::open(&server.socket, "vol", false);
    client.send(&[0x11; REQUEST_HEADER_BYTES]);
    assert!(client.is_closed());
    assert_healthy(&server);
}

#[test]
fn oversized_write_gets_einval_then_close() {
    let (device, server) = server();
    let mut client = RawClient::open(&server.socket, "vol", false);
    // Claims 64 MiB of payload (over the 32 MiB limit); only a little follows.
    client.request(Command::Write, 0, 9, 0, 64 << 20);
    let _ = client.try_send(&[0xee; 4096]);
    let reply = client.read_simple(0);
    assert_eq!((reply_error(&reply), reply.cookie()), (NBD_EINVAL, 9));
    assert!(client.is_closed());
    assert_eq!(device.stats().writes, 0);
    assert_healthy(&server);
}

#[test]
fn oversized_read_gets_einval_and_connection_continues() {
    let (_, server) = server();
    let mut client = RawClient::open(&server.socket, "vol", false);
    client.request(Command::Read, 0, 1, 0, (32 << 20) + 1);
    assert_eq!(reply_error(&client.read_simple(0)), NBD_EINVAL);
    client.request(Command::Read, 0, 2, 0, 512);
    assert_eq!(reply_error(&client.read_simple(512)), 0);
}

#[test]
fn bad_requests_get_einval_and_connection_continues() {
    let (device, server) = server();
    let mut client = RawClient::open(&server.socket, "vol", false);
    let cases: Vec<(Command, u16, u64, u32, u32)> = vec![
        (Command::Unknown(42), 0, 0, 512, NBD_EINVAL),
        (Command::Read, 1 << 9, 0, 512, NBD_EINVAL), // undefined flag bit
        (Command::Read, NBD_CMD_FLAG_NO_HOLE, 0, 512, NBD_EINVAL), // flag of another command
        (Command::Read, NBD_CMD_FLAG_DF, 0, 512, NBD_EINVAL), // DF without structured replies
        (Command::Flush, 0, 4096, 0, NBD_EINVAL),    // FLUSH with an offset
        (Command::BlockStatus, 0, 0, 4096, NBD_EINVAL), // no metadata context
        (Command::Read, 0, u64::MAX - 10, 512, NBD_EINVAL), // offset + length overflows
        (Command::Trim, 0, 4 * MIB, 1, NBD_EINVAL),
        (Command::WriteZeroes, 0, 4 * MIB - 1, 2, NBD_ENOSPC),
        (Command::Cache, 0, 4 * MIB, 4096, NBD_EINVAL),
    ];
    for (index, (command, flags, offset, length_bytes, errno)) in cases.into_iter().enumerate() {
        let cookie = 1000 + index as u64;
        client.request(command, flags, cookie, offset, length_bytes);
        let reply = client.read_simple(0);
        assert_eq!(
            (reply.cookie(), reply_error(&reply)),
            (cookie, errno),
            "case {index}: {command:?}"
        );
    }
    // A write past the end still has its payload consumed: the stream stays in sync.
    client.write(2000, 4 * MIB - 100, &[1; 200]);
    assert_eq!(reply_error(&client.read_simple(0)), NBD_ENOSPC);
    client.request(Command::Read, 0, 2001, 4 * MIB - 512, 512);
    assert_eq!(reply_error(&client.read_simple(512)), 0);
    assert_eq!(device.stats().writes, 0);
}

#[test]
fn client_vanishing_mid_request_does_not_affect_others() {
    let (device, server) = server();
    let mut bystander = RawClient::open(&server.socket, "vol", false);
    {
        let mut client = RawClient::open(&server.socket, "vol", false);
        client.request(Command::Write, 0, 1, MIB, 65536);
        client.send(&[0xaa; 1000]);
        // Dropped here, 64 KiB - 1000 bytes short.
    }
    {
        let mut client = RawClient::connect(&server.socket);
        client.send(&OptionHeader { option: NBD_OPT_GO, length_bytes: 100 }.encode()[..10]);
        // Dropped mid-handshake, mid-header.
    }
    {
        let mut client = RawClient::open(&server.socket, "vol", false);
        client.send(&[0x25, 0x60, 0x95]); // part of a request header
    }
    bystander.write(2, 8192, &[3; 4096]);
    assert_eq!(reply_error(&bystander.read_simple(0)), 0);
    assert_healthy(&server);
    // The partial write never reached the device.
    let partial = device.contents(MIB, 65536).expect("contents");
    assert!(partial.iter().all(|byte| *byte == 0), "a partial write reached the device");
}

#[test]
fn disconnect_waits_for_inflight_replies() {
    let (_, server) = server();
    let mut client = RawClient::open(&server.socket, "vol", false);
    client.write(1, 0, &[5; 65536]);
    client.request(Command::Flush, 0, 2, 0, 0);
    client.request(Command::Disconnect, 0, 3, 0, 0);
    let mut cookies = vec![client.read_simple(0).cookie(), client.read_simple(0).cookie()];
    cookies.sort();
    assert_eq!(cookies, vec![1, 2]);
    assert!(client.is_closed());
}

#[test]
fn structured_reads_use_data_hole_and_error_chunks() {
    let (device, server) = server();
    device.fill(4096, &[0x42; 4096]).expect("fill");
    let mut client = RawClient::open(&server.socket, "vol", true);
    // 0..4K hole, 4K..8K data, 8K..16K hole.
    client.request(Command::Read, 0, 1, 0, 16384);
    let payloads: Vec<ChunkPayload> =
        client.read_chunks().into_iter().map(|chunk| chunk.payload).collect();
    assert_eq!(
        payloads,
        vec![
            ChunkPayload::OffsetHole { offset: 0, hole_bytes: 4096 },
            ChunkPayload::OffsetData { offset: 4096, data: vec![0x42; 4096] },
            ChunkPayload::OffsetHole { offset: 8192, hole_bytes: 8192 },
        ]
    );
    // DF: exactly one content chunk, zeroes included.
    client.request(Command::Read, NBD_CMD_FLAG_DF, 2, 0, 16384);
    let chunks = client.read_chunks();
    assert_eq!(chunks.len(), 1);
    assert!(
        matches!(&chunks[0].payload, ChunkPayload::OffsetData { offset: 0, data } if data.len() == 16384)
    );
    // Errors come as an ERROR chunk with a message.
    client.request(Command::Read, 0, 3, 4 * MIB, 512);
    let chunks = client.read_chunks();
    assert!(
        matches!(&chunks[0].payload, ChunkPayload::Error { error, message } if *error == NBD_EINVAL && !message.is_empty())
    );
    // A zero-length read still gets a structured (NONE) reply.
    client.request(Command::Read, 0, 4, 0, 0);
    assert_eq!(client.read_chunks()[0].payload, ChunkPayload::None);
}

#[test]
fn block_status_descriptors_cover_the_request() {
    let (device, server) = server();
    device.fill(8192, &[1; 8192]).expect("fill");
    let mut client = RawClient::open(&server.socket, "vol", true);
    client.request(Command::BlockStatus, 0, 1, 4096, 16384);
    let chunks = client.read_chunks();
    assert_eq!(chunks.len(), 1);
    let ChunkPayload::BlockStatus { context_id, descriptors } = &chunks[0].payload else {
        panic!("expected block status, got {:?}", chunks[0].payload);
    };
    assert_eq!(*context_id, BASE_ALLOCATION_CONTEXT_ID);
    let summary: Vec<(u32, u32)> =
        descriptors.iter().map(|d| (d.length_bytes, d.status_flags)).collect();
    assert_eq!(summary, vec![(4096, 3), (8192, 0), (4096, 3)]);
}

#[test]
fn a_huge_cache_request_reaches_the_device_in_bounded_pieces() {
    // NBD_CMD_CACHE has no payload, so the protocol allows an effect length past the maximum
    // payload size: the largest a request can say, 4 GiB - 4 KiB, on a 6 GiB sparse device.
    let (device, exports) = mem_export(6 << 30);
    let config = ServerConfig { max_request_bytes: 1 << 20, ..ServerConfig::default() };
    let server = TestServer::start(exports, config);
    let mut client = RawClient::open(&server.socket, "vol", false);
    let length_bytes = u32::MAX - 4095;
    client.request(Command::Cache, 0, 31, 4096, length_bytes);
    let reply = client.read_simple(0);
    assert_eq!((reply.cookie(), reply_error(&reply)), (31, 0), "served, not refused");
    let stats = device.stats();
    assert!(
        stats.cache_bytes_max <= 1 << 20,
        "the device was asked to cache {} bytes at once (max_request_bytes 1 MiB)",
        stats.cache_bytes_max
    );
    assert_eq!(stats.caches, u64::from(length_bytes).div_ceil(1 << 20), "every byte asked for");
    // The connection still serves.
    client.request(Command::Read, 0, 32, 0, 4096);
    assert_eq!(reply_error(&client.read_simple(4096)), 0);
}
