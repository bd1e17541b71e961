//! Bringing a stream up: resources on both ends, then either RDMA CM (listen,
//! connect with private data, accept, Established) or a manual connect that
//! walks both QPs through RESET->INIT->RTR->RTS with QPNs and seeded PSNs
//! exchanged out of band.

use std::net::{Ipv4Addr, SocketAddrV4};

use rctb_core::Transport;
use rctb_core::transport::{
    AcceptParams, Access, AddressVector, CmEvent, ConnectParams, Gid, GidType, InitAttr, Psn, QpCaps, QpInit,
    QpTransition, RecvWr, RnrTimer, RtrAttr, RtsAttr, Sge, TransportError, Verb,
};

use super::{ConnectMode, End, Op, Phase, Role, Stream, private_data};

/// Outstanding RDMA READs each side allows (what librdmacm offers by default).
const RD_ATOMIC: u8 = 16;

/// The RoCEv2 IPv4-mapped GID of port 1: its index and address.
fn roce_v2_ipv4<T: Transport>(t: &T) -> Result<(u32, Ipv4Addr), TransportError> {
    let port = t.port(1)?;
    port.gids
        .iter()
        .find_map(|g| (g.gid_type == GidType::RoceV2).then_some(g).and_then(|g| Some((g.index, g.gid.to_ipv4()?))))
        .ok_or(TransportError::NoDevice { verb: Verb::QueryPort, hint: Some("no RoCEv2 IPv4 GID on port 1") })
}

impl<T: Transport> Stream<T> {
    fn qp_init(&self, end: &End<T>, recv_depth: u32) -> Option<QpInit> {
        Some(QpInit {
            pd: end.pd?,
            send_cq: end.cq?,
            recv_cq: end.cq?,
            caps: QpCaps {
                max_send_wr: self.cfg.queue_depth,
                max_recv_wr: recv_depth.max(1),
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
            srq: None,
        })
    }

    /// Receives the responder keeps posted.
    fn recv_slots(&self) -> u32 {
        if self.cfg.op.consumes_recv() { self.cfg.recv_depth } else { 0 }
    }

    /// Allocates both ends' resources and starts connecting.
    pub(super) fn setup(&mut self) {
        if let Err((what, e)) = self.alloc() {
            self.fail(what, e);
            return;
        }
        let result = match self.cfg.connect {
            ConnectMode::Cm => self.cm_start(),
            ConnectMode::Manual => self.manual_connect(),
        };
        if let Err((what, e)) = result {
            self.fail(what, e);
        }
    }

    fn alloc(&mut self) -> Result<(), (&'static str, TransportError)> {
        let slot = self.cfg.slot_len();
        let qd = self.cfg.queue_depth as u64;
        let cq_depth = self.cfg.queue_depth + self.cfg.recv_depth + 16;
        // Requester: one slot per outstanding WR; READ data lands here.
        let req_len = qd * slot;
        // Responder: receive buffers for SEND, the target region for RDMA.
        let resp_len = match self.cfg.op {
            Op::Send | Op::SendImm => self.cfg.recv_depth as u64 * slot,
            Op::Write | Op::WriteImm | Op::Read => qd * slot,
        };
        let resp_access = match self.cfg.op {
            Op::Send | Op::SendImm => Access::LOCAL_WRITE,
            Op::Write | Op::WriteImm => Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            Op::Read => Access::LOCAL_WRITE | Access::REMOTE_READ,
        };
        for (end, len, access) in
            [(&mut self.req, req_len, Access::LOCAL_WRITE), (&mut self.resp, resp_len, resp_access)]
        {
            let pd = end.t.alloc_pd().map_err(|e| ("alloc_pd", e))?;
            end.pd = Some(pd);
            end.cq = Some(end.t.create_cq(cq_depth).map_err(|e| ("create_cq", e))?);
            end.mr = Some(end.t.reg_mr(pd, len, access).map_err(|e| ("reg_mr", e))?);
        }
        Ok(())
    }

    fn cm_start(&mut self) -> Result<(), (&'static str, TransportError)> {
        let (_, resp_ip) = roce_v2_ipv4(&self.resp.t).map_err(|e| ("responder address", e))?;
        self.resp.listener = Some(self.resp.t.cm_listen(self.cfg.cm_port).map_err(|e| ("cm_listen", e))?);
        let init = self.qp_init(&self.req, 0).expect("allocated above");
        let mut params = ConnectParams::new(
            SocketAddrV4::new(resp_ip, self.cfg.cm_port),
            init,
            private_data::hello(self.pattern.draw("hello")),
        );
        params.retry_count = self.cfg.qp.retry_cnt;
        params.rnr_retry_count = self.cfg.qp.rnr_retry;
        let (conn, qp) = self.req.t.cm_connect(&params).map_err(|e| ("cm_connect", e))?;
        self.req.conn = Some(conn);
        self.req.qp = Some(qp);
        self.phase = Phase::Connecting;
        Ok(())
    }

    pub(super) fn handle_cm(&mut self, role: Role, ev: &CmEvent) {
        match (role, ev) {
            (Role::Responder, CmEvent::ConnectRequest { conn, private_data, .. }) => {
                let ok = private_data::parse_hello(private_data) == Some(self.pattern.draw("hello"));
                if self.phase != Phase::Connecting || self.resp.conn.is_some() || !ok {
                    // Not the request this stream waits for: refuse it, as a
                    // server refuses an unknown client.
                    if let Err(e) = self.resp.t.cm_reject(*conn, b"rctb: unexpected connect request") {
                        self.stats.local_errors.push(format!("cm_reject: {e}"));
                    }
                    return;
                }
                self.resp.conn = Some(*conn);
                if let Err(e) = self.cm_accept(*conn) {
                    self.fail("cm_accept", e);
                }
            }
            (Role::Requester, CmEvent::Established { qp, private_data, .. }) if self.phase == Phase::Connecting => {
                if Some(*qp) != self.req.qp {
                    self.stats.connect_error = Some(format!("Established names {qp}, not the connecting QP"));
                    self.close();
                    return;
                }
                if self.cfg.op.is_rdma() {
                    match private_data::parse_region(private_data) {
                        Some((remote, _len)) => self.remote = Some(remote),
                        None => {
                            self.stats.connect_error = Some("the accept carried no region descriptor".into());
                            self.close();
                            return;
                        }
                    }
                }
                self.start_running();
            }
            // The responder's own Established carries nothing it needs.
            (Role::Responder, CmEvent::Established { .. }) => {}
            (Role::Requester, CmEvent::Rejected { private_data, .. }) => {
                let why = String::from_utf8_lossy(private_data).into_owned();
                self.stats.connect_error = Some(format!("rejected by the responder ({why})"));
                self.close();
            }
            (Role::Requester, CmEvent::Unreachable { reason, .. }) => {
                self.stats.connect_error = Some(format!("unreachable: {reason:?}"));
                self.close();
            }
            (_, CmEvent::Disconnected { .. }) if matches!(self.phase, Phase::Closing | Phase::Done) => {}
            (role, ev) if self.phase != Phase::Done => {
                self.stats.local_errors.push(format!("unexpected CM event on the {role:?}: {ev:?}"));
                self.close();
            }
            _ => {}
        }
    }

    fn cm_accept(&mut self, conn: rctb_core::transport::ConnId) -> Result<(), TransportError> {
        let init = self.qp_init(&self.resp, self.recv_slots()).expect("allocated in setup");
        let mr = self.resp.mr.expect("allocated in setup");
        let mut params = AcceptParams::new(init, private_data::region(mr.remote(0), mr.len));
        params.rnr_retry_count = self.cfg.qp.rnr_retry;
        let qp = self.resp.t.cm_accept(conn, &params)?;
        self.resp.qp = Some(qp);
        // The QP is in RTS: receives must be there before the first SEND.
        self.post_initial_recvs()
    }

    fn manual_connect(&mut self) -> Result<(), (&'static str, TransportError)> {
        let req_init = self.qp_init(&self.req, 0).expect("allocated above");
        let resp_init = self.qp_init(&self.resp, self.recv_slots()).expect("allocated above");
        let req_qp = self.req.t.create_qp(&req_init).map_err(|e| ("create_qp", e))?;
        self.req.qp = Some(req_qp.id);
        let resp_qp = self.resp.t.create_qp(&resp_init).map_err(|e| ("create_qp", e))?;
        self.resp.qp = Some(resp_qp.id);
        let init = QpTransition::Init(InitAttr {
            pkey_index: 0,
            port: 1,
            access: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        });
        self.req.t.modify_qp(req_qp.id, &init).map_err(|e| ("modify_qp INIT", e))?;
        self.resp.t.modify_qp(resp_qp.id, &init).map_err(|e| ("modify_qp INIT", e))?;
        // Receives may be posted in INIT; doing it before RTR means none is
        // missing when the first SEND arrives.
        self.post_initial_recvs().map_err(|e| ("post_recv", e))?;

        // The out-of-band exchange: QPN, PSN and GID of each side.
        let (req_gid_index, req_ip) = roce_v2_ipv4(&self.req.t).map_err(|e| ("requester GID", e))?;
        let (resp_gid_index, resp_ip) = roce_v2_ipv4(&self.resp.t).map_err(|e| ("responder GID", e))?;
        let mtu = self
            .req
            .t
            .port(1)
            .map_err(|e| ("query_port", e))?
            .active_mtu
            .min(self.resp.t.port(1).map_err(|e| ("query_port", e))?.active_mtu);
        let req_psn = Psn::wrapping(self.pattern.draw("requester_psn") as u32);
        let resp_psn = Psn::wrapping(self.pattern.draw("responder_psn") as u32);
        let q = self.cfg.qp;
        let min_rnr_timer = RnrTimer::from_code(q.min_rnr_timer)
            .map_err(|e| ("min_rnr_timer", TransportError::InvalidArgument { verb: Verb::ModifyQp, source: e }))?;
        let sides = [
            (&mut self.req, req_qp.id, resp_qp.qpn, resp_psn, req_psn, resp_ip, req_gid_index),
            (&mut self.resp, resp_qp.id, req_qp.qpn, req_psn, resp_psn, req_ip, resp_gid_index),
        ];
        for (end, qp, dest_qpn, rq_psn, sq_psn, peer_ip, sgid_index) in sides {
            let rtr = QpTransition::Rtr(RtrAttr {
                path_mtu: mtu,
                dest_qpn,
                rq_psn,
                max_dest_rd_atomic: RD_ATOMIC,
                min_rnr_timer,
                av: AddressVector::new(Gid::from_ipv4(peer_ip), sgid_index),
            });
            end.t.modify_qp(qp, &rtr).map_err(|e| ("modify_qp RTR", e))?;
            let rts = QpTransition::Rts(RtsAttr {
                sq_psn,
                timeout: q.timeout,
                retry_cnt: q.retry_cnt,
                rnr_retry: q.rnr_retry,
                max_rd_atomic: RD_ATOMIC,
            });
            end.t.modify_qp(qp, &rts).map_err(|e| ("modify_qp RTS", e))?;
        }
        self.remote = self.resp.mr.map(|mr| mr.remote(0));
        self.start_running();
        Ok(())
    }

    fn post_initial_recvs(&mut self) -> Result<(), TransportError> {
        let first = self.recv_slots().min(self.cfg.count.min(u32::MAX as u64) as u32);
        for slot in 0..first {
            self.post_recv(slot as u64)?;
        }
        Ok(())
    }

    /// Posts a receive into responder slot `slot` (its wr_id is the slot).
    pub(super) fn post_recv(&mut self, slot: u64) -> Result<(), TransportError> {
        let (Some(qp), Some(mr)) = (self.resp.qp, self.resp.mr) else { return Ok(()) };
        let slot_len = self.cfg.slot_len();
        let sge = [Sge::new(mr.id, slot * slot_len, slot_len as u32)];
        // WRITE_WITH_IMM places its data by RETH; its receive needs no buffer.
        let sges: &[Sge] = if self.cfg.op == Op::WriteImm { &[] } else { &sge };
        self.resp.t.post_recv(qp, &RecvWr::new(slot, sges))?;
        self.recvs_posted += 1;
        Ok(())
    }

    fn start_running(&mut self) {
        self.phase = Phase::Running;
        self.stats.started_at = Some(self.req.t.now());
    }
}
