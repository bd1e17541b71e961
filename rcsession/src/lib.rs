//! The hipobj-rc-v2 RC session server (versitygw `rcserver`, docs/protocols.md
//! §3) and its client, written against [`Transport`](crate::transport::Transport).
//!
//! An S3-style gateway moves object data over RDMA RC: a client PREPAREs a
//! GET or PUT and gets a session with a server QP (and a staging region),
//! says READY with its own QP and memory region, and the data moves as one
//! RDMA WRITE with immediate (immediate = the session's cookie). The
//! server holds limits, times out and reaps abandoned sessions, never frees
//! memory the NIC may still touch, and never lets one principal reach
//! another's session.
//!
//! - [`SessionManager`]: the state chart, non-blocking (`ready` starts a
//!   data phase, `progress` finishes it), generic over the transport and the
//!   RNG session ids are drawn from.
//! - [`RcService`]: the manager behind a mutex, with TryEnter / Leave /
//!   Close and drain semantics, safe from any thread.
//! - [`RcClient`]: drives PREPARE and READY with its own QP and MR.
//! - [`Status`], [`ReadyOutcome`], [`RcError`]: the ABI's codes; each
//!   error maps to one status and one HTTP answer.
//! - The header codecs are in [`crate::hipobj`].
//!
//! It does not own HTTP, SigV4 or the object backend (the gateway does).

#![warn(missing_docs)]

use rctb_transport::{self as transport, time};

pub mod hipobj;

mod client;
mod config;
mod datapath;
pub mod inproc;
mod manager;
mod reaper;
mod service;
mod status;
mod types;

pub use crate::hipobj::{Op, PrincipalId, SessionId};
pub use client::{ClientConfig, ClientError, ClientTransfer, RcClient, TransferPhase};
pub use config::{DEFAULT_READY_SLOTS, DEFAULT_STAGE_SLOTS, Limits, ServerConfig};
pub use manager::{MAX_ETAG_LEN, SessionManager};
pub use service::{Admission, RcService};
pub use status::{LimitKind, RcError, ReadyOutcome, Status};
pub use types::*;

#[cfg(test)]
mod tests;
