//! What the engine (`fardisk-engine`), the intent log (`fardisk-slog`) and the caches
//! (`fardisk-arc`) share, so each exists once:
//!
//! * [`clock`]: injected time. Library code reads time and sleeps only through a [`Clock`]; the
//!   [`SystemClock`] is the one place real time enters, and a [`ManualClock`] lets tests and the
//!   simulation drive every crate's time from one source.
//! * [`rng`]: seeded randomness ([`Rng`], SplitMix64), so a seed replays.
//! * [`le`]: the explicit-width little-endian codec and the checksum (xxh3-64) of every stored
//!   format. Reading never panics: a short buffer is an error.
//! * [`malloc`]: the C allocator's settings the daemon and its benchmarks run with.
//!
//! The rules these serve are in docs/design/0000-rules.md (rule 3: verify before use; the
//! injected environment makes the simulation replay).

pub mod clock;
pub mod golden;
pub mod le;
pub mod malloc;
pub mod rng;

pub use clock::{timeout, Clock, ManualClock, SystemClock};
pub use le::{checksum64, checksum64_parts, CodecError, Reader, Writer};
pub use rng::Rng;
