//! The option-haggling state machine, without I/O: each client option goes in, the
//! bytes to send and the next state come out. The async driver (`handshake.rs`) only
//! moves bytes; keeping the decisions here makes them unit-testable and fuzzable.

use std::sync::Arc;

use crate::device::BlockDevice;
use crate::export::ExportProvider;
use crate::wire::consts::*;
use crate::wire::option::{encode_rep_meta_context, encode_rep_server};
use crate::wire::{
    encode_export_name_reply, ClientOption, InfoReply, InfoRequest, MetaContextRequest,
    OptionReply, WireError,
};

/// At most this many exports are listed by NBD_OPT_LIST (bounds the reply).
const LIST_EXPORTS_MAX: usize = 4096;

/// Everything the transmission phase needs, decided at the end of the handshake.
pub struct Session {
    pub export_name: String,
    pub device: Arc<dyn BlockDevice>,
    pub transmission_flags: u16,
    pub structured_replies: bool,
    /// base:allocation was selected for this export: NBD_CMD_BLOCK_STATUS is allowed.
    pub base_allocation: bool,
    pub block_sizes: BlockSizes,
}

/// The advertised NBD_INFO_BLOCK_SIZE constraints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSizes {
    pub minimum_bytes: u32,
    pub preferred_bytes: u32,
    pub maximum_bytes: u32,
}

impl BlockSizes {
    /// Sanitises what the device asks for into values the protocol allows: minimum a
    /// power of two <= 64 KiB, preferred a power of two >= max(minimum, 512), maximum
    /// >= preferred.
    pub fn for_device(device: &dyn BlockDevice, max_request_bytes: u32) -> BlockSizes {
        let minimum_bytes = device.min_block_bytes().clamp(1, 65536).next_power_of_two().min(65536);
        let preferred_bytes = device
            .preferred_block_bytes()
            .clamp(512, 1 << 24)
            .next_power_of_two()
            .max(minimum_bytes);
        BlockSizes {
            minimum_bytes,
            preferred_bytes,
            maximum_bytes: max_request_bytes.max(preferred_bytes),
        }
    }
}

/// What the driver does after sending `reply_bytes`.
pub enum Next {
    Continue,
    Close,
    Transmit(Box<Session>),
}

pub struct Outcome {
    pub reply_bytes: Vec<u8>,
    pub next: Next,
}

impl Outcome {
    fn replies(replies: &[OptionReply], next: Next) -> Outcome {
        let reply_bytes = replies.iter().flat_map(OptionReply::encode).collect();
        Outcome { reply_bytes, next }
    }

    fn reply(reply: OptionReply) -> Outcome {
        Outcome::replies(&[reply], Next::Continue)
    }

    fn close() -> Outcome {
        Outcome { reply_bytes: Vec::new(), next: Next::Close }
    }
}

/// The transmission flags for `device`; DF only when structured replies are on.
pub fn transmission_flags(device: &dyn BlockDevice, structured_replies: bool) -> u16 {
    let mut flags =
        NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH | NBD_FLAG_SEND_CACHE | NBD_FLAG_CAN_MULTI_CONN;
    if device.read_only() {
        flags |= NBD_FLAG_READ_ONLY;
    } else {
        flags |= NBD_FLAG_SEND_FUA
            | NBD_FLAG_SEND_TRIM
            | NBD_FLAG_SEND_WRITE_ZEROES
            | NBD_FLAG_SEND_FAST_ZERO;
    }
    if structured_replies {
        flags |= NBD_FLAG_SEND_DF;
    }
    flags
}

/// Per-connection negotiation state.
pub struct Negotiation {
    provider: Arc<dyn ExportProvider>,
    max_request_bytes: u32,
    no_zeroes: bool,
    structured_replies: bool,
    /// Export name of the last successful NBD_OPT_SET_META_CONTEXT that selected
    /// base:allocation.
    meta_context_export: Option<String>,
}

impl Negotiation {
    pub fn new(
        provider: Arc<dyn ExportProvider>,
        max_request_bytes: u32,
        no_zeroes: bool,
    ) -> Negotiation {
        Negotiation {
            provider,
            max_request_bytes,
            no_zeroes,
            structured_replies: false,
            meta_context_export: None,
        }
    }

    /// Handles one option given its code and complete data.
    pub fn handle(&mut self, code: u32, data: &[u8]) -> Outcome {
        match ClientOption::parse(code, data) {
            Ok(option) => self.handle_option(code, option),
            // NBD_OPT_EXPORT_NAME cannot carry an error reply: the spec says hang up.
            Err(_) if code == NBD_OPT_EXPORT_NAME => Outcome::close(),
            Err(error) => Outcome::reply(parse_error_reply(code, &error)),
        }
    }

    /// The option's data exceeded our limit and was discarded unread.
    pub fn handle_oversized(&mut self, code: u32) -> Outcome {
        match code {
            NBD_OPT_EXPORT_NAME => Outcome::close(),
            _ => Outcome::reply(OptionReply::error(
                code,
                NBD_REP_ERR_TOO_BIG,
                "option data too large",
            )),
        }
    }

    /// The server is shutting down: refuse everything but a polite abort.
    pub fn handle_during_shutdown(&mut self, code: u32) -> Outcome {
        match code {
            NBD_OPT_ABORT => Outcome::replies(&[OptionReply::ack(code)], Next::Close),
            NBD_OPT_EXPORT_NAME => Outcome::close(),
            _ => Outcome::reply(OptionReply::error(
                code,
                NBD_REP_ERR_SHUTDOWN,
                "server is shutting down",
            )),
        }
    }

    fn handle_option(&mut self, code: u32, option: ClientOption) -> Outcome {
        match option {
            ClientOption::ExportName(name) => self.export_name(&name),
            ClientOption::Abort => Outcome::replies(&[OptionReply::ack(code)], Next::Close),
            ClientOption::List => Outcome::replies(&self.list(code), Next::Continue),
            ClientOption::Info(request) => self.info(code, &request, false),
            ClientOption::Go(request) => self.info(code, &request, true),
            ClientOption::StructuredReply => {
                self.structured_replies = true;
                Outcome::reply(OptionReply::ack(code))
            }
            ClientOption::ListMetaContext(request) => self.list_meta_context(code, &request),
            ClientOption::SetMetaContext(request) => self.set_meta_context(code, &request),
            ClientOption::Unknown(_) => Outcome::reply(OptionReply::error(
                code,
                NBD_REP_ERR_UNSUP,
                &format!("option {code} is not supported"),
            )),
        }
    }

    fn session(&self, name: &str, device: Arc<dyn BlockDevice>) -> Session {
        let block_sizes = BlockSizes::for_device(device.as_ref(), self.max_request_bytes);
        Session {
            export_name: name.to_owned(),
            transmission_flags: transmission_flags(device.as_ref(), self.structured_replies),
            structured_replies: self.structured_replies,
            base_allocation: self.structured_replies
                && self.meta_context_export.as_deref() == Some(name),
            block_sizes,
            device,
        }
    }

    fn export_name(&mut self, name: &str) -> Outcome {
        let Some(device) = self.provider.open(name) else {
            return Outcome::close();
        };
        let session = self.session(name, device);
        let reply_bytes = encode_export_name_reply(
            session.device.size_bytes(),
            session.transmission_flags,
            self.no_zeroes,
        );
        Outcome { reply_bytes, next: Next::Transmit(Box::new(session)) }
    }

    fn list(&self, code: u32) -> Vec<OptionReply> {
        let mut replies: Vec<OptionReply> = self
            .provider
            .list()
            .into_iter()
            .take(LIST_EXPORTS_MAX)
            .map(|info| OptionReply {
                option: code,
                reply_type: NBD_REP_SERVER,
                data: encode_rep_server(&info.name, &info.description),
            })
            .collect();
        replies.push(OptionReply::ack(code));
        replies
    }

    fn info(&mut self, code: u32, request: &InfoRequest, go: bool) -> Outcome {
        let Some(device) = self.provider.open(&request.name) else {
            let message = format!("unknown export {:?}", request.name);
            return Outcome::reply(OptionReply::error(code, NBD_REP_ERR_UNKNOWN, &message));
        };
        let session = self.session(&request.name, device);
        let mut infos = vec![
            InfoReply::Export {
                size_bytes: session.device.size_bytes(),
                transmission_flags: session.transmission_flags,
            },
            // Sent even when not asked for: the spec allows it, and clients that did
            // not ask are not bound by it.
            InfoReply::BlockSize {
                minimum_bytes: session.block_sizes.minimum_bytes,
                preferred_bytes: session.block_sizes.preferred_bytes,
                maximum_bytes: session.block_sizes.maximum_bytes,
            },
        ];
        infos.extend(self.requested_infos(&request.name, &request.info_requests));
        let mut replies: Vec<OptionReply> = infos
            .iter()
            .map(|info| OptionReply { option: code, reply_type: NBD_REP_INFO, data: info.encode() })
            .collect();
        replies.push(OptionReply::ack(code));
        let next = if go { Next::Transmit(Box::new(session)) } else { Next::Continue };
        Outcome::replies(&replies, next)
    }

    fn requested_infos(&self, name: &str, requested: &[u16]) -> Vec<InfoReply> {
        let mut infos = Vec::new();
        if requested.contains(&NBD_INFO_NAME) {
            let canonical = self.provider.canonical_name(name).unwrap_or_else(|| name.to_owned());
            infos.push(InfoReply::Name(canonical));
        }
        if requested.contains(&NBD_INFO_DESCRIPTION) {
            match self.provider.description(name) {
                Some(text) if !text.is_empty() => infos.push(InfoReply::Description(text)),
                _ => {}
            }
        }
        infos
    }

    fn list_meta_context(&mut self, code: u32, request: &MetaContextRequest) -> Outcome {
        if self.provider.open(&request.export_name).is_none() {
            let message = format!("unknown export {:?}", request.export_name);
            return Outcome::reply(OptionReply::error(code, NBD_REP_ERR_UNKNOWN, &message));
        }
        let matches = request.queries.is_empty()
            || request.queries.iter().any(|query| query == "base:" || query == BASE_ALLOCATION);
        let mut replies = Vec::new();
        if matches {
            // The id in a LIST reply is reserved: the spec says send zero.
            replies.push(OptionReply {
                option: code,
                reply_type: NBD_REP_META_CONTEXT,
                data: encode_rep_meta_context(0, BASE_ALLOCATION),
            });
        }
        replies.push(OptionReply::ack(code));
        Outcome::replies(&replies, Next::Continue)
    }

    fn set_meta_context(&mut self, code: u32, request: &MetaContextRequest) -> Outcome {
        // SET replaces the previous selection even when it fails.
        self.meta_context_export = None;
        if !self.structured_replies {
            let message = "NBD_OPT_STRUCTURED_REPLY must be negotiated first";
            return Outcome::reply(OptionReply::error(code, NBD_REP_ERR_INVALID, message));
        }
        if self.provider.open(&request.export_name).is_none() {
            let message = format!("unknown export {:?}", request.export_name);
            return Outcome::reply(OptionReply::error(code, NBD_REP_ERR_UNKNOWN, &message));
        }
        let mut replies = Vec::new();
        if request.queries.iter().any(|query| query == BASE_ALLOCATION) {
            self.meta_context_export = Some(request.export_name.clone());
            replies.push(OptionReply {
                option: code,
                reply_type: NBD_REP_META_CONTEXT,
                data: encode_rep_meta_context(BASE_ALLOCATION_CONTEXT_ID, BASE_ALLOCATION),
            });
        }
        replies.push(OptionReply::ack(code));
        Outcome::replies(&replies, Next::Continue)
    }
}

fn parse_error_reply(code: u32, error: &WireError) -> OptionReply {
    let reply_type = match error {
        WireError::TooMany { .. } => NBD_REP_ERR_TOO_BIG,
        _ => NBD_REP_ERR_INVALID,
    };
    OptionReply::error(code, reply_type, &error.to_string())
}
