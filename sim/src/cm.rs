//! RDMA CM over the simulated fabric: REQ / REP / RTU / REJ / DREQ / DREP.
//!
//! CM messages travel with the link's latency and are cut by partitions, but
//! not by random loss: real CM retransmits its MADs, and modelling that adds
//! nothing the RC tests need. The QP transitions are the ones librdmacm makes
//! (INIT at creation, RTR/RTS with the peer's QPN and starting PSN, the path
//! MTU the smaller of both ports' active MTUs, ERR on disconnect).

use std::net::SocketAddrV4;

use rctb_core::time::Duration;
use rctb_core::transport::{
    Access, AddressVector, CmEvent, ConnId, Gid, InitAttr, Mtu, Psn, QpId, QpTransition, RnrTimer, RtrAttr, RtsAttr,
    UnreachableReason,
};

use crate::node::{ConnState, Node};
use crate::world::{EventKind, NodeIdx, World};

/// How long an active side waits for REP or REJ.
pub const CM_TIMEOUT: Duration = Duration::from_millis(100);
/// The local ACK timeout code librdmacm's path records usually give on RoCE.
pub const CM_QP_TIMEOUT: u8 = 14;

#[derive(Clone, Debug)]
pub(crate) enum CmMsg {
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

pub(crate) fn send(w: &mut World, from: NodeIdx, to: NodeIdx, msg: CmMsg) {
    if w.partitioned(from, to) || !w.nodes[to].up {
        return;
    }
    let at = w.now + w.latency(from, to);
    w.schedule(at, EventKind::Cm { from, to, msg: Box::new(msg) });
}

/// INIT attributes rdma_cm uses for a connected RC QP.
fn init_attr() -> QpTransition {
    QpTransition::Init(InitAttr {
        pkey_index: 0,
        port: 1,
        access: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    })
}

/// Brings `qp` from INIT to RTS towards the peer.
#[allow(clippy::too_many_arguments)]
pub(crate) fn connect_qp(
    node: &mut Node,
    qp: QpId,
    peer_ip: std::net::Ipv4Addr,
    mtu: Mtu,
    dest_qpn: u32,
    rq_psn: Psn,
    sq_psn: Psn,
    responder_resources: u8,
    initiator_depth: u8,
    retry_count: u8,
    rnr_retry_count: u8,
    out: &mut Vec<crate::rc::RoutedCompletion>,
) -> Result<(), &'static str> {
    let src_ip = node.cfg.ip;
    let q = node.qps.get_mut(qp.0).ok_or("QP destroyed")?;
    let rtr = QpTransition::Rtr(RtrAttr {
        path_mtu: mtu,
        dest_qpn,
        rq_psn,
        max_dest_rd_atomic: responder_resources,
        min_rnr_timer: RnrTimer::default(),
        av: AddressVector::new(Gid::from_ipv4(peer_ip), 1),
    });
    let rts = QpTransition::Rts(RtsAttr {
        sq_psn,
        timeout: CM_QP_TIMEOUT,
        retry_cnt: retry_count.min(7),
        rnr_retry: rnr_retry_count.min(7),
        max_rd_atomic: initiator_depth,
    });
    q.modify(&rtr, src_ip, out)?;
    q.modify(&rts, src_ip, out)
}

pub(crate) fn init_qp(node: &mut Node, qp: QpId, out: &mut Vec<crate::rc::RoutedCompletion>) {
    let ip = node.cfg.ip;
    if let Some(q) = node.qps.get_mut(qp.0) {
        let _ = q.modify(&init_attr(), ip, out);
    }
}

pub(crate) fn handle(w: &mut World, from: NodeIdx, to: NodeIdx, msg: CmMsg) {
    match msg {
        CmMsg::Req {
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
            let Some(&listener) = w.nodes[to].listeners.get(&port) else {
                send(w, to, from, CmMsg::Rej { dst_conn: src_conn, private_data: Vec::new(), no_listener: true });
                return;
            };
            let remote_ip = w.nodes[from].cfg.ip;
            let n = &mut w.nodes[to];
            let conn = ConnId(n.alloc_id());
            let local_psn = n.random_psn();
            let mtu = mtu.min(n.cfg.mtu);
            n.conns.insert(
                conn,
                crate::node::Conn {
                    qp: None,
                    peer: Some((from, src_conn)),
                    state: ConnState::ReqRcvd,
                    remote_qpn: qpn,
                    remote_psn: psn,
                    local_psn,
                    remote_ip,
                    mtu,
                    responder_resources,
                    retry_count,
                    rnr_retry_count,
                    deadline: None,
                },
            );
            let remote = SocketAddrV4::new(remote_ip, 0);
            w.push_cm_event(
                to,
                CmEvent::ConnectRequest { listener, conn, remote, private_data, responder_resources, initiator_depth },
            );
        }
        CmMsg::Rep { dst_conn, src_conn, qpn, psn, mtu, private_data, responder_resources, initiator_depth } => {
            let n = &mut w.nodes[to];
            let Some(c) = n.conns.get_mut(&dst_conn) else { return };
            if c.state != ConnState::ReqSent {
                return;
            }
            c.peer = Some((from, src_conn));
            c.remote_qpn = qpn;
            c.remote_psn = psn;
            // Both ends must segment and reassemble at the same path MTU.
            c.mtu = c.mtu.min(mtu);
            c.deadline = None;
            let (qp, ip, mtu, local_psn, retry, rnr) =
                (c.qp, c.remote_ip, c.mtu, c.local_psn, c.retry_count, c.rnr_retry_count);
            let Some(qp) = qp else { return };
            // Our outstanding reads are bounded by what the peer will take.
            let ok = w.on_node(to, |n, comps| {
                connect_qp(n, qp, ip, mtu, qpn, psn, local_psn, responder_resources, initiator_depth, retry, rnr, comps)
            });
            let c = w.nodes[to].conns.get_mut(&dst_conn).expect("checked above");
            if ok.is_ok() {
                c.state = ConnState::Established;
                send(w, to, from, CmMsg::Rtu { dst_conn: src_conn });
                w.push_cm_event(to, CmEvent::Established { conn: dst_conn, qp, private_data });
            } else {
                c.state = ConnState::Closed;
                w.push_cm_event(to, CmEvent::Unreachable { conn: dst_conn, reason: UnreachableReason::NoRoute });
            }
            w.after_qp_change(to, qp);
        }
        CmMsg::Rtu { dst_conn } => {
            let n = &mut w.nodes[to];
            let Some(c) = n.conns.get_mut(&dst_conn) else { return };
            if c.state != ConnState::RepSent {
                return;
            }
            c.state = ConnState::Established;
            if let Some(qp) = c.qp {
                w.push_cm_event(to, CmEvent::Established { conn: dst_conn, qp, private_data: Vec::new() });
            }
        }
        CmMsg::Rej { dst_conn, private_data, no_listener } => {
            let n = &mut w.nodes[to];
            let Some(c) = n.conns.get_mut(&dst_conn) else { return };
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
            w.push_cm_event(to, ev);
        }
        CmMsg::Dreq { dst_conn } => disconnect_local(w, to, dst_conn, false),
    }
}

/// Tears a connection down on `node`: QP to ERR, Disconnected event, and a
/// DREQ to the peer when we started it.
pub(crate) fn disconnect_local(w: &mut World, node: NodeIdx, conn: ConnId, notify_peer: bool) {
    let n = &mut w.nodes[node];
    let Some(c) = n.conns.get_mut(&conn) else { return };
    if c.state != ConnState::Established {
        return;
    }
    c.state = ConnState::Closed;
    let (qp, peer) = (c.qp, c.peer);
    if let Some(qp) = qp {
        w.on_node(node, |n, comps| {
            let ip = n.cfg.ip;
            if let Some(q) = n.qps.get_mut(qp.0) {
                let _ = q.modify(&QpTransition::Err, ip, comps);
            }
        });
        w.after_qp_change(node, qp);
    }
    w.push_cm_event(node, CmEvent::Disconnected { conn });
    if notify_peer && let Some((peer_node, peer_conn)) = peer {
        send(w, node, peer_node, CmMsg::Dreq { dst_conn: peer_conn });
    }
}

pub(crate) fn timeout(w: &mut World, node: NodeIdx, conn: ConnId) {
    let now = w.now;
    let n = &mut w.nodes[node];
    let Some(c) = n.conns.get_mut(&conn) else { return };
    if c.state == ConnState::ReqSent && c.deadline.is_some_and(|d| d <= now) {
        c.state = ConnState::Closed;
        c.deadline = None;
        w.push_cm_event(node, CmEvent::Unreachable { conn, reason: UnreachableReason::Timeout });
    }
}
