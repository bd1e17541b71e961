//! NVMe over Fabrics on RDMA: the host (initiator) side, generic over
//! [`Transport`](rctb_transport::Transport).
//!
//! - [`protocol`]: every wire layout of docs/protocols.md §2 (pure codecs).
//! - [`queue`]: one NVMe/RDMA queue (CM connect with private data, capsule
//!   and response slots, command ids, submit / poll / execute, timeouts).
//! - [`controller`]: the polled bring-up state machine ([`ControllerState`]),
//!   I/O queues, namespaces, read / write / flush and tickets on registered
//!   memory, keep-alive, and the discovery client ([`Discovery`]).
//!
//! Call order: `Controller::start` then `service` until `Ready` (or the
//! blocking `Controller::connect`, the same loop), I/O, `close`. Nothing
//! blocks but the helpers that say so, and they block only in the
//! transport's time.
//!
//! Everything runs in the transport's time: on the simulator a 30 s
//! timeout costs nothing, and a dropped response is a typed error, never a
//! hang.

#![warn(missing_docs)]

use rctb_transport::{self as transport, time};

pub mod controller;
mod error;
pub mod protocol;
pub mod queue;

pub use controller::{
    Buffer, Controller, ControllerConfig, ControllerState, Discovery, GpuFlush, MemoryKind, Namespace, Ticket, discover,
};
pub use error::{ConnectError, NvmeError};
pub use queue::{Queue, QueueConfig};
