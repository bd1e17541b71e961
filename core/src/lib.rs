//! rctb-core: the pure part of rctb.
//!
//! It owns the [`transport::Transport`] trait and its value types, the wire
//! codecs ([`wire`]) and, as they land, the three applications written against
//! the trait. It does no I/O, reads no clock, draws no ambient randomness and
//! contains no `unsafe`: time comes from `Transport::now`, randomness from an
//! RNG the caller passes in.
//!
//! # Contract
//!
//! - **One interface.** Every application here ([`roce`]: the RoCEv2
//!   receive server; [`nvmeof`]: the NVMe-oF/RDMA initiator; [`rcsession`]:
//!   the hipobj-rc-v2 session server and client) is written once against
//!   [`Transport`] and runs unchanged on the simulator, udp and verbs.
//! - **Non-blocking step underneath, blocking helpers on top.** Each
//!   application has a step that never blocks (`RoceServer::poll`,
//!   `Controller::service` and the `submit_*` tickets, the session
//!   manager's `ready`, `progress` and `take_ready`) and says what to wait
//!   for next (the CQs and a deadline); the blocking helpers (`Controller::connect`, `read`, `close`, ...) are thin loops of
//!   that step and `Transport::wait`, so a blocking call costs nothing in
//!   the simulator's virtual time. Each module's docs give its call order.
//! - **Errors are typed and say who failed.** [`transport::TransportError`]
//!   is a local verb's misuse or failure and names the verb; a peer's
//!   failure arrives as a completion status; the applications' errors
//!   (`RoceError`, `NvmeError`, `RcError`) name the field and the rule for
//!   bad input. The wire codecs ([`wire`]) never panic on input: a bad
//!   frame is a typed decode error (they are fuzzed, `fuzz/`).

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
