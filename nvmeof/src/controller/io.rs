//! I/O on a ready controller: namespaces, the blocking transfers (split by
//! MDTS, every queue kept full up to a depth) and tickets.
//!
//! Contract: everything here needs [`ControllerState::Ready`] (before it,
//! an `Invalid` error). The blocking calls (`namespace`,
//! `active_namespaces`, `read`, `write`, `flush`, `read_many`) are thin
//! loops of `service` and the transport's wait; a failure of the queue
//! they ran on is their error, and the controller then needs `reconnect`.
//! Tickets never block: `submit_read` / `submit_write` / `submit_flush`
//! post one command each (`QueueFull` when every live queue is full, the
//! queue's failure when it failed) and [`Controller::take_finished`] hands
//! over the results `service` collected (an NVMe status is an error).
//! Buffers stay the caller's only once their command finished.

use super::*;

impl<T: Transport> Controller<T> {
    /// Moves finished ticketed commands to `finished`.
    pub(super) fn collect_tickets(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let keys: Vec<(usize, u16)> = self.pending.keys().copied().collect();
        for (qi, cid) in keys {
            let Some(r) = self.io.get_mut(qi).and_then(|q| q.take(cid)) else { continue };
            let p = self.pending.remove(&(qi, cid)).expect("listed");
            let mut r = r.and_then(|c| c.check().map_err(|error| NvmeError::Status { command: p.name, error }));
            if let (Ok(()), Some(mr)) = (&r, p.gpu) {
                r = match self.gpu_flush.as_mut() {
                    Some(f) => f.flush(mr),
                    None => Err(NvmeError::Unsupported("a GPU buffer needs a flush hook (set_gpu_flush)".into())),
                };
            }
            self.finished.push((p.ticket, r.map(|_| ())));
        }
    }

    /// Identifies namespace `nsid`. Namespaces with separate metadata are
    /// refused: this initiator moves data blocks only.
    pub fn namespace(&mut self, nsid: u32) -> Result<Namespace, NvmeError> {
        if nsid == 0 || nsid == u32::MAX {
            return Err(InvalidValue::new("nsid", nsid.into(), "a namespace id is 1..=0xFFFFFFFE").into());
        }
        let sgl = Sgl::for_region(&self.scratch, 0, IDENTIFY_LEN as u64).map_err(NvmeError::Build)?;
        self.admin_execute(&NvmeCommand::Identify { cns: CNS_NAMESPACE, cntid: 0, nsid, sgl })?;
        let mut b = vec![0u8; IDENTIFY_LEN];
        self.t.mr_read(self.scratch.id, 0, &mut b)?;
        let info = NamespaceInfo::decode(nsid, &b).map_err(NvmeError::Protocol)?;
        if info.nsze == 0 {
            return Err(NvmeError::Status {
                command: "Identify",
                error: StatusError { status: Status::new(SCT_GENERIC, SC_INVALID_NAMESPACE, true), result: 0 },
            });
        }
        if info.separate_metadata() {
            return Err(NvmeError::Unsupported(format!(
                "namespace {nsid} uses {} bytes of separate metadata per block",
                info.metadata_size()
            )));
        }
        Ok(Namespace { info })
    }

    /// Active namespace ids (Identify CNS 2).
    pub fn active_namespaces(&mut self) -> Result<Vec<u32>, NvmeError> {
        let sgl = Sgl::for_region(&self.scratch, 0, IDENTIFY_LEN as u64).map_err(NvmeError::Build)?;
        self.admin_execute(&NvmeCommand::Identify { cns: CNS_ACTIVE_NAMESPACES, cntid: 0, nsid: 0, sgl })?;
        let mut b = vec![0u8; IDENTIFY_LEN];
        self.t.mr_read(self.scratch.id, 0, &mut b)?;
        Ok(b.chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .take_while(|&id| id != 0)
            .collect())
    }

    /// Reads `buf.len` bytes (whole blocks) from block `slba` into `buf`.
    pub fn read(&mut self, ns: &Namespace, slba: u64, buf: Buffer) -> Result<(), NvmeError> {
        self.transfer(Dir::Read, ns, slba, buf)?;
        if buf.kind == MemoryKind::Gpu {
            // GPUDirect writes must be visible before the data is used.
            match self.gpu_flush.as_mut() {
                Some(f) => f.flush(buf.mr.id)?,
                None => return Err(NvmeError::Unsupported("a GPU buffer needs a flush hook (set_gpu_flush)".into())),
            }
        }
        Ok(())
    }

    /// Writes `buf.len` bytes (whole blocks) from `buf` at block `slba`.
    pub fn write(&mut self, ns: &Namespace, slba: u64, buf: Buffer) -> Result<(), NvmeError> {
        self.transfer(Dir::Write, ns, slba, buf)
    }

    /// Commits volatile writes of `ns` to non-volatile media.
    pub fn flush(&mut self, ns: &Namespace) -> Result<(), NvmeError> {
        self.check_ready()?;
        let q = self.io.first_mut().ok_or_else(|| NvmeError::Unsupported("no I/O queue".into()))?;
        let cmd = NvmeCommand::Flush { nsid: ns.nsid() };
        let cid = q.submit(&mut self.t, &cmd, None)?;
        self.wait_for(&[(0, cid)], cmd.name())
    }

    /// Waits for every (queue index, cid) and returns the first error.
    fn wait_for(&mut self, pending: &[(usize, u16)], name: &'static str) -> Result<(), NvmeError> {
        let mut left: Vec<(usize, u16)> = pending.to_vec();
        let mut first: Option<NvmeError> = None;
        while !left.is_empty() {
            self.pump(Instant::FAR_FUTURE)?;
            let io = &mut self.io;
            left.retain(|&(qi, cid)| match io[qi].take(cid) {
                None => true,
                Some(r) => {
                    keep_first_error(r, name, &mut first);
                    false
                }
            });
        }
        first.map_or(Ok(()), Err)
    }

    fn transfer(&mut self, dir: Dir, ns: &Namespace, slba: u64, buf: Buffer) -> Result<(), NvmeError> {
        self.transfer_many(dir, ns, &[(slba, buf)], usize::MAX)
    }

    /// Reads every (block, buffer) pair, keeping at most `depth` commands in
    /// flight (and the queues full up to that): random I/O at a queue depth.
    pub fn read_many(&mut self, ns: &Namespace, reqs: &[(u64, Buffer)], depth: usize) -> Result<(), NvmeError> {
        self.transfer_many(Dir::Read, ns, reqs, depth.max(1))?;
        if reqs.iter().any(|(_, b)| b.kind == MemoryKind::Gpu) {
            let mut mrs: Vec<MrId> =
                reqs.iter().filter(|(_, b)| b.kind == MemoryKind::Gpu).map(|(_, b)| b.mr.id).collect();
            mrs.dedup();
            let f = self
                .gpu_flush
                .as_mut()
                .ok_or_else(|| NvmeError::Unsupported("a GPU buffer needs a flush hook (set_gpu_flush)".into()))?;
            for mr in mrs {
                f.flush(mr)?;
            }
        }
        Ok(())
    }

    fn transfer_many(
        &mut self,
        dir: Dir,
        ns: &Namespace,
        reqs: &[(u64, Buffer)],
        depth: usize,
    ) -> Result<(), NvmeError> {
        self.check_ready()?;
        let lba = ns.lba_size();
        for &(slba, buf) in reqs {
            check_request(ns, slba, &buf)?;
        }
        if self.io.is_empty() {
            return Err(NvmeError::Unsupported("no I/O queue".into()));
        }
        // Chunks of whole blocks within MDTS and the NLB field.
        let per_cmd = (self.max_transfer / lba).clamp(1, MAX_BLOCKS_PER_COMMAND as u64);
        let name = if dir == Dir::Read { "Read" } else { "Write" };
        let (mut req, mut next) = (0usize, 0u64); // request, and blocks of it submitted
        let mut inflight: Vec<(usize, u16)> = Vec::new();
        let mut first: Option<NvmeError> = None;
        loop {
            // Fill the queues up to their capacity (and `depth`).
            while first.is_none() && req < reqs.len() && inflight.len() < depth {
                let (slba, buf) = reqs[req];
                let blocks = buf.len / lba;
                let n = per_cmd.min(blocks - next);
                let Some(qi) = self.pick_queue() else { break };
                let off = buf.offset + next * lba;
                let submitted = self.submit_one(qi, dir, ns, slba + next, buf.mr, off, n);
                match submitted {
                    Ok(cid) => {
                        inflight.push((qi, cid));
                        next += n;
                        if next == blocks {
                            req += 1;
                            next = 0;
                        }
                    }
                    Err(e) => {
                        first.get_or_insert(e);
                    }
                }
            }
            if inflight.is_empty() {
                break;
            }
            // Commands stay in flight until they finish or their queue
            // fails: the buffers are the caller's until then.
            if let Err(e) = self.pump(Instant::FAR_FUTURE) {
                for q in &mut self.io {
                    q.close(&mut self.t);
                }
                first.get_or_insert(e);
            }
            let io = &mut self.io;
            inflight.retain(|&(qi, cid)| match io[qi].take(cid) {
                None => !io[qi].is_closed(),
                Some(r) => {
                    keep_first_error(r, name, &mut first);
                    false
                }
            });
        }
        first.map_or(Ok(()), Err)
    }

    /// Submits one command of `blocks` blocks at `slba`, its data at `off`
    /// of `mr` (in-capsule for a small write when the queue allows it).
    #[allow(clippy::too_many_arguments)]
    fn submit_one(
        &mut self,
        qi: usize,
        dir: Dir,
        ns: &Namespace,
        slba: u64,
        mr: MrInfo,
        off: u64,
        blocks: u64,
    ) -> Result<u16, NvmeError> {
        let len = blocks * ns.lba_size();
        let q = &mut self.io[qi];
        let small = dir == Dir::Write && len <= q.in_capsule();
        let built = if small {
            Ok((Sgl::InCapsule { offset: 0, len: len as u32 }, Some((mr.id, off, len as u32))))
        } else {
            Sgl::for_region(&mr, off, len).map(|sgl| (sgl, None))
        };
        let cmd = built.and_then(|(sgl, inline)| {
            let cmd = match dir {
                Dir::Read => NvmeCommand::read(ns.nsid(), slba, blocks as u32, sgl),
                Dir::Write => NvmeCommand::write(ns.nsid(), slba, blocks as u32, sgl),
            };
            cmd.map(|c| (c, inline))
        });
        match cmd {
            Ok((cmd, inline)) => q.submit(&mut self.t, &cmd, inline),
            Err(e) => Err(NvmeError::Build(e)),
        }
    }

    /// Submits a read of `buf.len` bytes (whole blocks, at most
    /// [`Controller::max_transfer`]: one command) from block `slba` without
    /// waiting. A `MemoryKind::Gpu` buffer is flushed (through the hook)
    /// before its ticket is reported finished.
    pub fn submit_read(&mut self, ns: &Namespace, slba: u64, buf: Buffer) -> Result<Ticket, NvmeError> {
        if buf.kind == MemoryKind::Gpu && self.gpu_flush.is_none() {
            return Err(NvmeError::Unsupported("a GPU buffer needs a flush hook (set_gpu_flush)".into()));
        }
        self.submit_io(Dir::Read, ns, slba, buf)
    }

    /// Submits a write of `buf` at block `slba` without waiting (one
    /// command, as [`Controller::submit_read`]).
    pub fn submit_write(&mut self, ns: &Namespace, slba: u64, buf: Buffer) -> Result<Ticket, NvmeError> {
        self.submit_io(Dir::Write, ns, slba, buf)
    }

    fn submit_io(&mut self, dir: Dir, ns: &Namespace, slba: u64, buf: Buffer) -> Result<Ticket, NvmeError> {
        self.check_ready()?;
        check_request(ns, slba, &buf)?;
        if buf.len > self.max_transfer {
            return Err(InvalidValue::new(
                "length",
                buf.len,
                "a submitted command moves at most max_transfer bytes (MDTS); read/write split larger ones",
            )
            .into());
        }
        let qi = self.ticket_queue()?;
        let cid = self.submit_one(qi, dir, ns, slba, buf.mr, buf.offset, buf.len / ns.lba_size())?;
        let name = if dir == Dir::Read { "Read" } else { "Write" };
        let gpu = (dir == Dir::Read && buf.kind == MemoryKind::Gpu).then_some(buf.mr.id);
        Ok(self.track(qi, cid, name, gpu))
    }

    /// Submits a Flush of `ns` without waiting.
    pub fn submit_flush(&mut self, ns: &Namespace) -> Result<Ticket, NvmeError> {
        self.check_ready()?;
        let qi = self.ticket_queue()?;
        let cmd = NvmeCommand::Flush { nsid: ns.nsid() };
        let cid = self.io[qi].submit(&mut self.t, &cmd, None)?;
        Ok(self.track(qi, cid, cmd.name(), None))
    }

    /// The queue a submitted command goes to; every queue full is `QueueFull`.
    fn ticket_queue(&mut self) -> Result<usize, NvmeError> {
        let Some(first) = self.io.first() else { return Err(NvmeError::Unsupported("no I/O queue".into())) };
        let (qid, depth, outstanding) = (first.qid(), first.depth(), first.outstanding());
        self.pick_queue().ok_or(NvmeError::QueueFull { qid, depth, outstanding })
    }

    fn track(&mut self, qi: usize, cid: u16, name: &'static str, gpu: Option<MrId>) -> Ticket {
        if self.poller.mode() == PollMode::Event {
            // A ticket's driver may wait on `wait_set` itself: its deadline
            // counts from now, as before lazy deadlines.
            let now = self.t.now();
            self.io[qi].stamp_deadlines(now);
        }
        let ticket = Ticket(self.next_ticket);
        self.next_ticket += 1;
        self.pending.insert((qi, cid), Pending { ticket, name, gpu });
        ticket
    }

    /// Submitted commands not finished yet.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Commands the I/O queues can take now (free slots of live queues).
    pub fn free_slots(&self) -> usize {
        self.io
            .iter()
            .filter(|q| q.failure().is_none() && !q.is_closed())
            .map(|q| (q.capacity() - q.outstanding()) as usize)
            .sum()
    }

    /// Every ticket finished since the last call, with its result (an
    /// NVMe status is an error), in the order `service` saw them finish.
    pub fn take_finished(&mut self) -> Vec<(Ticket, Result<(), NvmeError>)> {
        std::mem::take(&mut self.finished)
    }

    /// A queue with a free slot, round-robin.
    fn pick_queue(&mut self) -> Option<usize> {
        let n = self.io.len();
        for i in 0..n {
            let qi = (self.next_queue + i) % n;
            let q = &self.io[qi];
            if q.failure().is_none() && q.outstanding() < q.capacity() {
                self.next_queue = (qi + 1) % n;
                return Some(qi);
            }
        }
        // Every queue is full or failed: a failed one reports its error.
        self.io.iter().position(|q| q.failure().is_some())
    }
}

/// The caller's side of a transfer: whole blocks, inside the buffer and
/// the namespace.
fn check_request(ns: &Namespace, slba: u64, buf: &Buffer) -> Result<(), NvmeError> {
    let lba = ns.lba_size();
    if buf.len == 0 || !buf.len.is_multiple_of(lba) {
        return Err(InvalidValue::new("length", buf.len, "must be a non-zero multiple of the LBA size").into());
    }
    if buf.offset.checked_add(buf.len).is_none_or(|end| end > buf.mr.len) {
        return Err(InvalidValue::new(
            "offset+length",
            buf.offset.saturating_add(buf.len),
            "exceeds the registered buffer",
        )
        .into());
    }
    let blocks = buf.len / lba;
    if slba.checked_add(blocks).is_none_or(|end| end > ns.blocks()) {
        return Err(InvalidValue::new("slba+blocks", slba.saturating_add(blocks), "beyond the namespace's size").into());
    }
    Ok(())
}

/// A finished command's result, its NVMe status checked: the first error of
/// a batch is kept in `first`, later ones are dropped.
fn keep_first_error(r: Result<Completion, NvmeError>, name: &'static str, first: &mut Option<NvmeError>) {
    if let Err(e) = r.and_then(|c| c.check().map_err(|error| NvmeError::Status { command: name, error })) {
        first.get_or_insert(e);
    }
}
