//! The daemon's answer to a request: data, or an error with the engine's `ErrorKind`, so the CLI
//! can tell "fenced" from "retry later", bad input, damaged data and a bug. On the wire:
//! `{"ok": true, "data": ...}` or `{"ok": false, "error": "...", "kind": "fenced"}`.

use fardisk_engine::ErrorKind;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A failed request: what went wrong, in one line, and what kind of failure it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlError {
    pub kind: ErrorKind,
    pub message: String,
}

impl std::fmt::Display for ControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ControlError {}

impl ControlError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ControlError {
        ControlError { kind, message: message.into() }
    }

    pub fn bad_input(message: impl Into<String>) -> ControlError {
        ControlError::new(ErrorKind::BadInput, message)
    }

    /// An error of the daemon's own (labelling a device, a task that died): the kind of the
    /// first error in the chain that has one (a `fardisk_engine::Error` or a `ControlError`),
    /// else `fallback`.
    pub fn from_anyhow(e: &anyhow::Error, fallback: ErrorKind) -> ControlError {
        let kind = e
            .chain()
            .find_map(|c| {
                if let Some(e) = c.downcast_ref::<fardisk_engine::Error>() {
                    return Some(e.kind());
                }
                c.downcast_ref::<ControlError>().map(|e| e.kind)
            })
            .unwrap_or(fallback);
        ControlError::new(kind, one_line(e))
    }
}

impl From<fardisk_engine::Error> for ControlError {
    fn from(e: fardisk_engine::Error) -> ControlError {
        ControlError::new(e.kind(), e.to_string())
    }
}

/// The whole error chain on one line, most specific cause last.
pub fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in e.chain() {
        let s = c.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
    }
    parts.join(": ").replace('\n', " ")
}

/// The wire form of an answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    #[serde(default)]
    pub data: Value,
    #[serde(default)]
    pub error: String,
    /// Absent on success, and from daemons that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ErrorKind>,
}

/// The kind of a failure a daemon reported without one (it predates `kind`).
const KIND_UNREPORTED: ErrorKind = ErrorKind::Unavailable;

impl Reply {
    pub fn from_result(result: Result<Value, ControlError>) -> Reply {
        match result {
            Ok(data) => Reply { ok: true, data, error: String::new(), kind: None },
            Err(e) => Reply { ok: false, data: Value::Null, error: e.message, kind: Some(e.kind) },
        }
    }

    pub fn into_result(self) -> Result<Value, ControlError> {
        if self.ok {
            Ok(self.data)
        } else {
            Err(ControlError::new(self.kind.unwrap_or(KIND_UNREPORTED), self.error))
        }
    }
}
