//! Human sizes: `8G`, `512M`, `4096` in, `8.0G` out (powers of 1024, as zfs prints them). The
//! parser is the engine's (`fardisk_engine::size`), the same that reads size properties such as
//! `-o arc_max=16M`.

use anyhow::{bail, Result};
use fardisk_engine::size::{SizeError, SIZE_SUFFIXES};

pub use fardisk_engine::size::human;

/// A size argument (`volume create tank/pg 8G`).
pub fn parse_size(s: &str) -> Result<u64> {
    match fardisk_engine::size::parse_size(s) {
        Ok(bytes) => Ok(bytes),
        Err(SizeError::NotANumber) => {
            bail!("size '{s}': expected a number with an optional {SIZE_SUFFIXES} suffix")
        }
        Err(SizeError::UnknownUnit(unit)) => {
            bail!("size '{s}': unknown unit '{unit}' (use {SIZE_SUFFIXES})")
        }
        Err(SizeError::TooLarge) => bail!("size '{s}' is too large"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn sizes() {
        assert_eq!(parse_size("8G").expect("valid"), 8 << 30);
        assert_eq!(parse_size("4096").expect("valid"), 4096);
        assert_eq!(parse_size("1.5k").expect("valid"), 1536);
        assert!(parse_size("12Q").is_err());
        assert_eq!(human(3 << 30), "3.0G");
    }
}
