//! The connection manager's verbs of an [`Endpoint`]: listen, connect,
//! accept, establish, reject, disconnect, and destroying connections and
//! listeners.

use rctb_core::time::Instant;
use rctb_core::transport::*;

use crate::cm::{CM_MAX_RETRIES, CM_RESPONSE_TIMEOUT, CmMessage, Conn, ConnState, Connect, QpDriver, mad};
use crate::endpoint::Endpoint;

impl Endpoint {
    /// Listens for RDMA CM connect requests on `port`.
    pub fn cm_listen(&mut self, port: u16) -> Result<ListenId> {
        let n = &mut *self;
        if n.listeners.contains_key(&port) {
            return Err(TransportError::Busy {
                verb: Verb::CmListen,
                what: format!("port {port}"),
                by: "another listener".into(),
            });
        }
        let id = ListenId(n.alloc_id());
        n.listeners.insert(port, id);
        Ok(id)
    }

    /// Creates a QP from `params.qp`, moves it to INIT and sends a REQ to
    /// `params.remote`. The QP is the caller's to destroy, as one given to
    /// [`cm_connect_qp`](Self::cm_connect_qp) is (see there for what the CM
    /// does to it).
    pub fn cm_connect(&mut self, now: Instant, params: &ConnectParams) -> Result<(ConnId, QpId)> {
        check_private_data(Verb::CmConnect, &params.private_data)?;
        let info = self.create_qp(&params.qp).map_err(|e| rewrap(e, Verb::CmConnect))?;
        let conn = self.start_connect(now, info.id, QpDriver::Cm, params);
        Ok((conn, info.id))
    }

    /// Sends a REQ to `params.remote` for `qp`, an RC QP the caller created
    /// (`rdma_create_qp` then `rdma_connect`); `params.qp` is ignored.
    ///
    /// With [`QpDriver::Cm`] the QP must be in RESET or INIT and the CM
    /// drives it exactly as one [`cm_connect`](Self::cm_connect) creates: to
    /// INIT now if it is in RESET (one in INIT keeps the caller's access
    /// flags), to RTR and RTS when the REP arrives, to ERR on a disconnect
    /// (either side's DREQ). A REJ or a timeout before the REP leaves it in
    /// INIT. With [`QpDriver::Application`] it may be in RESET, INIT, RTR
    /// or RTS and the CM never moves it: the REP arrives as
    /// [`CmEvent::ConnectResponse`], the application applies
    /// [`cm_qp_attr`](Self::cm_qp_attr)'s RTR and RTS and answers with
    /// [`cm_establish`](Self::cm_establish).
    ///
    /// Either way the QP is bound to the connection until
    /// [`cm_destroy`](Self::cm_destroy) (or until the caller destroys the
    /// QP); the CM never destroys it, and `cm_destroy` leaves it in the
    /// state it reached, to be reset and connected again or destroyed.
    ///
    /// Errors (nothing changes): `InvalidArgument` for `private_data` over
    /// [`MAX_REQ_PRIVATE_DATA`] bytes or a `qp` bound to another connection,
    /// `InvalidHandle` for an unknown `qp`, `InvalidState` for a QP in a
    /// state the driver does not take. Every engine QP is an RC QP of the
    /// endpoint's one device, and a connection has no protection domain of
    /// its own, so there is no QP type, device or PD to mismatch.
    pub fn cm_connect_qp(
        &mut self,
        now: Instant,
        qp: QpId,
        driver: QpDriver,
        params: &ConnectParams,
    ) -> Result<ConnId> {
        check_private_data(Verb::CmConnect, &params.private_data)?;
        self.check_cm_qp(Verb::CmConnect, qp, driver)?;
        Ok(self.start_connect(now, qp, driver, params))
    }

    /// The one path of both connects: `qp` exists, in a state `driver` takes.
    fn start_connect(&mut self, now: Instant, qp: QpId, driver: QpDriver, params: &ConnectParams) -> ConnId {
        let (state, qpn) = self.qps.get(qp.0).map_or((QpState::Reset, 0), |q| (q.state, q.qpn));
        if driver == QpDriver::Cm && state == QpState::Reset {
            self.init_qp(qp);
        }
        let conn = ConnId(self.alloc_id());
        let local_psn = self.random_psn();
        let mtu = self.cfg.mtu;
        let mut c = Conn::new(ConnState::ReqSent, *params.remote.ip(), local_psn, mtu);
        c.qp = Some(qp);
        c.driver = driver;
        c.responder_resources = params.responder_resources;
        c.initiator_depth = params.initiator_depth;
        c.retry_count = params.retry_count;
        c.rnr_retry_count = params.rnr_retry_count;
        self.conns.insert(conn, c);
        let msg = CmMessage::Req {
            src_conn: conn,
            // The caller's, or an ephemeral port, as rdma_cm binds an
            // unbound id to one.
            src_port: params.src_port.unwrap_or(0xC000 | (conn.0 as u16 & 0x3FFF)),
            port: params.remote.port(),
            qpn,
            psn: local_psn,
            mtu,
            private_data: params.private_data.clone(),
            responder_resources: params.responder_resources,
            initiator_depth: params.initiator_depth,
            retry_count: params.retry_count,
            rnr_retry_count: params.rnr_retry_count,
            response_timeout: CM_RESPONSE_TIMEOUT,
            max_retries: CM_MAX_RETRIES,
        };
        self.send_reliably(now, conn, msg, CM_MAX_RETRIES);
        conn
    }

    /// Accepts a connect request: creates the QP from `params.qp`, brings
    /// it to RTS and sends the REP. The QP is the caller's to destroy, as
    /// one given to [`cm_accept_qp`](Self::cm_accept_qp) is.
    pub fn cm_accept(&mut self, now: Instant, conn: ConnId, params: &AcceptParams) -> Result<QpId> {
        self.check_accept(conn, params)?;
        let info = self.create_qp(&params.qp).map_err(|e| rewrap(e, Verb::CmAccept))?;
        self.finish_accept(now, conn, info.id, QpDriver::Cm, params)?;
        Ok(info.id)
    }

    /// Accepts a connect request on `qp`, an RC QP the caller created
    /// (`rdma_create_qp` then `rdma_accept`); `params.qp` is ignored.
    ///
    /// With [`QpDriver::Cm`] the QP must be in RESET or INIT and the CM
    /// drives it exactly as one [`cm_accept`](Self::cm_accept) creates: to
    /// INIT if it is in RESET (one in INIT keeps the caller's access
    /// flags), then to RTR and RTS before the REP goes out; to ERR when the
    /// active side rejects or times out the REP, or on a disconnect. With
    /// [`QpDriver::Application`] (RESET, INIT, RTR or RTS) the CM never
    /// moves it: the application has applied
    /// [`cm_qp_attr`](Self::cm_qp_attr)'s values before it accepts, and
    /// moves the QP to ERR itself when the connection goes down. Either way
    /// it stays bound to the connection until
    /// [`cm_destroy`](Self::cm_destroy) (or until the caller destroys it);
    /// the CM never destroys it.
    ///
    /// Errors: those of `cm_accept` (unknown `conn`, `Busy` past its
    /// request, `private_data` over [`MAX_REP_PRIVATE_DATA`] bytes), and for
    /// `qp` those of [`cm_connect_qp`](Self::cm_connect_qp). A request the
    /// QP cannot be connected for (a peer QPN out of range) is
    /// `InvalidArgument` naming `qp`, the QP back in RESET if it was there.
    pub fn cm_accept_qp(
        &mut self,
        now: Instant,
        conn: ConnId,
        qp: QpId,
        driver: QpDriver,
        params: &AcceptParams,
    ) -> Result<()> {
        self.check_accept(conn, params)?;
        let state = self.check_cm_qp(Verb::CmAccept, qp, driver)?;
        let r = self.finish_accept(now, conn, qp, driver, params);
        if r.is_err() && state == QpState::Reset {
            let ip = self.cfg.ip;
            if let Some(q) = self.qps.get_mut(qp.0) {
                let _ = q.modify(&QpTransition::Reset, ip, &mut self.comps);
            }
        }
        r
    }

    /// What both accepts check before any QP is touched.
    fn check_accept(&self, conn: ConnId, params: &AcceptParams) -> Result<()> {
        if params.private_data.len() > MAX_REP_PRIVATE_DATA {
            return Err(TransportError::invalid(
                Verb::CmAccept,
                "private_data",
                params.private_data.len() as u64,
                "REP private data is at most 196 bytes",
            ));
        }
        let c = self.conns.get(&conn).ok_or_else(|| TransportError::handle(Verb::CmAccept, conn))?;
        if c.state != ConnState::ReqRcvd {
            return Err(TransportError::Busy {
                verb: Verb::CmAccept,
                what: conn.to_string(),
                by: "a connection past its request".into(),
            });
        }
        Ok(())
    }

    /// The one path of both accepts: `conn` waits for its answer, `qp`
    /// exists in a state `driver` takes.
    fn finish_accept(
        &mut self,
        now: Instant,
        conn: ConnId,
        qp: QpId,
        driver: QpDriver,
        params: &AcceptParams,
    ) -> Result<()> {
        let c = self.conns.get(&conn).ok_or_else(|| TransportError::handle(Verb::CmAccept, conn))?;
        // The initiator depth we may use is bounded by what the peer offered.
        let initiator_depth = params.initiator_depth.min(c.responder_resources);
        let attrs = Connect {
            peer_ip: c.remote_ip,
            mtu: c.mtu,
            dest_qpn: c.remote_qpn,
            // As the kernel's ib_cm: the REP's starting PSN is the one this
            // side receives from, the REQ's the one it sends from.
            rq_psn: c.local_psn,
            sq_psn: c.remote_psn,
            responder_resources: params.responder_resources,
            initiator_depth,
            retry_count: c.retry_count,
            rnr_retry_count: params.rnr_retry_count,
        };
        let (mtu, lpsn, peer) = (c.mtu, c.local_psn, c.peer);
        let (state, qpn) = self.qps.get(qp.0).map_or((QpState::Reset, 0), |q| (q.state, q.qpn));
        if driver == QpDriver::Cm {
            if state == QpState::Reset {
                self.init_qp(qp);
            }
            let res = self.connect_qp(qp, attrs);
            if let Err(rule) = res {
                return Err(TransportError::invalid(Verb::CmAccept, "qp", qpn as u64, rule));
            }
        }
        let c = self.conns.get_mut(&conn).expect("checked above");
        c.qp = Some(qp);
        c.driver = driver;
        c.attrs = Some(attrs);
        c.state = ConnState::RepSent;
        let retries = c.retries_left;
        self.awaiting_rtu.insert(qp, conn);
        if let Some((_, peer_conn)) = peer {
            let msg = CmMessage::Rep {
                dst_conn: peer_conn,
                src_conn: conn,
                qpn,
                psn: lpsn,
                mtu,
                private_data: params.private_data.clone(),
                responder_resources: params.responder_resources,
                initiator_depth,
                rnr_retry_count: params.rnr_retry_count,
            };
            self.send_reliably(now, conn, msg, retries);
        }
        Ok(())
    }

    /// Checks a caller's QP for a CM connect or accept; its state.
    fn check_cm_qp(&self, verb: Verb, qp: QpId, driver: QpDriver) -> Result<QpState> {
        let q = self.qps.get(qp.0).ok_or_else(|| TransportError::handle(verb, qp))?;
        if self.conns.values().any(|c| c.qp == Some(qp)) {
            return Err(TransportError::invalid(
                verb,
                "qp",
                q.qpn as u64,
                "is bound to a connection until that one is destroyed (cm_destroy)",
            ));
        }
        let (ok, what) = match driver {
            QpDriver::Cm => (
                matches!(q.state, QpState::Reset | QpState::Init),
                "a CM connect or accept that drives the QP (it must be in RESET or INIT)",
            ),
            QpDriver::Application => (
                matches!(q.state, QpState::Reset | QpState::Init | QpState::Rtr | QpState::Rts),
                "a CM connect or accept on an application-driven QP (it must be in RESET, INIT, RTR or RTS)",
            ),
        };
        if !ok {
            return Err(TransportError::InvalidState { verb, state: q.state, what });
        }
        Ok(q.state)
    }

    /// Completes an application-driven connect after its
    /// [`CmEvent::ConnectResponse`]: sends the RTU (`rdma_establish`). The
    /// application has moved its QP to RTR and RTS with
    /// [`cm_qp_attr`](Self::cm_qp_attr)'s values first (the peer may send
    /// as soon as the RTU arrives); the engine does not check. No event
    /// follows, as librdmacm reports none for `rdma_establish`; a REP that
    /// comes again is answered with the RTU again, as for any connection.
    ///
    /// Errors: `InvalidHandle` for an unknown `conn`; `InvalidArgument`
    /// naming `conn` for one that is not waiting for it (a CM-driven one,
    /// or one whose REP has not come, or already established).
    pub fn cm_establish(&mut self, _now: Instant, conn: ConnId) -> Result<()> {
        let verb = Verb::CmEstablish;
        let c = self.conns.get_mut(&conn).ok_or_else(|| TransportError::handle(verb, conn))?;
        if c.state != ConnState::RepRcvd {
            return Err(TransportError::invalid(
                verb,
                "conn",
                conn.0 as u64,
                "must be an application-driven connect whose REP arrived (CmEvent::ConnectResponse) and \
                 that is not established yet",
            ));
        }
        let Some((peer_ip, peer_conn)) = c.peer else {
            return Err(TransportError::invalid(verb, "conn", conn.0 as u64, "has no peer"));
        };
        c.state = ConnState::Established;
        let rtu = CmMessage::Rtu { dst_conn: peer_conn, src_conn: conn };
        // Kept, not timed: it answers a REP that comes again.
        c.sent = Some(rtu.clone());
        self.send_cm(peer_ip, rtu);
        Ok(())
    }

    /// The attributes the CM moves (or would move) `conn`'s QP to `target`
    /// with, as `rdma_init_qp_attr` gives them: for INIT the port and
    /// access flags; for RTR the peer's QPN, the PSN to receive from, the
    /// path MTU, `max_dest_rd_atomic`, the min RNR timer and the address
    /// vector (the peer's IPv4-mapped GID, source GID index 1); for RTS
    /// the PSN to send from, the ACK timeout, the retry counts and
    /// `max_rd_atomic`. An application that drives its own QP applies
    /// them with `modify_qp`; they are the values the CM applies to a QP
    /// it drives.
    ///
    /// INIT's are known at once. RTR's and RTS's once the peer's QPN and
    /// PSN are: on the passive side from the request (until the accept,
    /// with the read depths and RNR retry count the request asked for, as
    /// the kernel's CM reports them; the accept's replace them), on the
    /// active side from the REP. Before that, and for a `target` other
    /// than INIT, RTR or RTS, `InvalidArgument`; `InvalidHandle` for an
    /// unknown `conn`.
    pub fn cm_qp_attr(&self, conn: ConnId, target: QpState) -> Result<QpTransition> {
        let verb = Verb::CmQpAttr;
        let c = self.conns.get(&conn).ok_or_else(|| TransportError::handle(verb, conn))?;
        let known = |attrs: Option<Connect>| {
            attrs.ok_or_else(|| {
                TransportError::invalid(
                    verb,
                    "conn",
                    conn.0 as u64,
                    "RTR and RTS attributes are known once the peer's QPN and PSN are \
                     (the request on the passive side, the REP on the active side)",
                )
            })
        };
        match target {
            QpState::Init => Ok(crate::cm::init_attr()),
            QpState::Rtr => Ok(QpTransition::Rtr(known(c.attrs)?.rtr())),
            QpState::Rts => Ok(QpTransition::Rts(known(c.attrs)?.rts())),
            other => Err(TransportError::invalid(verb, "target", other as u64, "must be INIT, RTR or RTS")),
        }
    }

    /// Rejects a connect request with `private_data` (REJ, consumer defined).
    pub fn cm_reject(&mut self, conn: ConnId, private_data: &[u8]) -> Result<()> {
        if private_data.len() > MAX_REJ_PRIVATE_DATA {
            return Err(TransportError::invalid(
                Verb::CmReject,
                "private_data",
                private_data.len() as u64,
                "REJ private data is at most 148 bytes",
            ));
        }
        let c = self.conns.get_mut(&conn).ok_or_else(|| TransportError::handle(Verb::CmReject, conn))?;
        if c.state != ConnState::ReqRcvd {
            return Err(TransportError::Busy {
                verb: Verb::CmReject,
                what: conn.to_string(),
                by: "a connection past its request".into(),
            });
        }
        c.state = ConnState::Closed;
        if let Some((peer_ip, peer_conn)) = c.peer {
            let msg = CmMessage::Rej {
                dst_conn: peer_conn,
                src_conn: conn,
                rejected: crate::cm::Rejected::Req,
                reason: mad::reason::CONSUMER_DEFINED,
                private_data: private_data.to_vec(),
            };
            // Kept: a REQ that comes again gets the same answer.
            c.sent = Some(msg.clone());
            self.send_cm(peer_ip, msg);
        }
        Ok(())
    }

    /// Sends a DREQ; the QP goes to ERR.
    pub fn cm_disconnect(&mut self, now: Instant, conn: ConnId) -> Result<()> {
        if !self.conns.contains_key(&conn) {
            return Err(TransportError::handle(Verb::CmDisconnect, conn));
        }
        self.disconnect_local(now, conn, true);
        Ok(())
    }

    /// Releases a connection id.
    pub fn cm_destroy(&mut self, conn: ConnId) -> Result<()> {
        self.conns.remove(&conn).map(|_| ()).ok_or_else(|| TransportError::handle(Verb::CmDestroy, conn))
    }

    /// Stops listening.
    pub fn cm_close_listener(&mut self, listener: ListenId) -> Result<()> {
        let port = self.listeners.iter().find(|(_, l)| **l == listener).map(|(p, _)| *p);
        match port {
            Some(p) => {
                self.listeners.remove(&p);
                Ok(())
            }
            None => Err(TransportError::handle(Verb::CmDestroy, listener)),
        }
    }
}

/// A REQ's private data fits the REQ.
fn check_private_data(verb: Verb, private_data: &[u8]) -> Result<()> {
    if private_data.len() > MAX_REQ_PRIVATE_DATA {
        return Err(TransportError::invalid(
            verb,
            "private_data",
            private_data.len() as u64,
            "REQ private data is at most 56 bytes",
        ));
    }
    Ok(())
}

fn rewrap(e: TransportError, verb: Verb) -> TransportError {
    match e {
        TransportError::InvalidHandle { handle, .. } => TransportError::InvalidHandle { verb, handle },
        TransportError::InvalidArgument { source, .. } => TransportError::InvalidArgument { verb, source },
        other => other,
    }
}
