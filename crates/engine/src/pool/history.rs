//! The pool's command history, as `zpool history`: every command that changed the pool, kept in
//! the store so it travels with the pool to whichever host imports it next.
//!
//! One small create-only object per event (objects are immutable; appending to one would need a
//! read-modify-write race with nobody to arbitrate it):
//! ```text
//! history/<time_ms:016x>-<rand:08x>
//! 0   u64  magic "FDHIST01"
//! 8   u32  version (1)
//! 12  u64  time_ms (wall clock)
//! 20  u64  txg published when the event was recorded
//! 28  str  host (u16 length + UTF-8)
//! ..  str  event: the command line, or what the daemon did ("import", "scrub finished ...")
//! end u64  xxh3_64 of everything before
//! ```
//! Keys sort by time, so listing is the history in order. The newest `HISTORY_KEPT` events are
//! kept; older ones are deleted when a new one is written. A history event that cannot be
//! written is logged and dropped: history never fails the command it describes.

use super::Inner;
use crate::codec::{verify_sealed, Reader, Writer};
use crate::error::{Error, Result};
use crate::objstore::{DynStore, PutMode};
use bytes::Bytes;

const MAGIC: &[u8; 8] = b"FDHIST01";
const VERSION: u32 = 1;
const PREFIX: &str = "history/";
/// Events kept in the store (a few hundred bytes each).
pub const HISTORY_KEPT: usize = 1000;
/// Longest event text stored (a command line with many devices fits easily).
const EVENT_BYTES_MAX: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HistoryEvent {
    pub time_ms: u64,
    pub txg: u64,
    pub host: String,
    pub event: String,
}

pub fn encode_event(e: &HistoryEvent) -> Vec<u8> {
    let mut w = Writer::with_capacity(64 + e.event.len());
    let mut text = e.event.clone();
    if text.len() > EVENT_BYTES_MAX {
        let mut cut = EVENT_BYTES_MAX;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    w.bytes(MAGIC).u32(VERSION).u64(e.time_ms).u64(e.txg).str(&e.host).str(&text).seal();
    w.buf
}

pub fn decode_event(buf: &[u8]) -> Result<HistoryEvent> {
    let body = verify_sealed(buf, "history event")?;
    let mut r = Reader::new(body, "history event");
    if r.bytes(8)? != MAGIC {
        return Err(Error::corrupt("history event", "bad magic"));
    }
    let version = r.u32()?;
    if version != VERSION {
        return Err(Error::corrupt("history event", format!("unknown version {version}")));
    }
    let e = HistoryEvent { time_ms: r.u64()?, txg: r.u64()?, host: r.str()?, event: r.str()? };
    if r.remaining() != 0 {
        return Err(Error::corrupt("history event", "trailing bytes"));
    }
    Ok(e)
}

/// Writes one event under a new key and trims the oldest beyond `HISTORY_KEPT` (also used by
/// `create`, before any daemon exists).
pub async fn write_history_event(store: &DynStore, e: &HistoryEvent, salt: u32) -> Result<()> {
    let key = format!("{PREFIX}{:016x}-{salt:08x}", e.time_ms);
    store.put(&key, Bytes::from(encode_event(e)), PutMode::Create).await?;
    let Ok(list) = store.list(PREFIX).await else { return Ok(()) };
    let mut keys: Vec<String> = list.into_iter().map(|(k, _)| k).collect();
    if keys.len() > HISTORY_KEPT {
        keys.sort();
        // Bounded: at most what is over the limit, which one event at a time keeps small.
        for key in &keys[..keys.len() - HISTORY_KEPT] {
            let _ = store.delete(key).await;
        }
    }
    Ok(())
}

pub fn this_host() -> String {
    hostname::get().map(|h| h.to_string_lossy().into_owned()).unwrap_or_else(|_| "unknown".into())
}

/// Records one event of an imported pool; failures are logged, never returned.
pub(crate) async fn record(inner: &Inner, event: &str) {
    if inner.health.lock().read_only_txg.is_some() {
        return; // A read-only import writes nothing to the store.
    }
    let e = HistoryEvent {
        time_ms: inner.env.clock.wall_ms(),
        txg: inner.meta.read().root.txg,
        host: this_host(),
        event: event.to_string(),
    };
    if let Err(err) = write_history_event(&inner.store, &e, inner.rng.next_u64() as u32).await {
        tracing::warn!(error = %err, event, "could not record the event in the pool history");
    }
}

/// The newest `limit` events of the pool in `store`, oldest first, without importing it (history
/// of an exported pool). An unreadable event is shown as such, not skipped.
pub async fn read_history(
    store: &dyn crate::objstore::Store,
    limit: usize,
) -> Result<Vec<HistoryEvent>> {
    let mut keys: Vec<String> = store.list(PREFIX).await?.into_iter().map(|(k, _)| k).collect();
    keys.sort();
    let skip = keys.len().saturating_sub(limit);
    let mut out = Vec::with_capacity(keys.len() - skip);
    for key in &keys[skip..] {
        let event = match store.get(key).await {
            Ok(b) => decode_event(&b).unwrap_or_else(|e| unreadable(key, &e.to_string())),
            Err(e) => unreadable(key, &e.to_string()),
        };
        out.push(event);
    }
    Ok(out)
}

fn unreadable(key: &str, why: &str) -> HistoryEvent {
    let time_ms = key
        .strip_prefix(PREFIX)
        .and_then(|k| k.split('-').next())
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .unwrap_or(0);
    HistoryEvent {
        time_ms,
        txg: 0,
        host: String::new(),
        event: format!("(unreadable history event {key}: {why})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_flipped_bit_is_caught() {
        let e = HistoryEvent {
            time_ms: 1_790_000_000_000,
            txg: 42,
            host: "db1".into(),
            event: "fardisk set compression=zstd tank".into(),
        };
        let buf = encode_event(&e);
        assert_eq!(decode_event(&buf).unwrap(), e);
        for bit in 0..buf.len() * 8 {
            let mut bad = buf.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_event(&bad).is_err(), "flipped bit {bit} went unnoticed");
        }
        assert!(decode_event(&buf[..buf.len() - 1]).is_err());
    }

    #[test]
    fn long_events_are_cut_at_a_char_boundary() {
        let e = HistoryEvent {
            time_ms: 1,
            txg: 1,
            host: "h".into(),
            event: "é".repeat(EVENT_BYTES_MAX),
        };
        let d = decode_event(&encode_event(&e)).unwrap();
        assert!(d.event.len() <= EVENT_BYTES_MAX && d.event.chars().all(|c| c == 'é'));
    }
}
