//! rctb-core: the pure part of rctb.
//!
//! It owns the [`transport::Transport`] trait and its value types, the wire
//! codecs ([`wire`]) and, as they land, the three applications written against
//! the trait. It does no I/O, reads no clock, draws no ambient randomness and
//! contains no `unsafe`: time comes from `Transport::now`, randomness from an
//! RNG the caller passes in.
//!
//! ```
//! // The wire codecs: an NVMe/RDMA Read capsule, built, encoded and decoded.
//! use rctb_core::nvmeof::protocol::{NvmeCommand, QueueKind, Sgl};
//!
//! let sgl = Sgl::keyed(0x1000, 4096, 0x1234).unwrap(); // the host's buffer
//! let read = NvmeCommand::read(1, 8, 8, sgl).unwrap(); // nsid 1, 8 blocks from 8
//! let bytes = read.to_command(7).encode(); // 64 bytes, command id 7
//! assert_eq!(NvmeCommand::decode(&bytes, QueueKind::Io).unwrap(), (7, read));
//! // Bad input is a typed error naming the field and the rule.
//! let e = NvmeCommand::read(1, 0, 0, Sgl::None).unwrap_err();
//! assert!(e.to_string().contains("blocks"), "{e}");
//! ```
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

#![warn(missing_docs)]

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod wire;

pub use rctb_nvmeof as nvmeof;
pub use rctb_rcsession as rcsession;
pub use rctb_roce_rx as roce;
pub use rctb_transport::{self as transport, time};

pub use time::{Duration, Instant};
pub use transport::Transport;
