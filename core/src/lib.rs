//! rctb-core: the pure part of rctb.
//!
//! It owns the [`transport::Transport`] trait and its value types, the wire
//! codecs ([`wire`]) and, as they land, the three applications written against
//! the trait. It does no I/O, reads no clock, draws no ambient randomness and
//! contains no `unsafe`: time comes from `Transport::now`, randomness from an
//! RNG the caller passes in.

#[doc(hidden)]
pub mod fuzzing;
pub mod nvmeof;
pub mod rcsession;
pub mod roce;
pub mod time;
pub mod transport;
pub mod wire;

pub use time::{Duration, Instant};
pub use transport::Transport;
