//! rctb-wire: the RoCEv2 and RDMA CM wire formats. Decoders borrow from
//! the input (zero-copy) and return typed errors naming the field and the
//! rule; encoders append to a caller's buffer. Nothing here panics on
//! input: the decoders are fuzzed (`fuzz/`).
//!
//! The application codecs live with their applications: surf with the
//! RoCEv2 receive server (rctb-roce-rx), hipobj with the RC session
//! server (rctb-rcsession).

#![warn(missing_docs)]

use rctb_transport as transport;

pub mod cm;
pub mod roce;
