//! The CM exchange on an [`Endpoint`]: sending a message (and again,
//! until answered), taking one in whichever state its connection is, the
//! QP transitions it makes, and the retransmission timer.

use std::net::{Ipv4Addr, SocketAddrV4};

use rctb_core::time::Instant;
use rctb_core::transport::{CmEvent, ConnId, QpId, QpTransition, UnreachableReason};

use super::mad::reason;
use super::{
    CM_MAX_RETRIES, CM_RESPONSE_TIMEOUT, CmMessage, CmTransmit, Conn, ConnState, Connect, QpDriver, Rejected, cm_time,
    init_attr,
};
use crate::endpoint::{Endpoint, TimerKey};

impl Endpoint {
    pub(crate) fn send_cm(&mut self, dst: Ipv4Addr, msg: CmMessage) {
        self.cm_out.push_back(CmTransmit { dst, msg });
    }

    /// Sends `msg` on `conn` and keeps it to send again after
    /// `conn.response_timeout` when no answer comes, `retries` times.
    pub(crate) fn send_reliably(&mut self, now: Instant, conn: ConnId, msg: CmMessage, retries: u8) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        let at = now + c.response_timeout;
        c.deadline = Some(at);
        c.retries_left = retries;
        c.sent = Some(msg.clone());
        let dst = c.remote_ip;
        self.arm(at, TimerKey::Cm(conn));
        self.send_cm(dst, msg);
    }

    /// Sends `conn`'s kept message again, as the answer to a duplicate.
    fn resend(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get(&conn) else { return };
        if let Some(msg) = c.sent.clone() {
            let dst = c.remote_ip;
            self.counters.cm_retransmitted += 1;
            self.send_cm(dst, msg);
        }
    }

    /// Brings `qp` from INIT to RTS towards the peer.
    pub(crate) fn connect_qp(&mut self, qp: QpId, c: Connect) -> Result<(), &'static str> {
        let src_ip = self.cfg.ip;
        let q = self.qps.get_mut(qp.0).ok_or("QP destroyed")?;
        // The same values `cm_qp_attr` reports: one source for both.
        let rtr = QpTransition::Rtr(c.rtr());
        let rts = QpTransition::Rts(c.rts());
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

    /// Moves `qp` to ERR (its outstanding work completes flushed).
    fn error_qp(&mut self, now: Instant, qp: QpId) {
        let ip = self.cfg.ip;
        if let Some(q) = self.qps.get_mut(qp.0) {
            let _ = q.modify(&QpTransition::Err, ip, &mut self.comps);
        }
        self.route();
        self.after_qp_change(now, qp);
    }

    /// The connection whose peer is `peer` (a duplicate REQ's sender).
    fn conn_of_peer(&self, peer: (Ipv4Addr, ConnId)) -> Option<ConnId> {
        self.conns.iter().find(|(_, c)| c.peer == Some(peer)).map(|(id, _)| *id)
    }

    /// `conn`, when it exists and is in `state` (anything else is a stale
    /// or duplicate message: counted).
    fn conn_in(&mut self, conn: ConnId, state: ConnState) -> bool {
        let ok = self.conns.get(&conn).is_some_and(|c| c.state == state);
        if !ok {
            self.counters.cm_ignored += 1;
        }
        ok
    }

    /// Takes one CM message that the endpoint at `from` sent, at `now`.
    pub fn handle_cm(&mut self, now: Instant, from: Ipv4Addr, msg: CmMessage) {
        self.take_cm(now, from, msg, false);
    }

    /// `on_wire`: it came as a MAD. A REP on the wire has no MTU, so there
    /// the passive side takes the REQ's path MTU as it is (as the kernel's
    /// does: the active side chose it); carried as a value, the REP tells
    /// the active side the smaller of both ports' MTUs.
    pub(crate) fn take_cm(&mut self, now: Instant, from: Ipv4Addr, msg: CmMessage, on_wire: bool) {
        match msg {
            CmMessage::Req {
                src_conn,
                src_port,
                port,
                qpn,
                psn,
                mtu,
                private_data,
                responder_resources,
                initiator_depth,
                retry_count,
                rnr_retry_count,
                response_timeout,
                max_retries,
            } => {
                if let Some(conn) = self.conn_of_peer((from, src_conn)) {
                    self.counters.cm_duplicates += 1;
                    match self.conns.get(&conn).map(|c| c.state) {
                        // Our REP (or REJ) was lost or is late: send it again.
                        Some(ConnState::RepSent | ConnState::Closed) => self.resend(conn),
                        // The application has not answered yet: say so, and
                        // ask for four more response timeouts.
                        Some(ConnState::ReqRcvd) => {
                            let service_timeout = CM_RESPONSE_TIMEOUT + 2;
                            let mra = CmMessage::Mra { dst_conn: src_conn, src_conn: conn, service_timeout };
                            self.send_cm(from, mra);
                        }
                        _ => {}
                    }
                    return;
                }
                let Some(&listener) = self.listeners.get(&port) else {
                    self.reject_req(from, src_conn, reason::INVALID_SERVICE_ID);
                    return;
                };
                let conn = ConnId(self.alloc_id());
                let local_psn = self.random_psn();
                let mtu = if on_wire { mtu } else { mtu.min(self.cfg.mtu) };
                let mut c = Conn::new(ConnState::ReqRcvd, from, local_psn, mtu);
                c.peer = Some((from, src_conn));
                c.remote_qpn = qpn;
                c.remote_psn = psn;
                c.responder_resources = responder_resources;
                c.retry_count = retry_count;
                c.rnr_retry_count = rnr_retry_count;
                c.response_timeout = cm_time(response_timeout);
                c.retries_left = max_retries;
                // What `cm_qp_attr` reports before the accept: the REQ's
                // depths seen from this side (as the kernel's CM keeps
                // them); the accept replaces them with its own.
                c.attrs = Some(Connect {
                    peer_ip: from,
                    mtu,
                    dest_qpn: qpn,
                    rq_psn: local_psn,
                    sq_psn: psn,
                    responder_resources: initiator_depth,
                    initiator_depth: responder_resources,
                    retry_count,
                    rnr_retry_count,
                });
                self.conns.insert(conn, c);
                self.cm_events.push_back(CmEvent::ConnectRequest {
                    listener,
                    conn,
                    remote: SocketAddrV4::new(from, src_port),
                    private_data,
                    responder_resources,
                    initiator_depth,
                });
            }
            CmMessage::Mra { dst_conn, service_timeout, .. } => {
                let Some(c) = self.conns.get_mut(&dst_conn) else { return };
                if c.state != ConnState::ReqSent {
                    self.counters.cm_ignored += 1;
                    return;
                }
                // The REQ arrived: wait for the answer without resending.
                let at = now + cm_time(service_timeout) + c.response_timeout;
                c.deadline = Some(at);
                self.arm(at, TimerKey::Cm(dst_conn));
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
                rnr_retry_count: _,
            } => {
                if self
                    .conns
                    .get(&dst_conn)
                    .is_some_and(|c| c.state == ConnState::Established && c.peer == Some((from, src_conn)))
                {
                    // Our RTU was lost: the passive side sent its REP again.
                    self.counters.cm_duplicates += 1;
                    self.resend(dst_conn);
                    return;
                }
                if !self.conn_in(dst_conn, ConnState::ReqSent) {
                    return;
                }
                let c = self.conns.get_mut(&dst_conn).expect("checked above");
                c.peer = Some((from, src_conn));
                c.remote_qpn = qpn;
                c.remote_psn = psn;
                // Both ends must segment and reassemble at the same path MTU.
                c.mtu = c.mtu.min(mtu);
                c.deadline = None;
                // We take as many of the peer's reads at once as we
                // offered; ours outstanding are bounded by what it takes.
                // Each side's starting PSN is the one it receives from: we
                // send from the REP's, and take what follows our REQ's.
                let _ = initiator_depth;
                let attrs = Connect {
                    peer_ip: c.remote_ip,
                    mtu: c.mtu,
                    dest_qpn: qpn,
                    rq_psn: c.local_psn,
                    sq_psn: psn,
                    responder_resources: c.responder_resources,
                    initiator_depth: c.initiator_depth.min(responder_resources),
                    retry_count: c.retry_count,
                    rnr_retry_count: c.rnr_retry_count,
                };
                c.attrs = Some(attrs);
                if c.driver == QpDriver::Application {
                    // The application moves its QP, then sends the RTU.
                    c.state = ConnState::RepRcvd;
                    self.cm_events.push_back(CmEvent::ConnectResponse { conn: dst_conn, private_data });
                    return;
                }
                let Some(qp) = c.qp else { return };
                let ok = self.connect_qp(qp, attrs);
                let c = self.conns.get_mut(&dst_conn).expect("checked above");
                if ok.is_ok() {
                    c.state = ConnState::Established;
                    let rtu = CmMessage::Rtu { dst_conn: src_conn, src_conn: dst_conn };
                    // Kept, not timed: it answers a REP that comes again.
                    c.sent = Some(rtu.clone());
                    self.send_cm(from, rtu);
                    self.cm_events.push_back(CmEvent::Established { conn: dst_conn, qp, private_data });
                } else {
                    c.state = ConnState::Closed;
                    let rej = CmMessage::Rej {
                        dst_conn: src_conn,
                        src_conn: dst_conn,
                        rejected: Rejected::Rep,
                        reason: reason::CONSUMER_DEFINED,
                        private_data: Vec::new(),
                    };
                    self.send_cm(from, rej);
                    let ev = CmEvent::Unreachable { conn: dst_conn, reason: UnreachableReason::NoRoute };
                    self.cm_events.push_back(ev);
                }
                self.after_qp_change(now, qp);
            }
            CmMessage::Rtu { dst_conn, .. } => {
                if !self.conn_in(dst_conn, ConnState::RepSent) {
                    return;
                }
                let c = self.conns.get_mut(&dst_conn).expect("checked above");
                c.settle(ConnState::Established);
                if let Some(qp) = c.qp {
                    self.awaiting_rtu.remove(&qp);
                    self.cm_events.push_back(CmEvent::Established { conn: dst_conn, qp, private_data: Vec::new() });
                }
            }
            CmMessage::Rej { dst_conn, src_conn, reason: why, private_data, .. } => {
                // A REJ "timeout" from an active side that never saw our REP
                // names only its own connection.
                let target = if dst_conn == ConnId(0) { self.conn_of_peer((from, src_conn)) } else { Some(dst_conn) };
                let open = |c: &&mut Conn| {
                    matches!(c.state, ConnState::ReqSent | ConnState::ReqRcvd | ConnState::RepSent | ConnState::RepRcvd)
                };
                let Some((conn, c)) = target.and_then(|id| Some((id, self.conns.get_mut(&id).filter(open)?))) else {
                    self.counters.cm_ignored += 1;
                    return;
                };
                let passive = matches!(c.state, ConnState::ReqRcvd | ConnState::RepSent);
                c.settle(ConnState::Closed);
                let qp = c.driven_qp();
                let ev = match why {
                    reason::INVALID_SERVICE_ID => CmEvent::Unreachable { conn, reason: UnreachableReason::NoListener },
                    reason::TIMEOUT => CmEvent::Unreachable { conn, reason: UnreachableReason::Timeout },
                    _ => CmEvent::Rejected { conn, private_data },
                };
                if passive && let Some(qp) = qp {
                    self.error_qp(now, qp);
                }
                self.cm_events.push_back(ev);
            }
            CmMessage::Dreq { dst_conn, src_conn, remote_qpn } => {
                let drep = CmMessage::Drep { dst_conn: src_conn, src_conn: dst_conn };
                let Some(c) = self.conns.get(&dst_conn) else {
                    // Gone already (destroyed): IBA still answers.
                    self.send_cm(from, drep);
                    return;
                };
                let own_qpn = c.qp.and_then(|qp| self.qps.get(qp.0)).map(|q| q.qpn);
                if c.peer.is_some_and(|(_, p)| p != src_conn) || own_qpn.is_some_and(|n| n != remote_qpn) {
                    self.counters.cm_ignored += 1;
                    return;
                }
                match c.state {
                    ConnState::Established => self.disconnect_local(now, dst_conn, false),
                    // The RTU was lost and the active side, up since the
                    // REP, disconnects already: the connection was up, and
                    // goes down (the kernel's CM takes a DREQ in REP_SENT).
                    ConnState::RepSent => {
                        if let Some(c) = self.conns.get_mut(&dst_conn) {
                            c.settle(ConnState::Established);
                        }
                        self.disconnect_local(now, dst_conn, false);
                    }
                    // Both sides disconnect at once: each answers the other.
                    ConnState::DreqSent | ConnState::TimeWait => self.counters.cm_duplicates += 1,
                    _ => {
                        self.counters.cm_ignored += 1;
                        return;
                    }
                }
                if let Some(c) = self.conns.get_mut(&dst_conn) {
                    c.state = ConnState::TimeWait;
                    c.deadline = None;
                    c.sent = Some(drep.clone());
                }
                self.send_cm(from, drep);
            }
            CmMessage::Drep { dst_conn, .. } => {
                if !self.conn_in(dst_conn, ConnState::DreqSent) {
                    return;
                }
                self.conns.get_mut(&dst_conn).expect("checked above").settle(ConnState::TimeWait);
            }
        }
    }

    /// A packet came on `qp` from the peer: if its connection still waits
    /// for the RTU, the peer is up (it sends only from RTS), and so is the
    /// connection, as if the RTU came: every RTU may have been lost.
    pub(crate) fn communication_established(&mut self, qp: QpId) {
        let Some(conn) = self.awaiting_rtu.remove(&qp) else { return };
        let Some(c) = self.conns.get_mut(&conn) else { return };
        if c.state != ConnState::RepSent || c.qp != Some(qp) {
            return;
        }
        c.settle(ConnState::Established);
        self.counters.cm_established_by_data += 1;
        self.cm_events.push_back(CmEvent::Established { conn, qp, private_data: Vec::new() });
    }

    /// Refuses a REQ for which no connection was made.
    pub(crate) fn reject_req(&mut self, to: Ipv4Addr, req_conn: ConnId, why: u16) {
        self.counters.cm_rejected += 1;
        let rej = CmMessage::Rej {
            dst_conn: req_conn,
            src_conn: ConnId(0),
            rejected: Rejected::Req,
            reason: why,
            private_data: Vec::new(),
        };
        self.send_cm(to, rej);
    }

    /// Tears a connection down: QP to ERR, Disconnected event, and, when
    /// we started it, a DREQ to the peer (sent again until a DREP comes).
    pub(crate) fn disconnect_local(&mut self, now: Instant, conn: ConnId, notify_peer: bool) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        if c.state != ConnState::Established {
            return;
        }
        c.settle(ConnState::Closed);
        let (qp, peer, remote_qpn) = (c.driven_qp(), c.peer, c.remote_qpn);
        if let Some(qp) = qp {
            self.error_qp(now, qp);
        }
        self.cm_events.push_back(CmEvent::Disconnected { conn });
        if notify_peer && let Some((_, peer_conn)) = peer {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.state = ConnState::DreqSent;
                c.response_timeout = cm_time(CM_RESPONSE_TIMEOUT);
            }
            let dreq = CmMessage::Dreq { dst_conn: peer_conn, src_conn: conn, remote_qpn };
            self.send_reliably(now, conn, dreq, CM_MAX_RETRIES);
        }
    }
}

/// The timer of `conn` came up: send its message again, or give up.
pub(crate) fn timeout(ep: &mut Endpoint, now: Instant, conn: ConnId) {
    let Some(c) = ep.conns.get_mut(&conn) else { return };
    if c.deadline.is_none_or(|d| d > now) {
        return; // moved later (MRA) or answered: a later entry or none
    }
    if !matches!(c.state, ConnState::ReqSent | ConnState::RepSent | ConnState::DreqSent) {
        c.deadline = None;
        return;
    }
    if c.retries_left > 0 {
        c.retries_left -= 1;
        let at = now + c.response_timeout;
        c.deadline = Some(at);
        ep.arm(at, TimerKey::Cm(conn));
        ep.resend(conn);
        return;
    }
    // Out of retries.
    let (state, peer, qp, dst) = (c.state, c.peer, c.driven_qp(), c.remote_ip);
    ep.counters.cm_timeouts += 1;
    if state == ConnState::DreqSent {
        c.settle(ConnState::TimeWait);
        return;
    }
    // REQ or REP: tell the peer, so it drops its half (IBA: REJ "timeout";
    // an active side that never heard back names only its own id).
    c.settle(ConnState::Closed);
    let dst_conn = peer.map_or(ConnId(0), |(_, p)| p);
    let rej = CmMessage::Rej {
        dst_conn,
        src_conn: conn,
        rejected: Rejected::Other,
        reason: reason::TIMEOUT,
        private_data: Vec::new(),
    };
    ep.send_cm(dst, rej);
    if state == ConnState::RepSent
        && let Some(qp) = qp
    {
        ep.error_qp(now, qp);
    }
    ep.cm_events.push_back(CmEvent::Unreachable { conn, reason: UnreachableReason::Timeout });
}
