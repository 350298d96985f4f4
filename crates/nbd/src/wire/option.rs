//! Client options (the data after an option header) and the payloads of the server's
//! option replies (NBD_REP_SERVER, NBD_REP_INFO, NBD_REP_META_CONTEXT).
//!
//! ```text
//! NBD_OPT_INFO / NBD_OPT_GO data           NBD_OPT_{LIST,SET}_META_CONTEXT data
//!   u32 name length N                        u32 export name length N
//!   N   export name                          N   export name
//!   u16 number of info requests K            u32 number of queries Q
//!   K x u16 info request type                Q x (u32 length L, L bytes query)
//! ```

use super::consts::*;
use super::cursor::{put_string_u32, Cursor};
use super::error::WireError;

/// At most this many metadata-context queries are accepted in one option; more is
/// answered with NBD_REP_ERR_TOO_BIG (the protocol allows that).
pub const META_QUERIES_MAX: usize = 64;

/// Export name plus the list of information items asked for (NBD_OPT_INFO / NBD_OPT_GO).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest {
    pub name: String,
    pub info_requests: Vec<u16>,
}

/// Export name plus metadata-context queries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaContextRequest {
    pub export_name: String,
    pub queries: Vec<String>,
}

/// A client option decoded from its code and data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientOption {
    ExportName(String),
    Abort,
    List,
    Info(InfoRequest),
    Go(InfoRequest),
    StructuredReply,
    ListMetaContext(MetaContextRequest),
    SetMetaContext(MetaContextRequest),
    /// An option this server does not implement (answered with NBD_REP_ERR_UNSUP).
    Unknown(u32),
}

impl ClientOption {
    /// Decodes option `code` with its `data`. Errors mean "syntactically invalid" and
    /// are answered with NBD_REP_ERR_INVALID (or NBD_REP_ERR_TOO_BIG), never a panic.
    pub fn parse(code: u32, data: &[u8]) -> Result<ClientOption, WireError> {
        let option = match code {
            NBD_OPT_EXPORT_NAME => ClientOption::ExportName(Cursor::new(data).string(data.len())?),
            // The spec asks servers to ignore data sent with NBD_OPT_ABORT.
            NBD_OPT_ABORT => ClientOption::Abort,
            NBD_OPT_LIST => {
                Cursor::new(data).finish("NBD_OPT_LIST")?;
                ClientOption::List
            }
            NBD_OPT_INFO => ClientOption::Info(parse_info_request(data)?),
            NBD_OPT_GO => ClientOption::Go(parse_info_request(data)?),
            NBD_OPT_STRUCTURED_REPLY => {
                Cursor::new(data).finish("NBD_OPT_STRUCTURED_REPLY")?;
                ClientOption::StructuredReply
            }
            NBD_OPT_LIST_META_CONTEXT => ClientOption::ListMetaContext(parse_meta_request(data)?),
            NBD_OPT_SET_META_CONTEXT => ClientOption::SetMetaContext(parse_meta_request(data)?),
            other => ClientOption::Unknown(other),
        };
        Ok(option)
    }

    /// Encodes as (option code, data); the client side of `parse`.
    pub fn encode(&self) -> (u32, Vec<u8>) {
        match self {
            ClientOption::ExportName(name) => (NBD_OPT_EXPORT_NAME, name.as_bytes().to_vec()),
            ClientOption::Abort => (NBD_OPT_ABORT, Vec::new()),
            ClientOption::List => (NBD_OPT_LIST, Vec::new()),
            ClientOption::Info(request) => (NBD_OPT_INFO, encode_info_request(request)),
            ClientOption::Go(request) => (NBD_OPT_GO, encode_info_request(request)),
            ClientOption::StructuredReply => (NBD_OPT_STRUCTURED_REPLY, Vec::new()),
            ClientOption::ListMetaContext(request) => {
                (NBD_OPT_LIST_META_CONTEXT, encode_meta_request(request))
            }
            ClientOption::SetMetaContext(request) => {
                (NBD_OPT_SET_META_CONTEXT, encode_meta_request(request))
            }
            ClientOption::Unknown(code) => (*code, Vec::new()),
        }
    }
}

fn parse_info_request(data: &[u8]) -> Result<InfoRequest, WireError> {
    let mut cursor = Cursor::new(data);
    let name = cursor.string_u32()?;
    let count = cursor.u16()? as usize;
    if count * 2 != cursor.remaining_bytes() {
        return Err(WireError::Invalid("info request count does not match option length"));
    }
    let mut info_requests = Vec::with_capacity(count);
    for _ in 0..count {
        info_requests.push(cursor.u16()?);
    }
    cursor.finish("info request")?;
    Ok(InfoRequest { name, info_requests })
}

fn encode_info_request(request: &InfoRequest) -> Vec<u8> {
    let mut out = Vec::new();
    put_string_u32(&mut out, &request.name);
    out.extend_from_slice(&(request.info_requests.len() as u16).to_be_bytes());
    for info in &request.info_requests {
        out.extend_from_slice(&info.to_be_bytes());
    }
    out
}

fn parse_meta_request(data: &[u8]) -> Result<MetaContextRequest, WireError> {
    let mut cursor = Cursor::new(data);
    let export_name = cursor.string_u32()?;
    let count = cursor.u32()? as usize;
    // Each query needs at least its 4-byte length: reject counts the data cannot hold
    // before allocating anything.
    if count > cursor.remaining_bytes() / 4 {
        return Err(WireError::Invalid("query count exceeds option length"));
    }
    if count > META_QUERIES_MAX {
        return Err(WireError::TooMany {
            what: "metadata context query",
            count,
            max: META_QUERIES_MAX,
        });
    }
    let mut queries = Vec::with_capacity(count);
    for _ in 0..count {
        queries.push(cursor.string_u32()?);
    }
    cursor.finish("metadata context request")?;
    Ok(MetaContextRequest { export_name, queries })
}

fn encode_meta_request(request: &MetaContextRequest) -> Vec<u8> {
    let mut out = Vec::new();
    put_string_u32(&mut out, &request.export_name);
    out.extend_from_slice(&(request.queries.len() as u32).to_be_bytes());
    for query in &request.queries {
        put_string_u32(&mut out, query);
    }
    out
}

/// Payload of one NBD_REP_INFO reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InfoReply {
    Export {
        size_bytes: u64,
        transmission_flags: u16,
    },
    Name(String),
    Description(String),
    BlockSize {
        minimum_bytes: u32,
        preferred_bytes: u32,
        maximum_bytes: u32,
    },
    /// An information type this codec does not know (clients must ignore these).
    Unknown {
        info_type: u16,
        data: Vec<u8>,
    },
}

impl InfoReply {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            InfoReply::Export { size_bytes, transmission_flags } => {
                out.extend_from_slice(&NBD_INFO_EXPORT.to_be_bytes());
                out.extend_from_slice(&size_bytes.to_be_bytes());
                out.extend_from_slice(&transmission_flags.to_be_bytes());
            }
            InfoReply::Name(name) => {
                out.extend_from_slice(&NBD_INFO_NAME.to_be_bytes());
                out.extend_from_slice(name.as_bytes());
            }
            InfoReply::Description(text) => {
                out.extend_from_slice(&NBD_INFO_DESCRIPTION.to_be_bytes());
                out.extend_from_slice(text.as_bytes());
            }
            InfoReply::BlockSize { minimum_bytes, preferred_bytes, maximum_bytes } => {
                out.extend_from_slice(&NBD_INFO_BLOCK_SIZE.to_be_bytes());
                out.extend_from_slice(&minimum_bytes.to_be_bytes());
                out.extend_from_slice(&preferred_bytes.to_be_bytes());
                out.extend_from_slice(&maximum_bytes.to_be_bytes());
            }
            InfoReply::Unknown { info_type, data } => {
                out.extend_from_slice(&info_type.to_be_bytes());
                out.extend_from_slice(data);
            }
        }
        out
    }

    pub fn parse(data: &[u8]) -> Result<InfoReply, WireError> {
        let mut cursor = Cursor::new(data);
        let info_type = cursor.u16()?;
        let reply = match info_type {
            NBD_INFO_EXPORT => {
                InfoReply::Export { size_bytes: cursor.u64()?, transmission_flags: cursor.u16()? }
            }
            NBD_INFO_NAME => InfoReply::Name(cursor.string(cursor.remaining_bytes())?),
            NBD_INFO_DESCRIPTION => {
                InfoReply::Description(cursor.string(cursor.remaining_bytes())?)
            }
            NBD_INFO_BLOCK_SIZE => InfoReply::BlockSize {
                minimum_bytes: cursor.u32()?,
                preferred_bytes: cursor.u32()?,
                maximum_bytes: cursor.u32()?,
            },
            other => InfoReply::Unknown {
                info_type: other,
                data: cursor.take(cursor.remaining_bytes())?.to_vec(),
            },
        };
        cursor.finish("info reply")?;
        Ok(reply)
    }
}

/// Data of an NBD_REP_SERVER reply: name, then an optional human-readable description.
pub fn encode_rep_server(name: &str, description: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + name.len() + description.len());
    put_string_u32(&mut out, name);
    out.extend_from_slice(description.as_bytes());
    out
}

/// Parses NBD_REP_SERVER data into (name, description).
pub fn parse_rep_server(data: &[u8]) -> Result<(String, String), WireError> {
    let mut cursor = Cursor::new(data);
    let name = cursor.string_u32()?;
    let description = cursor.string(cursor.remaining_bytes())?;
    Ok((name, description))
}

/// Data of an NBD_REP_META_CONTEXT reply: context id, then the context name.
pub fn encode_rep_meta_context(context_id: u32, name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + name.len());
    out.extend_from_slice(&context_id.to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    out
}

/// Parses NBD_REP_META_CONTEXT data into (context id, name).
pub fn parse_rep_meta_context(data: &[u8]) -> Result<(u32, String), WireError> {
    let mut cursor = Cursor::new(data);
    let context_id = cursor.u32()?;
    let name = cursor.string(cursor.remaining_bytes())?;
    Ok((context_id, name))
}
