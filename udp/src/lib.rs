//! rctb-udp: the `udp` backend. The simulator's RC engine (requester,
//! responder, memory regions and their access checks, timers) as a real
//! RoCEv2 peer on an ordinary UDP socket, port 4791: no RDMA device, no
//! kernel RDMA support, no `unsafe`.
//!
//! One implementation of RC, two clocks: the engine is `rctb_engine`'s
//! sans-IO `Endpoint`, one per bound address. For now the endpoints are
//! held by an `rctb_sim::Sim` in external mode (`Sim::set_external`) with
//! its clock set from real time and its frames carried by sockets (see
//! `reactor.rs`), because the scenario runner reaches them through
//! [`UdpReactor::world`].
//!
//! ```no_run
//! use rctb_udp::{UdpConfig, UdpReactor};
//! let reactor = UdpReactor::new(None);
//! let a = reactor.endpoint(UdpConfig::new("a", "127.0.0.1".parse().unwrap())).unwrap();
//! let b = reactor.endpoint(UdpConfig::new("b", "127.0.0.2".parse().unwrap())).unwrap();
//! # let _ = (a, b);
//! ```
//!
//! Kernel rxe accepts these frames: they are sent with `sendto()` on an
//! unconnected socket with `IP_MTU_DISCOVER = IP_PMTUDISC_DO`, so the kernel
//! writes IP ID 0 with DF, the IPv4 header the ICRC was computed over.
//! Received frames are read with their IPv4 header from a raw socket when the
//! process may open one ([`RawRx`]), and every ICRC is checked; bad frames
//! are dropped and counted ([`UdpStats`]). Connection setup is the
//! out-of-band hand-off an FPGA uses (QPN, PSN, GID): RDMA CM is not carried
//! (`cm_listen`/`cm_connect` return `Unsupported`).

mod config;
mod endpoint;
mod error;
pub mod mixed;
mod reactor;
mod stats;
mod transport;
pub mod wire;

pub use config::{Dir, Fate, PathHook, RawRx, UdpConfig};
pub use error::UdpError;
pub use stats::UdpStats;
pub use transport::{UdpReactor, UdpTransport};
