//! The process exit status of a failed command, by the kind of failure, so a script can tell
//! "another host owns the pool" from "try again later" without parsing the message.
//!
//! | status | meaning |
//! |---|---|
//! | 1 | any other failure (including CLI-side checks that carry no kind) |
//! | 2 | bad input: fix the command or the configuration (clap's usage errors are 2 as well) |
//! | 3 | `scrub -w` found errors it could not repair (scrub_cmds.rs) |
//! | 4 | fenced: another importer owns the pool; this host must not write |
//! | 5 | stored data failed verification (nothing wrong was returned): run `fardisk scrub` |
//! | 69 | unavailable: a device, the store or a capability the pool needs is missing (EX_UNAVAILABLE) |
//! | 70 | an invariant broke: a bug in fardisk, please report it (EX_SOFTWARE) |
//! | 75 | transient (store outage past the retry budget, throttled): retry later (EX_TEMPFAIL) |

use crate::control::error_kind;
use fardisk_engine::ErrorKind;

/// The exit status for `e` (see the module table).
pub fn for_error(e: &anyhow::Error) -> i32 {
    match error_kind(e) {
        None => 1,
        Some(kind) => for_kind(kind),
    }
}

pub const fn for_kind(kind: ErrorKind) -> i32 {
    match kind {
        ErrorKind::BadInput => 2,
        ErrorKind::Fenced => 4,
        ErrorKind::DataDamaged => 5,
        ErrorKind::Unavailable => 69,
        ErrorKind::Bug => 70,
        ErrorKind::RetryLater => 75,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{ControlError, Reply};

    #[test]
    fn a_daemon_reply_keeps_its_kind_through_the_cli_context() {
        let sent = Reply::from_result(Err(ControlError::new(ErrorKind::Fenced, "epoch 4 seen")));
        let wire = serde_json::to_string(&sent).expect("encode");
        let reply: Reply = serde_json::from_str(&wire).expect("decode");
        let e = anyhow::Error::from(reply.into_result().unwrap_err());
        let e = e.context("fardisk sync tank");
        assert_eq!(for_error(&e), 4);
    }

    #[test]
    fn an_engine_error_maps_by_its_kind_and_a_plain_error_is_1() {
        let e = anyhow::Error::from(fardisk_engine::Error::BadInput("no such property".into()));
        assert_eq!(for_error(&e), 2);
        assert_eq!(for_error(&anyhow::anyhow!("could not read the config file")), 1);
    }

    #[test]
    fn every_kind_has_its_own_status_and_none_is_a_reserved_one() {
        let kinds = [
            ErrorKind::RetryLater,
            ErrorKind::BadInput,
            ErrorKind::DataDamaged,
            ErrorKind::Fenced,
            ErrorKind::Unavailable,
            ErrorKind::Bug,
        ];
        let mut codes: Vec<i32> = kinds.iter().map(|k| for_kind(*k)).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), kinds.len(), "two kinds share a status");
        assert!(!codes.contains(&0) && !codes.contains(&1) && !codes.contains(&3));
    }
}
