//! rctb-engine: the RoCEv2 RC protocol engine, sans-IO (in the manner of
//! quinn-proto). One [`Endpoint`] per node holds its verbs resources
//! (protection domains, memory regions and their access checks, CQs, QPs
//! and their states), the RC requester and responder of every QP, and the
//! RDMA CM state machines. It reads no clock, opens no socket and owns no
//! randomness: the time comes with every call, and the random numbers it
//! needs (memory keys, CM starting PSNs) come from an RNG its owner gives it.
//!
//! # Contract
//!
//! - **Inputs**: [`Endpoint::handle_packet`]`(now, packet)` for every RoCEv2
//!   packet addressed to the endpoint (ICRC already checked by the owner;
//!   CM MADs for QP1 included), [`Endpoint::handle_cm`]`(now, from,
//!   message)` for every CM message an owner carries as a value,
//!   [`Endpoint::handle_timeout`]`(now)` when the time from
//!   [`Endpoint::poll_timeout`] has come.
//! - **Commands**: the verbs (`reg_mr`, `create_qp`, `modify_qp`,
//!   `post_send`, `post_recv`, `poll_cq`, `cm_connect`, ...), methods of
//!   [`Endpoint`]; the ones that start protocol work take `now`.
//! - **Outputs**, after every input or command, in this order: the CM
//!   messages, [`Endpoint::poll_cm_transmit`] (values) or
//!   [`Endpoint::poll_cm_packet`] (QP1 packets) until `None`;
//!   [`Endpoint::poll_transmit`] while the wire takes packets; then
//!   [`Endpoint::poll_timeout`] to arm the owner's single timer.
//!   Completions wait in CQs (`poll_cq`), CM events in
//!   [`Endpoint::poll_cm_event`].
//! - **What blocks**: nothing. An owner that is late loses nothing: packets
//!   not yet polled stay in their QPs, and a late timer fires once.
//! - **Errors**: the verbs fail with `rctb_core::TransportError`, each naming
//!   the verb and, for a bad argument, the field and the rule; a failed verb
//!   changes nothing. [`Endpoint::handle_packet`] fails only with
//!   [`PacketDrop::NoSuchQp`] (no QP has the destination QPN) or
//!   [`PacketDrop::BadMad`] (a QP1 packet whose MAD is not CM); a packet a
//!   QP cannot take (wrong state, wrong source, bad PSN) is dropped or
//!   answered with a NAK as IBA says, and counted, never an error; a CM
//!   message that fits no connection is counted, a REQ that cannot be
//!   served is answered with a REJ. Protocol failures
//!   reach the application as completions with an error status.
//!
//! Two owners drive it: `rctb-sim` (virtual time, simulated links, faults,
//! pcap) and `rctb-udp`'s reactor (real time, one endpoint per UDP socket
//! on port 4791). `tests/late_owner.rs` holds the late-owner promises above
//! to a host that stalls.
//!
//! # Module map
//!
//! - [`endpoint`](Endpoint): the per-node state, packet and timer inputs,
//!   transmit and timer outputs (`endpoint.rs`).
//! - `verbs.rs`: the verbs as endpoint methods, with the device limits.
//! - [`cm`]: RDMA CM messages, connection states and their retransmission
//!   timers (REQ/MRA/REP/RTU/REJ/DREQ/DREP); [`cm::mad`] their MADs and
//!   QP1 packets.
//! - [`rc`]: one queue pair's requester and responder (`rc/requester.rs`,
//!   `rc/responder.rs`).
//! - `memory.rs`: registered regions, key and bound checks, gather/scatter.
//! - [`packet`](Packet): a RoCEv2 packet with its headers decoded, and the
//!   UDP source port rule.
//! - `idmap.rs`: dense id-indexed maps for the per-packet lookups.

pub mod cm;
mod endpoint;
#[doc(hidden)]
pub mod fuzzing;
mod idmap;
mod memory;
mod packet;
pub mod rc;
mod verbs;

pub use cm::{CM_MAX_RETRIES, CM_QP_TIMEOUT, CM_RESPONSE_TIMEOUT, CM_TIMEOUT, CmMessage, CmTransmit, cm_time};
pub use endpoint::{Endpoint, EndpointConfig, EndpointCounters, PacketDrop, Resources, Transmit};
pub use packet::{OUTER_HEADERS_LEN, Packet, udp_src_port};
pub use verbs::{MAX_CQE, MAX_MR_SIZE, MAX_QP_WR, MAX_SGE};
