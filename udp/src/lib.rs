//! rctb-udp: the `udp` backend. The RC engine of `rctb_engine` (requester,
//! responder, memory regions and their access checks, timers) as a real
//! RoCEv2 peer on an ordinary UDP socket, port 4791: no RDMA device, no
//! kernel RDMA support, no `unsafe`.
//!
//! # Contract
//!
//! - **Call order**: make a [`UdpReactor`], bind endpoints on it
//!   ([`UdpReactor::endpoint`], or [`UdpTransport::bind`] for an endpoint
//!   with a reactor of its own), then use each [`UdpTransport`] as any
//!   `rctb_core::Transport`: PD, MR, CQ, QP, the RESET→INIT→RTR→RTS
//!   transitions with the peer's QPN, PSN and GID exchanged out of band,
//!   `post_send`/`post_recv`, `poll_cq` or `wait`.
//! - **Who moves the engines**: one reactor holds one sans-IO
//!   `rctb_engine::Endpoint` per bound address, and runs all of them
//!   whenever it runs ([`UdpReactor::turn`]: read the sockets, fire the
//!   timers that fell due, send what the engines hand over). A
//!   `UdpTransport` runs it after every verb that makes frames, in
//!   `poll_cq` on an empty CQ, and in `wait`; so two endpoints in one
//!   thread answer each other while the caller waits on either. Code that
//!   runs the reactor itself (the scenario runner) takes
//!   [`UdpTransport::undriven`] handles and calls [`UdpReactor::turn`] and
//!   [`UdpReactor::block`]. A reactor is single-threaded (`Rc`): one per
//!   thread.
//! - **What blocks**: only `wait` and [`UdpReactor::block`], in `poll(2)`
//!   on the endpoints' sockets until a frame arrives, an engine timer is
//!   due or the deadline passes. Nothing spins; every other call returns
//!   without waiting. Time is the real clock (`std::time::Instant`, read
//!   here and passed to the engine, which reads none).
//! - **Errors**: binding fails with [`UdpError`] naming what failed (a bad
//!   field and its rule, the address that cannot be bound, the socket
//!   option or network namespace); the verbs fail as the engine's do
//!   (`TransportError` naming the verb, and for a bad argument the field
//!   and the rule); a socket error that is not transient fails the call
//!   that ran the reactor with `TransportError::Os`. A lost, refused or
//!   damaged frame is no error: it is counted ([`UdpStats`]) and RC
//!   recovers as from any loss.
//! - **RDMA CM**: `cm_listen`, `cm_connect`, `cm_accept`, `cm_reject` and
//!   `cm_disconnect` speak the IB CM on QP1 as RDMA CM does on RoCEv2 (UD
//!   SENDs with the GSI's Q_Key carrying REQ, MRA, REP, RTU, REJ, DREQ and
//!   DREP MADs, an IP service id and the CMA header), so either side may be
//!   another rctb or the kernel's `rdma_cm` on rxe or a NIC. The engine
//!   sends an unanswered MAD again and answers duplicates, so a lossy path
//!   delays a connection rather than breaking it; what it did is in
//!   [`UdpTransport::engine_counters`]. QPs may still be connected by hand
//!   (QPN, PSN and GID exchanged out of band), as the FPGA does.
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
//! are dropped and counted ([`UdpStats`]) before the engine sees them.
//!
//! # Module map
//!
//! - `transport.rs`: [`UdpReactor`] and [`UdpTransport`] (the verbs over
//!   the engine).
//! - `reactor.rs`: the loop over the engines, the sockets and the clock
//!   (`reactor/rx.rs` the receiving side, `reactor/tx.rs` the sending
//!   side, `reactor/access.rs` what the owner reads and sets).
//! - `endpoint.rs`: one endpoint's sockets (UDP, raw, network namespace).
//! - [`wire`]: engine packets to datagrams and back, the ICRC check.
//! - `config.rs`: [`UdpConfig`] and the path hook ([`Dir`], [`Fate`]).
//! - [`mixed`]: a UDP endpoint against another backend in one thread.
//! - `stats.rs`, `pcap.rs`, `rng.rs`, `error.rs`: counters, the capture,
//!   the seeded keys and loss draws, the setup errors.

#![warn(missing_docs)]

mod config;
mod endpoint;
mod error;
pub mod faults;
pub mod mixed;
mod pcap;
pub mod progress;
mod reactor;
mod rng;
mod stats;
mod transport;
pub mod wire;

pub use config::{Dir, Fate, PathHook, RawRx, UdpConfig};
pub use error::UdpError;
pub use rctb_engine::{EndpointCounters, Packet};
pub use reactor::Driver;
pub use stats::{EngineStats, UdpStats};
pub use transport::{UdpReactor, UdpTransport};
