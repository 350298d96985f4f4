//! A minimal blocking NBD client over a raw socket, for sending exactly the bytes a
//! test wants (including malformed ones) and reading exactly what comes back.
#![allow(dead_code)]
// Real time is the point here: a real socket client with real timeouts.
#![allow(clippy::disallowed_methods)]

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use fardisk_nbd::wire::consts::*;
use fardisk_nbd::wire::{
    parse_greeting, ChunkPayload, ClientFlags, ClientOption, Command, InfoRequest,
    MetaContextRequest, OptionHeader, OptionReply, RequestHeader, SimpleReply, StructuredChunk,
};

/// Long enough for any reply on a loaded machine; a hang still fails the test.
const READ_TIMEOUT: Duration = Duration::from_secs(20);

pub struct RawClient {
    pub stream: UnixStream,
}

/// One reply as a test sees it.
#[derive(Debug, PartialEq, Eq)]
pub enum RawReply {
    Simple { error: u32, cookie: u64, data: Vec<u8> },
    Chunk(StructuredChunk),
}

impl RawReply {
    pub fn cookie(&self) -> u64 {
        match self {
            RawReply::Simple { cookie, .. } => *cookie,
            RawReply::Chunk(chunk) => chunk.cookie,
        }
    }
}

impl RawClient {
    /// Connects and reads the greeting, without sending client flags.
    pub fn connect_raw(socket: &Path) -> RawClient {
        Self::try_connect_raw(socket).expect("greeting: the server closed the connection")
    }

    /// Like `connect_raw`, but `None` if the server closes instead of greeting (as it
    /// does when its connection limit is reached).
    pub fn try_connect_raw(socket: &Path) -> Option<RawClient> {
        let stream = UnixStream::connect(socket).expect("connect");
        stream.set_read_timeout(Some(READ_TIMEOUT)).expect("timeout");
        let mut client = RawClient { stream };
        let greeting = client.read_exact_vec(GREETING_BYTES).ok()?;
        let flags = parse_greeting(&greeting).expect("valid greeting");
        assert_eq!(flags, NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
        Some(client)
    }

    /// Connects and sends FIXED_NEWSTYLE | NO_ZEROES.
    pub fn connect(socket: &Path) -> RawClient {
        Self::handshake_flags(Self::connect_raw(socket))
    }

    fn handshake_flags(mut client: RawClient) -> RawClient {
        let flags = ClientFlags { fixed_newstyle: true, no_zeroes: true };
        client.send(&flags.encode());
        client
    }

    /// Connects, optionally negotiates structured replies and base:allocation, and
    /// enters transmission with NBD_OPT_GO.
    pub fn open(socket: &Path, export: &str, structured: bool) -> RawClient {
        Self::negotiate(Self::connect(socket), export, structured)
    }

    /// `open`, retried (bounded) while the server refuses the connection.
    pub fn open_retrying(socket: &Path, export: &str) -> RawClient {
        for _ in 0..250 {
            if let Some(client) = Self::try_connect_raw(socket) {
                return Self::negotiate(Self::handshake_flags(client), export, false);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the server refused every connection for 5 s");
    }

    fn negotiate(mut client: RawClient, export: &str, structured: bool) -> RawClient {
        if structured {
            client.option(&ClientOption::StructuredReply);
            assert_eq!(client.read_option_reply().reply_type, NBD_REP_ACK);
            client.option(&ClientOption::SetMetaContext(MetaContextRequest {
                export_name: export.to_owned(),
                queries: vec!["base:allocation".to_owned()],
            }));
            let replies = client.read_option_replies();
            assert_eq!(replies.len(), 2, "meta context + ack: {replies:?}");
        }
        client.option(&ClientOption::Go(InfoRequest {
            name: export.to_owned(),
            info_requests: vec![],
        }));
        let replies = client.read_option_replies();
        assert_eq!(replies.last().map(|reply| reply.reply_type), Some(NBD_REP_ACK), "{replies:?}");
        client
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// Sends bytes, tolerating a server that already closed.
    pub fn try_send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    pub fn option(&mut self, option: &ClientOption) {
        let (code, data) = option.encode();
        self.option_raw(code, &data);
    }

    pub fn option_raw(&mut self, code: u32, data: &[u8]) {
        let header = OptionHeader { option: code, length_bytes: data.len() as u32 };
        self.send(&header.encode());
        self.send(data);
    }

    pub fn read_exact_vec(&mut self, length_bytes: usize) -> io::Result<Vec<u8>> {
        let mut buffer = vec![0u8; length_bytes];
        self.stream.read_exact(&mut buffer)?;
        Ok(buffer)
    }

    pub fn read_option_reply(&mut self) -> OptionReply {
        let header = self.read_exact_vec(OPTION_REPLY_HEADER_BYTES).expect("option reply header");
        let (_, _, length_bytes) = OptionReply::parse_header(&header).expect("option reply magic");
        let data = self.read_exact_vec(length_bytes as usize).expect("option reply data");
        OptionReply::parse(&[header, data].concat()).expect("option reply")
    }

    /// Reads replies up to and including the final ACK or error.
    pub fn read_option_replies(&mut self) -> Vec<OptionReply> {
        let mut replies = Vec::new();
        for _ in 0..1000 {
            let reply = self.read_option_reply();
            let last = reply.reply_type == NBD_REP_ACK || is_option_error(reply.reply_type);
            replies.push(reply);
            if last {
                return replies;
            }
        }
        panic!("no final option reply after 1000 replies");
    }

    pub fn request(
        &mut self,
        command: Command,
        flags: u16,
        cookie: u64,
        offset: u64,
        length_bytes: u32,
    ) {
        let header = RequestHeader { flags, command, cookie, offset, length_bytes };
        self.send(&header.encode());
    }

    pub fn write(&mut self, cookie: u64, offset: u64, data: &[u8]) {
        self.request(Command::Write, 0, cookie, offset, data.len() as u32);
        self.send(data);
    }

    /// Reads one simple reply; `read_bytes` of data follow a successful read.
    pub fn read_simple(&mut self, read_bytes: usize) -> RawReply {
        let header = self.read_exact_vec(SIMPLE_REPLY_HEADER_BYTES).expect("simple reply");
        let reply = SimpleReply::parse(&header).expect("simple reply magic");
        let data = if reply.error == 0 && read_bytes > 0 {
            self.read_exact_vec(read_bytes).expect("read data")
        } else {
            Vec::new()
        };
        RawReply::Simple { error: reply.error, cookie: reply.cookie, data }
    }

    /// Reads one reply of either kind; a simple reply is assumed to carry no data.
    pub fn read_any(&mut self) -> RawReply {
        let magic = self.read_exact_vec(4).expect("reply magic");
        let magic_value = u32::from_be_bytes([magic[0], magic[1], magic[2], magic[3]]);
        if magic_value == SIMPLE_REPLY_MAGIC {
            let rest = self.read_exact_vec(SIMPLE_REPLY_HEADER_BYTES - 4).expect("simple reply");
            let reply = SimpleReply::parse(&[magic, rest].concat()).expect("simple reply");
            return RawReply::Simple { error: reply.error, cookie: reply.cookie, data: Vec::new() };
        }
        let rest = self.read_exact_vec(STRUCTURED_REPLY_HEADER_BYTES - 4).expect("chunk header");
        let header = [magic, rest].concat();
        let (_, _, _, length_bytes) = StructuredChunk::parse_header(&header).expect("chunk magic");
        let payload = self.read_exact_vec(length_bytes as usize).expect("chunk payload");
        RawReply::Chunk(StructuredChunk::parse(&[header, payload].concat()).expect("chunk"))
    }

    /// Reads structured chunks until one carries DONE.
    pub fn read_chunks(&mut self) -> Vec<StructuredChunk> {
        let mut chunks = Vec::new();
        for _ in 0..10_000 {
            match self.read_any() {
                RawReply::Chunk(chunk) => {
                    let done = chunk.is_done();
                    chunks.push(chunk);
                    if done {
                        return chunks;
                    }
                }
                simple => panic!("expected a structured chunk, got {simple:?}"),
            }
        }
        panic!("no DONE chunk after 10000 chunks");
    }

    /// True if the server closed the connection (EOF or reset) within the timeout.
    pub fn is_closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        match self.stream.read(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(error) => error.kind() == io::ErrorKind::ConnectionReset,
        }
    }
}

/// The error value of a reply, whichever kind it is.
pub fn reply_error(reply: &RawReply) -> u32 {
    match reply {
        RawReply::Simple { error, .. } => *error,
        RawReply::Chunk(chunk) => match &chunk.payload {
            ChunkPayload::Error { error, .. } | ChunkPayload::ErrorOffset { error, .. } => *error,
            _ => 0,
        },
    }
}
