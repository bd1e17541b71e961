//! The RoCEv2 RC receive server (rogue `RoCEv2Server` parity), written
//! against [`Transport`](crate::transport::Transport).
//!
//! This crate owns the host side of docs/protocols.md §1: the validated
//! configuration ([`ServerConfig`], [`TransportConfig`]), the server's
//! lifecycle (create -> host parameters -> complete connection -> frames ->
//! stop), the receive path with zero-copy [`Frame`] handles and their
//! back-pressure, the counters and the 15 status fields. The FPGA side (the
//! surf metadata bus engine) is modelled in `rctb-models` (`rctb_models::fpga`); its register format is
//! [`crate::surf`]. GID index detection from sysfs belongs to `rctb-hw`;
//! [`detect_gid_index`] applies the same rule to a transport's port facts.

#![warn(missing_docs)]

use rctb_transport::{self as transport, time};

pub mod surf;

mod config;
pub mod prbs;
mod server;
mod types;

pub use config::{GidIndex, MAX_RX_QUEUE_DEPTH, ServerConfig, ServerConfigBuilder, TransportConfig};
pub use prbs::{prbs, prbs_check, prbs_fill};
pub use server::{RoceServer, detect_gid_index};
pub use types::{Channel, Frame, HostParams, RoceError, RxCounters, Status};

#[cfg(test)]
mod tests;
