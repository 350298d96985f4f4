//! Block compression. Blocks are compressed one by one so any block can be read with one ranged GET;
//! a block that does not shrink is stored as is (like ZFS, which keeps compression only when it
//! saves at least 12.5 %).

use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    Off = 0,
    Lz4 = 1,
    Zstd = 2,
}

impl Compression {
    pub fn from_u8(v: u8) -> Result<Compression> {
        match v {
            0 => Ok(Compression::Off),
            1 => Ok(Compression::Lz4),
            2 => Ok(Compression::Zstd),
            _ => Err(Error::corrupt("block pointer", format!("unknown compression {v}"))),
        }
    }
    pub fn parse(s: &str) -> Result<Compression> {
        match s {
            "off" | "none" => Ok(Compression::Off),
            "lz4" | "on" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd),
            _ => Err(Error::BadInput(format!("compression must be off, lz4 or zstd, not '{s}'"))),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Compression::Off => "off",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

const ZSTD_LEVEL: i32 = 3;

/// Compresses `data`; returns the algorithm actually used (Off when it does not pay) and the bytes.
pub fn compress(algo: Compression, data: &[u8]) -> (Compression, Vec<u8>) {
    let packed = match algo {
        Compression::Off => None,
        Compression::Lz4 => Some(lz4_flex::block::compress(data)),
        Compression::Zstd => zstd::bulk::compress(data, ZSTD_LEVEL).ok(),
    };
    match packed {
        Some(p) if p.len() + p.len() / 8 < data.len() => (algo, p),
        _ => (Compression::Off, data.to_vec()),
    }
}

/// Decompresses to exactly `logical_bytes`; any other size is corruption.
pub fn decompress(algo: Compression, data: &[u8], logical_bytes: usize) -> Result<Vec<u8>> {
    let out = match algo {
        Compression::Off => data.to_vec(),
        Compression::Lz4 => lz4_flex::block::decompress(data, logical_bytes)
            .map_err(|e| Error::corrupt("lz4 block", e.to_string()))?,
        Compression::Zstd => zstd::bulk::decompress(data, logical_bytes)
            .map_err(|e| Error::corrupt("zstd block", e.to_string()))?,
    };
    if out.len() != logical_bytes {
        return Err(Error::corrupt(
            "block",
            format!("decompressed to {} bytes, expected {logical_bytes}", out.len()),
        ));
    }
    Ok(out)
}
