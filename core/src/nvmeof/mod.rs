//! NVMe over Fabrics on RDMA: the host (initiator) side, generic over
//! [`crate::Transport`].
//!
//! - [`protocol`]: every wire layout of PROTOCOLS.md §2 (pure codecs).
//! - [`queue`]: one NVMe/RDMA queue (CM connect with private data, capsule
//!   and response slots, command ids, submit / poll / execute, timeouts).
//! - [`controller`]: bring-up, I/O queues, namespaces, read / write / flush
//!   on registered memory, keep-alive, and the discovery client.
//!
//! Everything runs in the transport's time: on the simulator a 30 s
//! timeout costs nothing, and a dropped response is a typed error, never a
//! hang.

pub mod controller;
mod error;
pub mod protocol;
pub mod queue;

pub use controller::{Buffer, Controller, ControllerConfig, GpuFlush, MemoryKind, Namespace, Ticket, discover};
pub use error::NvmeError;
pub use queue::{Queue, QueueConfig};
