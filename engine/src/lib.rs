//! rctb-engine: the RoCEv2 RC protocol engine, sans-IO (in the manner of
//! quinn-proto). One [`Endpoint`] per node holds its verbs resources
//! (protection domains, memory regions and their access checks, CQs, QPs
//! and their states), the RC requester and responder of every QP, and the
//! RDMA CM state machines. It reads no clock, opens no socket and owns no
//! randomness: the time comes with every call, and the random numbers it
//! needs (memory keys, CM starting PSNs) come from an RNG its owner gives it.
//!
//! ```
//! // Two endpoints, a connected QP pair, one SEND; the loop is the wire.
//! use rand_chacha::ChaCha8Rng;
//! use rand_core::SeedableRng;
//! use rctb_core::time::Instant;
//! use rctb_core::transport::*;
//! use rctb_engine::{Endpoint, EndpointConfig};
//!
//! let ips = ["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()];
//! let mut eps: Vec<Endpoint> = (0..2)
//!     .map(|i| Endpoint::new(EndpointConfig::new(format!("n{i}"), ips[i]), Box::new(ChaCha8Rng::seed_from_u64(i as u64))))
//!     .collect();
//! let (now, mut res) = (Instant::ZERO, Vec::new());
//! for ep in &mut eps {
//!     let pd = ep.alloc_pd().unwrap();
//!     let cq = ep.create_cq(16).unwrap();
//!     let mr = ep.reg_mr(pd, 4096, Access::LOCAL_WRITE).unwrap();
//!     let qp = ep.create_qp(&QpInit { pd, send_cq: cq, recv_cq: cq, caps: QpCaps::default(), sq_sig_all: true, srq: None }).unwrap();
//!     res.push((cq, mr, qp));
//! }
//! for i in 0..2 {
//!     let (peer, qp) = (res[1 - i].2.qpn, res[i].2.id);
//!     let init = InitAttr { pkey_index: 0, port: 1, access: Access::LOCAL_WRITE };
//!     eps[i].modify_qp(now, qp, &QpTransition::Init(init)).unwrap();
//!     let av = AddressVector::new(Gid::from_ipv4(ips[1 - i]), 1);
//!     let rtr = RtrAttr { path_mtu: Mtu::Mtu1024, dest_qpn: peer, rq_psn: Psn::wrapping(0), max_dest_rd_atomic: 1, min_rnr_timer: RnrTimer::default(), av };
//!     eps[i].modify_qp(now, qp, &QpTransition::Rtr(rtr)).unwrap();
//!     let rts = RtsAttr { sq_psn: Psn::wrapping(0), timeout: 14, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 1 };
//!     eps[i].modify_qp(now, qp, &QpTransition::Rts(rts)).unwrap();
//! }
//! let (cq_b, mr_b, qp_b) = res[1];
//! eps[1].post_recv(now, qp_b.id, &RecvWr::new(2, &[Sge::new(mr_b.id, 0, 100)])).unwrap();
//! let (_, mr_a, qp_a) = res[0];
//! eps[0].mr_write(mr_a.id, 0, b"hello over RC").unwrap();
//! eps[0].post_send(now, qp_a.id, &SendWr::new(1, SendOp::Send, &[Sge::new(mr_a.id, 0, 13)])).unwrap();
//! // Carry every packet to the other endpoint until both are quiet.
//! let mut buf = Vec::new();
//! loop {
//!     let mut moved = false;
//!     for i in 0..2 {
//!         while let Some(tx) = eps[i].poll_transmit(now, &mut buf) {
//!             eps[1 - i].handle_packet(now, &tx.packet).unwrap();
//!             moved = true;
//!         }
//!     }
//!     if !moved {
//!         break;
//!     }
//! }
//! let mut wcs = Vec::new();
//! eps[1].poll_cq(cq_b, 4, &mut wcs).unwrap();
//! assert_eq!((wcs[0].status, wcs[0].byte_len), (WcStatus::Success, 13));
//! ```
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
//!   transmit and timer outputs (`endpoint/`: `cq.rs` the CQs and the
//!   delivery of completions, `io.rs` the inputs and outputs).
//! - `verbs/`: the verbs as endpoint methods, with the device limits
//!   (`verbs/qp.rs` the QP and SRQ verbs, `verbs/cm.rs` the CM verbs).
//! - [`cm`]: RDMA CM messages, connection states and their retransmission
//!   timers (REQ/MRA/REP/RTU/REJ/DREQ/DREP); [`cm::mad`] their MADs and
//!   QP1 packets.
//! - [`rc`]: one queue pair's requester and responder (`rc/requester.rs`
//!   the requester's state, `rc/requester/ack.rs` what comes back to it,
//!   `rc/requester/transmit.rs` its request packets; `rc/responder.rs`).
//! - `memory.rs`: registered regions, key and bound checks, gather/scatter.
//! - [`packet`](Packet): a RoCEv2 packet with its headers decoded, and the
//!   UDP source port rule.
//! - [`counts`](SentCounts): the classification and counts of sent packets
//!   both owners keep.
//! - `idmap.rs`: dense id-indexed maps for the per-packet lookups.
//! - `pcap` (feature `pcap`): the capture of sent packets both owners write.

#![warn(missing_docs)]

pub mod cm;
mod counts;
mod endpoint;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod idmap;
mod memory;
mod packet;
#[cfg(feature = "pcap")]
pub mod pcap;
pub mod rc;
mod verbs;

pub use cm::{
    CM_MAX_RETRIES, CM_QP_TIMEOUT, CM_RESPONSE_TIMEOUT, CM_TIMEOUT, CmMessage, CmTransmit, QpDriver, cm_time,
};
pub use counts::{PacketClass, SentCounts};
pub use endpoint::{Endpoint, EndpointConfig, EndpointCounters, PacketDrop, Resources, Transmit};
pub use memory::ExternalMemory;
pub use packet::{OUTER_HEADERS_LEN, Packet, udp_src_port};
pub use verbs::{MAX_CQE, MAX_MR_SIZE, MAX_QP_WR, MAX_SGE};
