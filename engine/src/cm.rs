//! RDMA CM: REQ / REP / RTU / REJ / DREQ, each side's connection state, and
//! the active side's REP timer.
//!
//! Contract: the endpoint's CM verbs (`cm_connect`, `cm_accept`,
//! `cm_reject`, `cm_disconnect`, in `verbs.rs`) and
//! [`Endpoint::handle_cm`] queue [`CmTransmit`]s, which the owner takes with
//! [`Endpoint::poll_cm_transmit`] and delivers to the endpoint at
//! [`CmTransmit::dst`] (its `handle_cm`, with this endpoint's address as the
//! source). The application sees [`CmEvent`]s. A REQ that gets no answer
//! within [`CM_TIMEOUT`] ends in `Unreachable { reason: Timeout }` (the
//! endpoint's timer, through `poll_timeout`/`handle_timeout`).
//!
//! Messages are carried as values, not MADs, and the model assumes the
//! carrier does not lose them (real CM retransmits its MADs: a lossy carrier
//! needs MAD encoding, retransmission and duplicate detection here, keyed
//! by the connection ids every message already carries). The QP
//! transitions are the ones librdmacm makes (INIT at creation, RTR/RTS with
//! the peer's QPN and starting PSN, the path MTU the smaller of both ports'
//! active MTUs, ERR on disconnect).

use std::net::{Ipv4Addr, SocketAddrV4};

use rctb_core::time::{Duration, Instant};
use rctb_core::transport::{
    Access, AddressVector, CmEvent, ConnId, Gid, InitAttr, Mtu, Psn, QpId, QpTransition, RnrTimer, RtrAttr, RtsAttr,
    UnreachableReason,
};

use crate::endpoint::{Endpoint, TimerKey};

/// How long an active side waits for REP or REJ.
pub const CM_TIMEOUT: Duration = Duration::from_millis(100);
/// The local ACK timeout code librdmacm's path records usually give on RoCE.
pub const CM_QP_TIMEOUT: u8 = 14;

/// A CM message between two endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmMessage {
    Req {
        src_conn: ConnId,
        port: u16,
        qpn: u32,
        psn: Psn,
        mtu: Mtu,
        private_data: Vec<u8>,
        responder_resources: u8,
        initiator_depth: u8,
        retry_count: u8,
        rnr_retry_count: u8,
    },
    Rep {
        dst_conn: ConnId,
        src_conn: ConnId,
        qpn: u32,
        psn: Psn,
        /// The path MTU the passive side chose: min of both ports' active MTUs.
        mtu: Mtu,
        private_data: Vec<u8>,
        responder_resources: u8,
        initiator_depth: u8,
    },
    Rtu {
        dst_conn: ConnId,
    },
    Rej {
        dst_conn: ConnId,
        private_data: Vec<u8>,
        no_listener: bool,
    },
    Dreq {
        dst_conn: ConnId,
    },
}

/// A CM message to deliver to the endpoint at `dst`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmTransmit {
    pub dst: Ipv4Addr,
    pub msg: CmMessage,
}

/// CM connection state on one side.
#[derive(Debug)]
pub(crate) struct Conn {
    pub qp: Option<QpId>,
    /// The peer's address and connection id, once known.
    pub peer: Option<(Ipv4Addr, ConnId)>,
    pub state: ConnState,
    /// What the REQ carried (passive side) or what we sent (active side).
    pub remote_qpn: u32,
    pub remote_psn: Psn,
    pub local_psn: Psn,
    pub remote_ip: Ipv4Addr,
    pub mtu: Mtu,
    pub responder_resources: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub deadline: Option<Instant>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConnState {
    /// Active side: REQ sent.
    ReqSent,
    /// Passive side: REQ received, application deciding.
    ReqRcvd,
    /// Passive side: REP sent.
    RepSent,
    Established,
    Closed,
}

/// INIT attributes rdma_cm uses for a connected RC QP.
fn init_attr() -> QpTransition {
    QpTransition::Init(InitAttr {
        pkey_index: 0,
        port: 1,
        access: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    })
}

/// The QP attributes a connection brings a QP from INIT to RTS with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Connect {
    pub peer_ip: Ipv4Addr,
    pub mtu: Mtu,
    pub dest_qpn: u32,
    pub rq_psn: Psn,
    pub sq_psn: Psn,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
}

impl Endpoint {
    pub(crate) fn send_cm(&mut self, dst: Ipv4Addr, msg: CmMessage) {
        self.cm_out.push_back(CmTransmit { dst, msg });
    }

    /// Brings `qp` from INIT to RTS towards the peer.
    pub(crate) fn connect_qp(&mut self, qp: QpId, c: Connect) -> Result<(), &'static str> {
        let src_ip = self.cfg.ip;
        let q = self.qps.get_mut(qp.0).ok_or("QP destroyed")?;
        let rtr = QpTransition::Rtr(RtrAttr {
            path_mtu: c.mtu,
            dest_qpn: c.dest_qpn,
            rq_psn: c.rq_psn,
            max_dest_rd_atomic: c.responder_resources,
            min_rnr_timer: RnrTimer::default(),
            av: AddressVector::new(Gid::from_ipv4(c.peer_ip), 1),
        });
        let rts = QpTransition::Rts(RtsAttr {
            sq_psn: c.sq_psn,
            timeout: CM_QP_TIMEOUT,
            retry_cnt: c.retry_count.min(7),
            rnr_retry: c.rnr_retry_count.min(7),
            max_rd_atomic: c.initiator_depth,
        });
        let r = q.modify(&rtr, src_ip, &mut self.comps).and_then(|()| q.modify(&rts, src_ip, &mut self.comps));
        self.route();
        r
    }

    pub(crate) fn init_qp(&mut self, qp: QpId) {
        let ip = self.cfg.ip;
        if let Some(q) = self.qps.get_mut(qp.0) {
            let _ = q.modify(&init_attr(), ip, &mut self.comps);
        }
        self.route();
    }

    pub(crate) fn arm_cm(&mut self, at: Instant, conn: ConnId) {
        self.arm(at, TimerKey::Cm(conn));
    }

    /// Takes one CM message that the endpoint at `from` sent, at `now`.
    pub fn handle_cm(&mut self, now: Instant, from: Ipv4Addr, msg: CmMessage) {
        match msg {
            CmMessage::Req {
                src_conn,
                port,
                qpn,
                psn,
                mtu,
                private_data,
                responder_resources,
                initiator_depth,
                retry_count,
                rnr_retry_count,
            } => {
                let Some(&listener) = self.listeners.get(&port) else {
                    let rej = CmMessage::Rej { dst_conn: src_conn, private_data: Vec::new(), no_listener: true };
                    self.send_cm(from, rej);
                    return;
                };
                let conn = ConnId(self.alloc_id());
                let local_psn = self.random_psn();
                let mtu = mtu.min(self.cfg.mtu);
                self.conns.insert(
                    conn,
                    Conn {
                        qp: None,
                        peer: Some((from, src_conn)),
                        state: ConnState::ReqRcvd,
                        remote_qpn: qpn,
                        remote_psn: psn,
                        local_psn,
                        remote_ip: from,
                        mtu,
                        responder_resources,
                        retry_count,
                        rnr_retry_count,
                        deadline: None,
                    },
                );
                let remote = SocketAddrV4::new(from, 0);
                self.cm_events.push_back(CmEvent::ConnectRequest {
                    listener,
                    conn,
                    remote,
                    private_data,
                    responder_resources,
                    initiator_depth,
                });
            }
            CmMessage::Rep {
                dst_conn,
                src_conn,
                qpn,
                psn,
                mtu,
                private_data,
                responder_resources,
                initiator_depth,
            } => {
                let Some(c) = self.conns.get_mut(&dst_conn) else { return };
                if c.state != ConnState::ReqSent {
                    return;
                }
                c.peer = Some((from, src_conn));
                c.remote_qpn = qpn;
                c.remote_psn = psn;
                // Both ends must segment and reassemble at the same path MTU.
                c.mtu = c.mtu.min(mtu);
                c.deadline = None;
                let Some(qp) = c.qp else { return };
                // Our outstanding reads are bounded by what the peer will take.
                let attrs = Connect {
                    peer_ip: c.remote_ip,
                    mtu: c.mtu,
                    dest_qpn: qpn,
                    rq_psn: psn,
                    sq_psn: c.local_psn,
                    responder_resources,
                    initiator_depth,
                    retry_count: c.retry_count,
                    rnr_retry_count: c.rnr_retry_count,
                };
                let ok = self.connect_qp(qp, attrs);
                let c = self.conns.get_mut(&dst_conn).expect("checked above");
                if ok.is_ok() {
                    c.state = ConnState::Established;
                    self.send_cm(from, CmMessage::Rtu { dst_conn: src_conn });
                    self.cm_events.push_back(CmEvent::Established { conn: dst_conn, qp, private_data });
                } else {
                    c.state = ConnState::Closed;
                    let ev = CmEvent::Unreachable { conn: dst_conn, reason: UnreachableReason::NoRoute };
                    self.cm_events.push_back(ev);
                }
                self.after_qp_change(now, qp);
            }
            CmMessage::Rtu { dst_conn } => {
                let Some(c) = self.conns.get_mut(&dst_conn) else { return };
                if c.state != ConnState::RepSent {
                    return;
                }
                c.state = ConnState::Established;
                if let Some(qp) = c.qp {
                    self.cm_events.push_back(CmEvent::Established { conn: dst_conn, qp, private_data: Vec::new() });
                }
            }
            CmMessage::Rej { dst_conn, private_data, no_listener } => {
                let Some(c) = self.conns.get_mut(&dst_conn) else { return };
                if c.state != ConnState::ReqSent {
                    return;
                }
                c.state = ConnState::Closed;
                c.deadline = None;
                let ev = if no_listener {
                    CmEvent::Unreachable { conn: dst_conn, reason: UnreachableReason::NoListener }
                } else {
                    CmEvent::Rejected { conn: dst_conn, private_data }
                };
                self.cm_events.push_back(ev);
            }
            CmMessage::Dreq { dst_conn } => self.disconnect_local(now, dst_conn, false),
        }
    }

    /// Tears a connection down: QP to ERR, Disconnected event, and a DREQ to
    /// the peer when we started it.
    pub(crate) fn disconnect_local(&mut self, now: Instant, conn: ConnId, notify_peer: bool) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        if c.state != ConnState::Established {
            return;
        }
        c.state = ConnState::Closed;
        let (qp, peer) = (c.qp, c.peer);
        if let Some(qp) = qp {
            let ip = self.cfg.ip;
            if let Some(q) = self.qps.get_mut(qp.0) {
                let _ = q.modify(&QpTransition::Err, ip, &mut self.comps);
            }
            self.route();
            self.after_qp_change(now, qp);
        }
        self.cm_events.push_back(CmEvent::Disconnected { conn });
        if notify_peer && let Some((peer_ip, peer_conn)) = peer {
            self.send_cm(peer_ip, CmMessage::Dreq { dst_conn: peer_conn });
        }
    }
}

/// The REP timer of `conn` came up.
pub(crate) fn timeout(ep: &mut Endpoint, now: Instant, conn: ConnId) {
    let Some(c) = ep.conns.get_mut(&conn) else { return };
    if c.state == ConnState::ReqSent && c.deadline.is_some_and(|d| d <= now) {
        c.state = ConnState::Closed;
        c.deadline = None;
        ep.cm_events.push_back(CmEvent::Unreachable { conn, reason: UnreachableReason::Timeout });
    }
}
