//! The [`Transport`] trait's verbs on [`VerbsTransport`]: each checks its
//! handles in the tables `mod.rs` keeps, then calls libibverbs or
//! librdmacm.

use super::*;

impl Transport for VerbsTransport {
    fn device(&self) -> Result<DeviceInfo> {
        Ok(self.ctx.info.clone())
    }

    fn port(&self, port: u8) -> Result<PortInfo> {
        self.ctx.port(port)
    }

    fn alloc_pd(&mut self) -> Result<PdId> {
        let pd = Pd::alloc(&self.ctx)?;
        let id = PdId(self.alloc_id());
        self.pds.insert(id, Arc::new(pd));
        Ok(id)
    }

    fn dealloc_pd(&mut self, pd: PdId) -> Result<()> {
        let arc = self.pd(pd, Verb::DeallocPd)?;
        if Arc::strong_count(arc) > 1 {
            let mrs = self.mrs.values().filter(|m| Arc::ptr_eq(&m.pd, arc)).count();
            let srqs = self.srqs.values().filter(|s| Arc::ptr_eq(&s.pd, arc)).count();
            let qps = self
                .qps
                .values()
                .filter(|s| match s {
                    QpSlot::Ready(q) => Arc::ptr_eq(&q.parents.pd, arc),
                    QpSlot::Pending(p) => Arc::ptr_eq(&p.parents.pd, arc),
                })
                .count();
            return Err(TransportError::Busy {
                verb: Verb::DeallocPd,
                what: pd.to_string(),
                by: format!("{mrs} memory regions, {qps} queue pairs, {srqs} shared receive queues"),
            });
        }
        let arc = self.pds.get_mut(&pd).expect("looked up above");
        Arc::get_mut(arc).expect("the only reference (strong count was 1)").dealloc()?;
        self.pds.remove(&pd);
        Ok(())
    }

    fn reg_mr(&mut self, pd: PdId, len: u64, access: Access) -> Result<MrInfo> {
        let pd_arc = Arc::clone(self.pd(pd, Verb::RegMr)?);
        if len > self.ctx.info.max_mr_size {
            return Err(TransportError::invalid(Verb::RegMr, "len", len, "exceeds the device's max_mr_size"));
        }
        // Verbs refuses these with EINVAL; say which rule.
        if (access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC))
            && !access.contains(Access::LOCAL_WRITE)
        {
            return Err(TransportError::invalid(
                Verb::RegMr,
                "access",
                access.bits().into(),
                "REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE",
            ));
        }
        let id = MrId(self.alloc_id());
        let mr = MemoryRegion::register(&pd_arc, id, len, access)?;
        let info = mr.info;
        self.mrs.insert(id, mr);
        Ok(info)
    }

    fn dereg_mr(&mut self, mr: MrId) -> Result<()> {
        let region = self.mrs.get_mut(&mr).ok_or_else(|| TransportError::handle(Verb::DeregMr, mr))?;
        // On failure the region stays registered and listed (with its
        // buffer), so a retry can work.
        region.dereg()?;
        self.mrs.remove(&mr); // Frees the buffer.
        Ok(())
    }

    fn mr_info(&self, mr: MrId) -> Result<MrInfo> {
        Ok(self.mr(mr, Verb::MrAccess)?.info)
    }

    fn mr_write(&mut self, mr: MrId, offset: u64, data: &[u8]) -> Result<()> {
        self.mrs.get_mut(&mr).ok_or_else(|| TransportError::handle(Verb::MrAccess, mr))?.write(offset, data)
    }

    fn mr_read(&self, mr: MrId, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.mr(mr, Verb::MrAccess)?.read(offset, buf)
    }

    fn mr_view(&self, mr: MrId, offset: u64, len: u64, f: &mut dyn MrVisitor) -> Result<()> {
        self.mr(mr, Verb::MrAccess)?.view(offset, len, f)
    }

    fn create_cq(&mut self, depth: u32) -> Result<CqId> {
        let max = self.ctx.info.max_cqe;
        if depth == 0 || depth > max {
            return Err(TransportError::invalid(Verb::CreateCq, "depth", depth.into(), "must be 1..=max_cqe"));
        }
        let cq = Cq::create(&self.ctx, depth)?;
        let id = CqId(self.alloc_id());
        self.cqs.insert(id, CqEntry { cq: Arc::new(cq), polled: VecDeque::new(), armed: false });
        Ok(id)
    }

    fn destroy_cq(&mut self, cq: CqId) -> Result<()> {
        let arc = self.cq_arc(cq, Verb::DestroyCq)?;
        if Arc::strong_count(arc) > 1 {
            let users = self
                .qps
                .values()
                .filter(|s| {
                    let p = match s {
                        QpSlot::Ready(q) => &q.parents,
                        QpSlot::Pending(p) => &p.parents,
                    };
                    Arc::ptr_eq(&p.send_cq, arc) || Arc::ptr_eq(&p.recv_cq, arc)
                })
                .count();
            return Err(TransportError::Busy {
                verb: Verb::DestroyCq,
                what: cq.to_string(),
                by: format!("{users} queue pairs"),
            });
        }
        let entry = self.cqs.get_mut(&cq).expect("looked up above");
        Arc::get_mut(&mut entry.cq).expect("the only reference (strong count was 1)").destroy()?;
        self.cqs.remove(&cq);
        Ok(())
    }

    fn create_qp(&mut self, init: &QpInit) -> Result<QpInfo> {
        let parents = self.qp_parents(init, Verb::CreateQp)?;
        let id = QpId(self.alloc_id());
        let q = QueuePair::create(id, init, parents)?;
        Ok(self.insert_qp(q))
    }

    fn modify_qp(&mut self, qp: QpId, transition: &QpTransition) -> Result<()> {
        self.qp_mut(qp, Verb::ModifyQp)?;
        // Attribute rules first (no device call), then what the port allows.
        modify_attr(transition)?;
        if let QpTransition::Rtr(rtr) = transition {
            let av = &rtr.av;
            let gid = self.ctx.gid(av.port, av.sgid_index, Verb::ModifyQp);
            if !gid.is_ok_and(|g| !g.is_zero()) {
                return Err(TransportError::invalid(
                    Verb::ModifyQp,
                    "sgid_index",
                    av.sgid_index.into(),
                    "no such entry in the port's GID table",
                ));
            }
            if rtr.path_mtu > self.ctx.active_mtu(av.port, Verb::ModifyQp)? {
                return Err(TransportError::invalid(
                    Verb::ModifyQp,
                    "path_mtu",
                    rtr.path_mtu.bytes().into(),
                    "exceeds the port's active MTU",
                ));
            }
        }
        self.qp_mut(qp, Verb::ModifyQp)?.modify(transition)
    }

    fn query_qp(&self, qp: QpId) -> Result<QpInfo> {
        match self.qps.get(&qp) {
            Some(QpSlot::Ready(q)) => {
                let state = q.device_state(Verb::QueryQp)?;
                Ok(QpInfo { id: qp, qpn: q.qpn, state })
            }
            Some(QpSlot::Pending(_)) => Err(not_created(Verb::QueryQp)),
            None => Err(TransportError::handle(Verb::QueryQp, qp)),
        }
    }

    fn destroy_qp(&mut self, qp: QpId) -> Result<()> {
        let slot = self.qps.get_mut(&qp).ok_or_else(|| TransportError::handle(Verb::DestroyQp, qp))?;
        // A pending QP was never created: dropping the slot releases its
        // parents. If its connection resolves the route later, that
        // connection reports Unreachable.
        if let QpSlot::Ready(q) = slot {
            q.destroy()?;
            if let Some(c) = q.cm.and_then(|c| self.conns.get(&c)) {
                c.id.forget_qp();
            }
        }
        self.qps.remove(&qp);
        Ok(())
    }

    fn post_send<'a>(&mut self, qp: QpId, wr: &SendWr<'a>) -> Result<()> {
        if wr.len() > u64::from(u32::MAX) {
            return Err(TransportError::invalid(
                Verb::PostSend,
                "length",
                wr.len(),
                "a message is at most 2^32-1 bytes",
            ));
        }
        self.qp_mut(qp, Verb::PostSend)?;
        self.with_sges(wr.sges, Verb::PostSend, |me, sges| me.qp_mut(qp, Verb::PostSend)?.post_send(wr, sges))
    }

    fn post_recv<'a>(&mut self, qp: QpId, wr: &RecvWr<'a>) -> Result<()> {
        self.qp_mut(qp, Verb::PostRecv)?;
        self.with_sges(wr.sges, Verb::PostRecv, |me, sges| me.qp_mut(qp, Verb::PostRecv)?.post_recv(wr, sges))
    }

    /// One chained `ibv_post_recv`. Every WR is checked (SGE count, regions,
    /// QP state) before any is posted.
    fn post_recv_many<'a>(&mut self, qp: QpId, wrs: &[RecvWr<'a>]) -> Result<()> {
        self.qp_mut(qp, Verb::PostRecv)?;
        let mut sges = std::mem::take(&mut self.scratch.sges);
        let mut chain = std::mem::take(&mut self.scratch.recv_chain);
        sges.clear();
        let r = wrs
            .iter()
            .try_for_each(|wr| self.resolve_sges(wr.sges, Verb::PostRecv, &mut sges))
            .and_then(|()| self.qp_mut(qp, Verb::PostRecv)?.post_recv_chain(wrs, &mut sges, &mut chain));
        self.scratch.sges = sges;
        self.scratch.recv_chain = chain;
        r
    }

    fn poll_cq(&mut self, cq: CqId, max: usize, out: &mut Vec<Completion>) -> Result<usize> {
        let entry = self.cqs.get_mut(&cq).ok_or_else(|| TransportError::handle(Verb::PollCq, cq))?;
        let buffered = max.min(entry.polled.len());
        out.extend(entry.polled.drain(..buffered));
        let fetched = fetch_completions(entry, &mut self.qps, &self.qpn_to_qp, max - buffered)?;
        out.extend(entry.polled.drain(..));
        Ok(buffered + fetched)
    }

    fn create_srq(&mut self, init: &SrqInit) -> Result<SrqId> {
        let verb = Verb::CreateSrq;
        let pd = Arc::clone(self.pd(init.pd, verb)?);
        let dev = self.ctx.srq_limits;
        if dev.max_srq == 0 {
            return Err(TransportError::Unsupported {
                verb,
                what: "shared receive queues (the device's max_srq is 0)",
            });
        }
        for (field, v, max, rule) in [
            ("max_wr", init.max_wr, dev.max_srq_wr, "must be 1..=the device's max_srq_wr"),
            ("max_sge", init.max_sge, dev.max_srq_sge, "must be 1..=the device's max_srq_sge"),
        ] {
            if v == 0 || v > max {
                return Err(TransportError::invalid(verb, field, v.into(), rule));
            }
        }
        if init.limit > init.max_wr {
            return Err(TransportError::invalid(verb, "limit", init.limit.into(), "exceeds the SRQ's max_wr"));
        }
        let srq = Srq::create(&pd, init)?;
        let id = SrqId(self.alloc_id());
        self.srqs.insert(id, Arc::new(srq));
        Ok(id)
    }

    fn modify_srq(&mut self, srq: SrqId, limit: u32) -> Result<()> {
        self.srq_arc(srq, Verb::ModifySrq)?.modify_limit(limit, Verb::ModifySrq)
    }

    fn destroy_srq(&mut self, srq: SrqId) -> Result<()> {
        let arc = self.srq_arc(srq, Verb::DestroySrq)?;
        if Arc::strong_count(arc) > 1 {
            let users = self
                .qps
                .values()
                .filter(|s| {
                    let p = match s {
                        QpSlot::Ready(q) => &q.parents,
                        QpSlot::Pending(p) => &p.parents,
                    };
                    p.srq.as_ref().is_some_and(|s| Arc::ptr_eq(s, arc))
                })
                .count();
            return Err(TransportError::Busy {
                verb: Verb::DestroySrq,
                what: srq.to_string(),
                by: format!("{users} queue pairs"),
            });
        }
        let arc = self.srqs.get_mut(&srq).expect("looked up above");
        Arc::get_mut(arc).expect("the only reference (strong count was 1)").destroy()?;
        self.srqs.remove(&srq);
        Ok(())
    }

    fn post_srq_recv<'a>(&mut self, srq: SrqId, wr: &RecvWr<'a>) -> Result<()> {
        self.srq_arc(srq, Verb::PostSrqRecv)?;
        self.with_sges(wr.sges, Verb::PostSrqRecv, |me, sges| me.srq_arc(srq, Verb::PostSrqRecv)?.post_recv(wr, sges))
    }

    fn poll_async_event(&mut self) -> Result<Option<AsyncEvent>> {
        // Read and acknowledged at once; the element is only compared.
        let Some(raw) = self.ctx.next_async_event()? else { return Ok(None) };
        let event = self.async_event(&raw);
        tracing::debug!(event_type = raw.event_type, ?event, "async event");
        Ok(Some(event))
    }

    fn cm_listen(&mut self, port: u16) -> Result<ListenId> {
        self.listen(port)
    }

    fn cm_connect(&mut self, params: &ConnectParams) -> Result<(ConnId, QpId)> {
        self.connect(params)
    }

    fn cm_accept(&mut self, conn: ConnId, params: &AcceptParams) -> Result<QpId> {
        self.accept(conn, params)
    }

    fn cm_reject(&mut self, conn: ConnId, private_data: &[u8]) -> Result<()> {
        self.reject(conn, private_data)
    }

    fn cm_disconnect(&mut self, conn: ConnId) -> Result<()> {
        self.disconnect(conn)
    }

    fn cm_destroy(&mut self, conn: ConnId) -> Result<()> {
        self.destroy_conn(conn)
    }

    fn cm_close_listener(&mut self, listener: ListenId) -> Result<()> {
        self.close_listener(listener)
    }

    /// Pops a queued event; with none queued, reads the channel, unless
    /// the `wait` just before was woken by a CQ and its `ppoll` saw the
    /// channel empty (an observation used once: the next call reads).
    fn cm_poll(&mut self) -> Option<CmEvent> {
        if self.cm_events.is_empty() {
            if self.cm_channel == CmChannelState::SeenEmpty {
                self.cm_channel = CmChannelState::Unknown;
                return None;
            }
            self.pump_cm();
        }
        self.cm_events.pop_front()
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(monotonic_nanos())
    }

    fn wait(&mut self, cqs: &[CqId], deadline: Instant) -> Result<Readiness> {
        self.wait_until(cqs, deadline)
    }
}
