//! Seeded randomness (`fardisk-common`'s [`Rng`]): crash tests and generated identifiers are
//! reproducible; nothing in this crate reads an ambient random source.

pub use fardisk_common::rng::Rng;
