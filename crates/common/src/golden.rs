//! Golden fixtures of the stored formats: committed bytes that today's decoder must read and
//! today's encoder must reproduce (`crates/*/tests/golden_formats.rs`, fixtures in
//! `crates/*/tests/fixtures/`). For the tests only; it lives here so the three crates share one
//! copy.
//!
//! Fixtures are made once, by the ignored test `regenerate_fixtures` of each crate, run with
//! `FARDISK_REGENERATE_FIXTURES=1`; it only creates files that do not exist. A committed fixture
//! is never rewritten: a format change gets a new version and a new fixture beside the old one
//! (whose decoder must keep reading it, or refuse it by version).

use std::path::PathBuf;

/// The environment variable that lets `regenerate_fixtures` write missing fixtures.
pub const REGENERATE_ENV: &str = "FARDISK_REGENERATE_FIXTURES";

/// A directory of fixtures.
#[derive(Debug, Clone)]
pub struct Fixtures {
    dir: PathBuf,
}

impl Fixtures {
    pub fn new(dir: impl Into<PathBuf>) -> Fixtures {
        Fixtures { dir: dir.into() }
    }

    /// The committed bytes of fixture `name`; panics with what to do when it is missing.
    pub fn read(&self, name: &str) -> Vec<u8> {
        let path = self.dir.join(name);
        std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "fixture {}: {e}; fixtures are committed (a new one is made by \
                 {REGENERATE_ENV}=1 cargo test ... -- --ignored regenerate_fixtures)",
                path.display()
            )
        })
    }

    /// Whether the regeneration run was asked for (`FARDISK_REGENERATE_FIXTURES=1`).
    pub fn regenerating() -> bool {
        std::env::var(REGENERATE_ENV).is_ok_and(|v| v == "1")
    }

    /// Writes fixture `name` if it does not exist yet; returns whether it wrote it. An existing
    /// fixture is left alone even when `bytes` differ: the test that compares them says so.
    pub fn create(&self, name: &str, bytes: &[u8]) -> std::io::Result<bool> {
        std::fs::create_dir_all(&self.dir)?;
        let path = self.dir.join(name);
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut f) => {
                std::io::Write::write_all(&mut f, bytes)?;
                f.sync_all()?;
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl Fixtures {
    /// The body of each crate's ignored `regenerate_fixtures` test: writes every fixture in `all`
    /// (name, today's bytes) that does not exist yet, never overwriting one.
    pub fn regenerate_missing<N: AsRef<str>>(&self, all: impl IntoIterator<Item = (N, Vec<u8>)>) {
        assert!(Self::regenerating(), "set {REGENERATE_ENV}=1 to write fixtures");
        for (name, bytes) in all {
            let name = name.as_ref();
            if self.create(name, &bytes).expect("write fixture") {
                eprintln!("wrote tests/fixtures/{name} ({} bytes)", bytes.len());
            }
        }
    }

    /// Asserts that every committed fixture in `all` is exactly what today's encoder writes.
    pub fn assert_unchanged<N: AsRef<str>>(&self, all: impl IntoIterator<Item = (N, Vec<u8>)>) {
        for (name, bytes) in all {
            let name = name.as_ref();
            let committed = self.read(name);
            assert!(
                committed == bytes,
                "tests/fixtures/{name} differs from what today's encoder writes ({} vs {} bytes): \
                 a format change needs a new version, not an edited fixture",
                committed.len(),
                bytes.len()
            );
        }
    }
}

/// `bytes` with bit `bit` of byte `at` flipped (a rotten bit).
pub fn flip_bit(bytes: &[u8], at: usize, bit: u8) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out[at] ^= 1 << (bit % 8);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_never_overwrites_and_read_returns_the_bytes() {
        let dir = std::env::temp_dir().join(format!("fardisk-golden-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let f = Fixtures::new(&dir);
        assert!(f.create("a.bin", b"one").expect("create"));
        assert!(!f.create("a.bin", b"two").expect("create again"), "never overwritten");
        assert_eq!(f.read("a.bin"), b"one");
        assert_eq!(flip_bit(b"\x00\x01", 1, 1), b"\x00\x03");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
