//! The RDMA side of the target: CM events and connection requests, queue
//! set-up and teardown, receive slots, fetching a command's data, and
//! posting (or delaying, or dropping) the responses.

use super::*;

impl NvmeTarget {
    pub(super) fn on_cm<T: Transport>(&mut self, t: &mut T, ev: CmEvent) -> Result<(), TargetError> {
        match ev {
            CmEvent::ConnectRequest { conn, private_data, .. } => self.on_connect_request(t, conn, &private_data),
            CmEvent::Established { conn, .. } => {
                if let Some(q) = self.by_conn.get(&conn).and_then(|k| self.queues.get_mut(k)) {
                    q.established = true;
                }
                Ok(())
            }
            CmEvent::Disconnected { conn } => {
                if let Some(key) = self.by_conn.get(&conn).copied() {
                    self.destroy_queue(t, key);
                } else {
                    let _ = t.cm_destroy(conn);
                }
                Ok(())
            }
            CmEvent::Rejected { conn, .. } | CmEvent::Unreachable { conn, .. } => {
                let _ = t.cm_destroy(conn);
                Ok(())
            }
            // An event a later transport adds: nothing of the target's changes.
            _ => Ok(()),
        }
    }

    pub(super) fn reject<T: Transport>(
        &mut self,
        t: &mut T,
        conn: ConnId,
        status: RejectStatus,
    ) -> Result<(), TargetError> {
        self.stats.rejected_connects += 1;
        t.cm_reject(conn, &CmReject::new(status).encode())?;
        let _ = t.cm_destroy(conn);
        Ok(())
    }

    pub(super) fn on_connect_request<T: Transport>(
        &mut self,
        t: &mut T,
        conn: ConnId,
        pd_bytes: &[u8],
    ) -> Result<(), TargetError> {
        let req = match CmRequest::decode(pd_bytes) {
            Ok(r) => r,
            Err(ProtocolError::Short { .. }) => return self.reject(t, conn, RejectStatus::InvalidLength),
            Err(_) => return self.reject(t, conn, RejectStatus::InvalidRecfmt),
        };
        let max =
            if req.qid == 0 { ADMIN_QUEUE_DEPTH.max(32) } else { self.cfg.mqes.saturating_add(1).min(MAX_QUEUE_DEPTH) };
        if let Some(status) = req.check(max) {
            return self.reject(t, conn, status);
        }
        let depth = req.hrqsize;
        let pd = self.pd.expect("allocated in run");
        let capsule_len = if req.qid == 0 { COMMAND_LEN as u64 } else { self.cfg.ioccsz as u64 * 16 };
        let slot_data = if req.qid == 0 { 64 * 1024 } else { self.cfg.max_transfer() };
        let cq = t.create_cq(4 * depth as u32 + 8)?;
        let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
        let recv_mr = t.reg_mr(pd, capsule_len * depth as u64, Access::LOCAL_WRITE)?;
        let rsp_mr = t.reg_mr(pd, COMPLETION_LEN as u64 * depth as u64, Access::LOCAL_WRITE)?;
        let data_mr = t.reg_mr(pd, slot_data * depth as u64, access)?;
        let caps = QpCaps {
            max_send_wr: 3 * depth as u32,
            max_recv_wr: depth as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let init = QpInit { pd, send_cq: cq, recv_cq: cq, caps, sq_sig_all: false, srq: None };
        let accept = CmAccept { recfmt: 0, crqsize: depth };
        let mut params = AcceptParams::new(init, accept.encode().to_vec());
        params.responder_resources = 16;
        params.initiator_depth = 16;
        let qp = match t.cm_accept(conn, &params) {
            Ok(qp) => qp,
            Err(e) => {
                let _ = t.dereg_mr(recv_mr.id);
                let _ = t.dereg_mr(rsp_mr.id);
                let _ = t.dereg_mr(data_mr.id);
                let _ = t.destroy_cq(cq);
                return Err(e.into());
            }
        };
        let key = self.next_key;
        self.next_key += 1;
        let slot = Slot::new(SlotState::Free, 0);
        let q = Queue {
            conn,
            qp,
            cq,
            qid: req.qid,
            depth,
            cntlid: None,
            capsule_len,
            recv_mr,
            rsp_mr,
            data_mr,
            slots: vec![slot; depth as usize],
            sq_head: 0,
            established: false,
        };
        for i in 0..depth as usize {
            let sge = [Sge::new(recv_mr.id, i as u64 * capsule_len, capsule_len as u32)];
            t.post_recv(qp, &RecvWr::new(wr_id(WR_RECV, key, i), &sge))?;
        }
        self.queues.insert(key, q);
        self.by_conn.insert(conn, key);
        self.stats.connections += 1;
        Ok(())
    }

    pub(super) fn destroy_queue<T: Transport>(&mut self, t: &mut T, key: u64) {
        let Some(q) = self.queues.remove(&key) else { return };
        self.by_conn.remove(&q.conn);
        let _ = t.cm_disconnect(q.conn);
        let _ = t.modify_qp(q.qp, &QpTransition::Err);
        let _ = t.destroy_qp(q.qp);
        let _ = t.cm_destroy(q.conn);
        let _ = t.destroy_cq(q.cq);
        for mr in [q.recv_mr, q.rsp_mr, q.data_mr] {
            let _ = t.dereg_mr(mr.id);
        }
        // The admin queue going away ends its controller (as nvmet does).
        if q.qid == 0
            && let Some(c) = q.cntlid
        {
            self.controllers.remove(&c);
        }
    }

    pub(super) fn poll_queue<T: Transport>(&mut self, t: &mut T, key: u64) -> Result<(), TargetError> {
        let Some(cq) = self.queues.get(&key).map(|q| q.cq) else { return Ok(()) };
        let mut comps = std::mem::take(&mut self.scratch);
        comps.clear();
        t.poll_cq(cq, usize::MAX, &mut comps)?;
        for c in &comps {
            // Gone, or the power is failing: nothing more is taken.
            if !self.queues.contains_key(&key) || self.crash_pending {
                break;
            }
            let slot = (c.wr_id & 0xFFFF) as usize;
            if !c.status.is_success() {
                // The connection broke (host gone, flush after ERR): drop it.
                self.destroy_queue(t, key);
                break;
            }
            match c.wr_id >> 56 {
                WR_RECV => self.on_capsule(t, key, slot, c.byte_len)?,
                WR_READ => self.on_data_read(t, key, slot)?,
                WR_SEND => {
                    if let Some(q) = self.queues.get_mut(&key) {
                        q.slots[slot].state = SlotState::Free;
                        q.slots[slot].cmd = None;
                    }
                }
                _ => {}
            }
        }
        self.scratch = comps;
        Ok(())
    }

    /// A command capsule arrived in receive slot `rslot`.
    pub(super) fn on_capsule<T: Transport>(
        &mut self,
        t: &mut T,
        key: u64,
        rslot: usize,
        len: u32,
    ) -> Result<(), TargetError> {
        let q = self.queues.get_mut(&key).expect("checked by the caller");
        let mut capsule = vec![0u8; len as usize];
        t.mr_read(q.recv_mr.id, rslot as u64 * q.capsule_len, &mut capsule)?;
        // The receive goes back at once: the capsule is copied out.
        let sge = [Sge::new(q.recv_mr.id, rslot as u64 * q.capsule_len, q.capsule_len as u32)];
        t.post_recv(q.qp, &RecvWr::new(wr_id(WR_RECV, key, rslot), &sge))?;
        q.sq_head = (q.sq_head + 1) % q.depth;
        self.stats.commands += 1;
        if capsule.len() < COMMAND_LEN {
            return Ok(()); // Shorter than a command: nothing to answer.
        }
        let cid = u16::from_le_bytes([capsule[2], capsule[3]]);
        let Some(slot) = q.slots.iter().position(|s| s.state == SlotState::Free) else {
            return Ok(()); // The host overran the queue: nvmet drops it too.
        };
        q.slots[slot] = Slot::new(SlotState::Responding, cid);
        // nvmet-rdma's SGL check: a data block descriptor must be the
        // offset (in-capsule) subtype; other types are refused.
        let sgl_type = capsule[39];
        if sgl_type >> 4 == 0 && sgl_type & 0xF != 1 {
            return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_INVALID_FIELD, true), 0);
        }
        let Ok(raw) = Command::decode(&capsule) else {
            return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_SGL_INVALID_TYPE, true), 0);
        };
        let q = self.queues.get_mut(&key).expect("present");
        let kind = if q.qid == 0 { QueueKind::Admin } else { QueueKind::Io };
        let cmd = match NvmeCommand::from_command(&raw, kind) {
            Ok(c) => c,
            Err(ProtocolError::Field { field: "opcode" | "fctype", .. }) => {
                return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_INVALID_OPCODE, true), 0);
            }
            Err(_) => return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_INVALID_FIELD, true), 0),
        };
        self.queues.get_mut(&key).expect("present").slots[slot].cmd = Some(cmd);
        // Commands that bring data to the target fetch it first.
        let data_in = match cmd {
            NvmeCommand::Connect { sgl, .. } => Some((sgl, CONNECT_DATA_LEN as u64)),
            // An unknown namespace is answered as such in `execute`.
            NvmeCommand::Write { sgl, nsid, blocks, .. } => {
                self.lba_size(key, nsid).map(|lba| (sgl, blocks as u64 * lba))
            }
            _ => None,
        };
        if let Some((sgl, need)) = data_in {
            if need > self.slot_capacity(key) {
                return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_INVALID_FIELD, true), 0);
            }
            if sgl.len() as u64 != need {
                return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_SGL_INVALID_DATA_LENGTH, true), 0);
            }
            match sgl {
                Sgl::Keyed { addr, len, key: rkey, .. } => {
                    let q = self.queues.get_mut(&key).expect("present");
                    q.slots[slot].state = SlotState::Reading;
                    let stage = slot as u64 * (q.data_mr.len / q.depth as u64);
                    let sge = [Sge::new(q.data_mr.id, stage, len)];
                    let wr = SendWr::new(
                        wr_id(WR_READ, key, slot),
                        SendOp::Read { remote: RemoteAddr { addr, rkey } },
                        &sge,
                    );
                    t.post_send(q.qp, &wr)?;
                    return Ok(());
                }
                Sgl::InCapsule { offset, len } => {
                    let start = COMMAND_LEN as u64 + offset;
                    let end = start + len as u64;
                    if end > capsule.len() as u64 || offset != 0 {
                        return self.respond(
                            t,
                            key,
                            slot,
                            Status::new(SCT_GENERIC, SC_SGL_INVALID_DATA_LENGTH, true),
                            0,
                        );
                    }
                    if matches!(cmd, NvmeCommand::Write { .. }) {
                        self.stats.in_capsule_writes += 1;
                    }
                    let q = self.queues.get_mut(&key).expect("present");
                    let stage = slot as u64 * (q.data_mr.len / q.depth as u64);
                    t.mr_write(q.data_mr.id, stage, &capsule[start as usize..end as usize])?;
                    return self.on_data_read(t, key, slot);
                }
                Sgl::None => {
                    return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_SGL_INVALID_DATA_LENGTH, true), 0);
                }
            }
        }
        self.execute(t, key, slot, &[])
    }

    #[inline]
    pub(super) fn slot_capacity(&self, key: u64) -> u64 {
        self.queues.get(&key).map_or(0, |q| q.data_mr.len / q.depth as u64)
    }

    #[inline]
    pub(super) fn lba_size(&self, key: u64, nsid: u32) -> Option<u64> {
        let q = self.queues.get(&key)?;
        let c = self.controllers.get(&q.cntlid?)?;
        let s = &self.subsystems[c.subsystem?];
        s.namespaces.iter().find(|n| n.cfg.nsid == nsid).map(|n| n.cfg.lba_size as u64)
    }

    /// The data of a Connect or Write has arrived in the staging slot.
    pub(super) fn on_data_read<T: Transport>(&mut self, t: &mut T, key: u64, slot: usize) -> Result<(), TargetError> {
        let Some(q) = self.queues.get(&key) else { return Ok(()) };
        let Some(cmd) = q.slots[slot].cmd else { return Ok(()) };
        let len = match cmd {
            NvmeCommand::Connect { .. } => CONNECT_DATA_LEN as u64,
            NvmeCommand::Write { nsid, blocks, .. } => blocks as u64 * self.lba_size(key, nsid).unwrap_or(0),
            _ => 0,
        };
        let stage = slot as u64 * (q.data_mr.len / q.depth as u64);
        let mut data = vec![0u8; len as usize];
        t.mr_read(q.data_mr.id, stage, &mut data)?;
        self.queues.get_mut(&key).expect("present").slots[slot].state = SlotState::Responding;
        self.execute(t, key, slot, &data)
    }

    /// Sends `data` to the host's buffer with an RDMA WRITE, then responds.
    pub(super) fn respond_with_data<T: Transport>(
        &mut self,
        t: &mut T,
        key: u64,
        slot: usize,
        sgl: Sgl,
        data: &[u8],
        result: u64,
    ) -> Result<(), TargetError> {
        let Sgl::Keyed { addr, len, key: rkey, .. } = sgl else {
            return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_SGL_INVALID_TYPE, true), 0);
        };
        if (len as usize) < data.len().min(len as usize) || len as u64 > self.slot_capacity(key) {
            return self.respond(t, key, slot, Status::new(SCT_GENERIC, SC_SGL_INVALID_DATA_LENGTH, true), 0);
        }
        let n = data.len().min(len as usize);
        let q = &self.queues[&key];
        let stage = slot as u64 * (q.data_mr.len / q.depth as u64);
        t.mr_write(q.data_mr.id, stage, &data[..n])?;
        let sge = [Sge::new(q.data_mr.id, stage, n as u32)];
        // Unsignalled: RC completes the SEND after it, which frees the slot.
        let wr = SendWr::new(wr_id(WR_WRITE, key, slot), SendOp::Write { remote: RemoteAddr { addr, rkey } }, &sge)
            .unsignaled();
        t.post_send(q.qp, &wr)?;
        self.respond(t, key, slot, Status::SUCCESS, result)
    }

    pub(super) fn respond<T: Transport>(
        &mut self,
        t: &mut T,
        key: u64,
        slot: usize,
        status: Status,
        result: u64,
    ) -> Result<(), TargetError> {
        let now = t.now();
        let io = self.queues.get(&key).is_some_and(|q| q.qid != 0);
        let armed = self.stats.commands > self.faults.after_commands
            && self.stats.writes >= self.faults.after_writes
            && (io || !self.faults.io_only);
        let mut delay = if armed { self.faults.response_delay } else { Duration::ZERO };
        let Some(q) = self.queues.get_mut(&key) else { return Ok(()) };
        if !status.is_success() {
            self.stats.errors += 1;
        }
        let s = &mut q.slots[slot];
        s.response =
            Completion { result, sq_head: q.sq_head, sq_id: q.qid, cid: s.cid, status_field: status.to_field(false) };
        let pick = std::mem::take(&mut s.pick);
        if (armed && self.faults.drop_responses > 0) || pick.drop {
            if pick.drop {
                self.stats.random_drops += 1;
            } else {
                self.faults.drop_responses -= 1;
            }
            self.stats.dropped_responses += 1;
            s.state = SlotState::Free;
            s.cmd = None;
            return Ok(());
        }
        if pick.delay {
            self.stats.random_delays += 1;
            delay = delay.max(self.random.delay);
        }
        if delay > Duration::ZERO {
            s.state = SlotState::Delayed;
            s.at = now + delay;
            return Ok(());
        }
        self.post_response(t, key, slot)
    }

    pub(super) fn post_response<T: Transport>(&mut self, t: &mut T, key: u64, slot: usize) -> Result<(), TargetError> {
        let q = self.queues.get_mut(&key).expect("present");
        q.slots[slot].state = SlotState::Responding;
        if self.faults.wrong_cid_responses > 0
            && self.stats.commands > self.faults.after_commands
            && self.stats.writes >= self.faults.after_writes
        {
            self.faults.wrong_cid_responses -= 1;
            q.slots[slot].response.cid ^= 0x8000;
        }
        let at = slot as u64 * COMPLETION_LEN as u64;
        t.mr_write(q.rsp_mr.id, at, &q.slots[slot].response.encode())?;
        let sge = [Sge::new(q.rsp_mr.id, at, COMPLETION_LEN as u32)];
        t.post_send(q.qp, &SendWr::new(wr_id(WR_SEND, key, slot), SendOp::Send, &sge))?;
        Ok(())
    }

    pub(super) fn send_due<T: Transport>(&mut self, t: &mut T) -> Result<(), TargetError> {
        let now = t.now();
        let due: Vec<(u64, usize)> = self
            .queues
            .iter()
            .flat_map(|(k, q)| {
                q.slots
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.state == SlotState::Delayed && s.at <= now)
                    .map(move |(i, _)| (*k, i))
            })
            .collect();
        for (key, slot) in due {
            self.post_response(t, key, slot)?;
        }
        Ok(())
    }

    /// A controller whose host fell silent for KATO loses its queues.
    pub(super) fn expire_keep_alive<T: Transport>(&mut self, t: &mut T) {
        let now = t.now();
        let expired: Vec<u16> = self
            .controllers
            .iter()
            .filter(|(_, c)| c.kato > Duration::ZERO && now >= c.last_keep_alive + c.kato)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            self.controllers.remove(&id);
            let keys: Vec<u64> = self.queues.iter().filter(|(_, q)| q.cntlid == Some(id)).map(|(k, _)| *k).collect();
            for k in keys {
                self.destroy_queue(t, k);
            }
        }
    }
}
