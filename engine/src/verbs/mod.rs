//! The verbs of an [`Endpoint`]: what `rctb_core::Transport` asks of a
//! device, as methods. `SimTransport` and `UdpTransport` are thin adapters
//! over these.
//!
//! Contract: each verb checks its arguments and the handles it is given
//! and fails with the `TransportError` a verbs device gives for the same
//! misuse (`InvalidHandle`, `InvalidArgument` naming the field and the rule,
//! `InvalidState`, `QueueFull`, `Busy`, `Exhausted`); a failed verb changes
//! nothing. None blocks. The verbs that start protocol work (`modify_qp`,
//! `post_send`, `post_recv`, `cm_connect`, `cm_accept`, `cm_disconnect`)
//! take `now`; after them the owner polls the outputs (see [`Endpoint`]).
//!
//! This file holds the device and port queries, protection domains, memory
//! regions and CQs; `qp.rs` the QPs, their posts, polling and shared
//! receive queues; `cm.rs` the connection manager's verbs.

use rctb_core::transport::*;

use crate::endpoint::{Cq, Endpoint};
use crate::memory::{Bytes, ExternalMemory, Region};

mod cm;
mod qp;

/// Largest region an endpoint registers (it allocates real memory).
pub const MAX_MR_SIZE: u64 = 1 << 32;
/// Largest CQ.
pub const MAX_CQE: u32 = 1 << 20;
/// Largest send or receive queue.
pub const MAX_QP_WR: u32 = 1 << 15;
/// Most scatter/gather entries per work request.
pub const MAX_SGE: u32 = 32;
/// Largest shared receive queue.
pub const MAX_SRQ_WR: u32 = 1 << 15;

impl Endpoint {
    /// Registers GPU memory: RDMA writes into it become visible only after
    /// [`gpu_flush`](Self::gpu_flush) (local `mr_write` is immediate).
    pub fn reg_gpu_mr(&mut self, pd: PdId, len: u64, access: Access) -> Result<MrInfo> {
        let info = self.reg_mr(pd, len, access)?;
        if let Some(r) = self.mem.get_mut(info.id) {
            r.pending = Some(Vec::new());
        }
        Ok(info)
    }

    /// Makes the RDMA writes a GPU region received visible; returns how many.
    pub fn gpu_flush(&mut self, mr: MrId) -> Result<usize> {
        let r = self.mem.get_mut(mr).ok_or_else(|| TransportError::handle(Verb::MrAccess, mr))?;
        let Some(pending) = r.pending.as_mut() else { return Ok(0) };
        let writes = std::mem::take(pending);
        for (offset, data) in &writes {
            r.data.write(*offset as usize, data);
        }
        Ok(writes.len())
    }
    /// What `ibv_query_device` would say: the engine's limits.
    pub fn device(&self) -> Result<DeviceInfo> {
        Ok(DeviceInfo {
            name: self.cfg.name.clone(),
            max_qp_wr: MAX_QP_WR,
            max_sge: MAX_SGE,
            max_cqe: MAX_CQE,
            max_mr_size: MAX_MR_SIZE,
            max_qp_rd_atom: 16,
            max_qp_init_rd_atom: 16,
        })
    }

    /// Port 1 (the only one): active, its MTU, its IPv4-mapped RoCE v2 GID.
    pub fn port(&self, port: u8) -> Result<PortInfo> {
        if port != 1 {
            return Err(TransportError::invalid(
                Verb::QueryPort,
                "port",
                port as u64,
                "the simulated device has port 1",
            ));
        }
        let n = self;
        // Like rxe: index 0 the link-local GID, index 1 the IPv4-mapped one.
        let mut ll = [0u8; 16];
        ll[0] = 0xfe;
        ll[1] = 0x80;
        ll[8..11].copy_from_slice(&[n.cfg.mac[0] ^ 0x02, n.cfg.mac[1], n.cfg.mac[2]]);
        ll[11] = 0xff;
        ll[12] = 0xfe;
        ll[13..16].copy_from_slice(&n.cfg.mac[3..6]);
        Ok(PortInfo {
            port: 1,
            state: if n.link_up { PortState::Active } else { PortState::Down },
            active_mtu: n.cfg.mtu,
            max_mtu: Mtu::Mtu4096,
            gids: vec![
                GidEntry { index: 0, gid: Gid(ll), gid_type: GidType::RoceV2 },
                GidEntry { index: 1, gid: Gid::from_ipv4(n.cfg.ip), gid_type: GidType::RoceV2 },
            ],
        })
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&mut self) -> Result<PdId> {
        let n = &mut *self;
        let pd = PdId(n.alloc_id());
        n.pds.insert(pd);
        Ok(pd)
    }

    /// Frees a protection domain (refused while it holds anything).
    pub fn dealloc_pd(&mut self, pd: PdId) -> Result<()> {
        let n = &mut *self;
        if !n.pds.contains(&pd) {
            return Err(TransportError::handle(Verb::DeallocPd, pd));
        }
        let mrs = n.mem.count_in_pd(pd);
        let qps = n.qps.values().filter(|q| q.pd() == pd).count();
        let srqs = n.srqs.values().filter(|s| s.pd == pd).count();
        if mrs + qps + srqs > 0 {
            return Err(TransportError::Busy {
                verb: Verb::DeallocPd,
                what: pd.to_string(),
                by: format!("{mrs} memory regions, {qps} queue pairs, {srqs} shared receive queues"),
            });
        }
        n.pds.remove(&pd);
        Ok(())
    }

    /// Registers `len` bytes of fresh (zeroed) memory with `access`.
    pub fn reg_mr(&mut self, pd: PdId, len: u64, access: Access) -> Result<MrInfo> {
        check_reg(self, Verb::RegMr, pd, access)?;
        if len > MAX_MR_SIZE {
            return Err(TransportError::invalid(Verb::RegMr, "len", len, "exceeds the device's max_mr_size (4 GiB)"));
        }
        let addr = self.next_addr;
        self.next_addr += len.div_ceil(4096).max(1) * 4096;
        Ok(self.insert_region(pd, addr, len, access, Bytes::Owned(vec![0; len as usize])))
    }

    /// Registers an application's memory: `len` bytes that `memory` reads
    /// and writes, which peers and SGEs address from `iova` (what
    /// `ibv_reg_mr_iova2` takes; `ibv_reg_mr` passes the buffer's own
    /// address). The engine allocates nothing for it.
    pub fn reg_mr_external(
        &mut self,
        pd: PdId,
        iova: u64,
        len: u64,
        access: Access,
        memory: Box<dyn ExternalMemory>,
    ) -> Result<MrInfo> {
        check_reg(self, Verb::RegMr, pd, access)?;
        if iova.checked_add(len).is_none() {
            return Err(TransportError::invalid(Verb::RegMr, "iova+len", iova, "the region must not wrap past 2^64"));
        }
        Ok(self.insert_region(pd, iova, len, access, Bytes::External(memory)))
    }

    fn insert_region(&mut self, pd: PdId, addr: u64, len: u64, access: Access, data: Bytes) -> MrInfo {
        let id = MrId(self.alloc_id());
        let lkey = self.alloc_key();
        let rkey = self.alloc_key();
        let info = MrInfo { id, addr, len, lkey, rkey, access };
        self.mem.insert(Region { info, pd, data, pending: None });
        info
    }

    /// Deregisters a memory region.
    pub fn dereg_mr(&mut self, mr: MrId) -> Result<()> {
        let n = &mut *self;
        n.mem.remove(mr).map(|_| ()).ok_or_else(|| TransportError::handle(Verb::DeregMr, mr))
    }

    /// A region's address, length, keys and access.
    pub fn mr_info(&self, mr: MrId) -> Result<MrInfo> {
        self.mem.get(mr).map(|r| r.info).ok_or_else(|| TransportError::handle(Verb::MrAccess, mr))
    }

    /// Writes `data` into a region at `offset` (the application's CPU access).
    pub fn mr_write(&mut self, mr: MrId, offset: u64, data: &[u8]) -> Result<()> {
        let r = self.mem.get_mut(mr).ok_or_else(|| TransportError::handle(Verb::MrAccess, mr))?;
        let range = bounds(r.info.len, offset, data.len() as u64)?;
        r.data.write(range.start, data);
        Ok(())
    }

    /// Reads a region at `offset` into `buf`.
    pub fn mr_read(&self, mr: MrId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let r = self.mem.get(mr).ok_or_else(|| TransportError::handle(Verb::MrAccess, mr))?;
        let range = bounds(r.info.len, offset, buf.len() as u64)?;
        r.data.view(range, &mut |bytes| buf.copy_from_slice(bytes));
        Ok(())
    }

    /// Hands `f` the region's bytes at `offset` in place, without copying.
    pub fn mr_view(&self, mr: MrId, offset: u64, len: u64, f: &mut dyn MrVisitor) -> Result<()> {
        let r = self.mem.get(mr).ok_or_else(|| TransportError::handle(Verb::MrAccess, mr))?;
        let range = bounds(r.info.len, offset, len)?;
        r.data.view(range, &mut |bytes| f.visit(bytes));
        Ok(())
    }

    /// Creates a CQ of `depth` entries.
    pub fn create_cq(&mut self, depth: u32) -> Result<CqId> {
        if depth == 0 || depth > MAX_CQE {
            return Err(TransportError::invalid(
                Verb::CreateCq,
                "depth",
                depth as u64,
                "must be 1..=max_cqe (1048576)",
            ));
        }
        let n = &mut *self;
        let cq = CqId(n.alloc_id());
        n.cqs.insert(cq.0, Cq::new(depth));
        Ok(cq)
    }

    /// Destroys a CQ (refused while a QP uses it).
    pub fn destroy_cq(&mut self, cq: CqId) -> Result<()> {
        let n = &mut *self;
        if !n.cqs.contains_key(cq.0) {
            return Err(TransportError::handle(Verb::DestroyCq, cq));
        }
        let users = n.qps.values().filter(|q| q.init.send_cq == cq || q.init.recv_cq == cq).count();
        if users > 0 {
            return Err(TransportError::Busy {
                verb: Verb::DestroyCq,
                what: cq.to_string(),
                by: format!("{users} queue pairs"),
            });
        }
        n.cqs.remove(cq.0);
        n.armed_cqs.retain(|c| *c != cq);
        Ok(())
    }
}

fn bounds(region_len: u64, offset: u64, len: u64) -> Result<std::ops::Range<usize>> {
    match offset.checked_add(len) {
        Some(end) if end <= region_len => Ok(offset as usize..end as usize),
        _ => {
            Err(TransportError::invalid(Verb::MrAccess, "offset+len", offset.saturating_add(len), "exceeds the region"))
        }
    }
}

/// What every registration checks: the PD, and the access flags' rule.
fn check_reg(n: &Endpoint, verb: Verb, pd: PdId, access: Access) -> Result<()> {
    if !n.pds.contains(&pd) {
        return Err(TransportError::handle(verb, pd));
    }
    // Remote write or atomic access needs local write too (verbs returns EINVAL).
    if (access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC))
        && !access.contains(Access::LOCAL_WRITE)
    {
        return Err(TransportError::invalid(
            verb,
            "access",
            access.bits() as u64,
            "REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE",
        ));
    }
    Ok(())
}
