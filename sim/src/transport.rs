//! `SimTransport`: one node's view of the simulated fabric, implementing
//! [`Transport`]. It is a cheap handle (`Rc` of the world): an application
//! owns its transport as it would own a verbs context, and many applications
//! share one world on one thread.
//!
//! Every verb is the node's engine endpoint's own (`rctb_engine`); around
//! the ones that start protocol work the world takes the endpoint's outputs
//! (CM messages, the transmit pipeline, its timer). `wait` runs the world's
//! events until a completion or CM event is ready or the deadline passes.

use std::cell::RefCell;
use std::rc::Rc;

use rctb_core::time::Instant;
use rctb_core::transport::*;
use rctb_engine::{Endpoint, QpDriver};

use crate::world::{NodeIdx, WaitStep, World};

/// A node's transport handle.
#[derive(Clone, Debug)]
pub struct SimTransport {
    pub(crate) world: Rc<RefCell<World>>,
    pub(crate) node: NodeIdx,
}

impl SimTransport {
    /// The name of the node this transport is.
    pub fn node_name(&self) -> String {
        self.world.borrow().nodes[self.node].cfg.name.clone()
    }

    /// Its IPv4 address.
    pub fn ip(&self) -> std::net::Ipv4Addr {
        self.world.borrow().nodes[self.node].cfg.ip
    }

    /// Whether a CM event or a completion on one of `cqs` is waiting (what
    /// `wait` returns `Ready` for), without consuming anything.
    pub fn has_events(&self, cqs: &[CqId]) -> bool {
        self.ep(|ep| ep.has_events(cqs))
    }

    /// Registers GPU memory: RDMA writes into it become visible only after
    /// [`SimTransport::gpu_flush`] (local `mr_write` is immediate).
    pub fn reg_gpu_mr(&mut self, pd: PdId, len: u64, access: Access) -> Result<MrInfo> {
        self.ep_mut(|ep| ep.reg_gpu_mr(pd, len, access))
    }

    /// Makes the RDMA writes a GPU region received visible; returns how many.
    pub fn gpu_flush(&mut self, mr: MrId) -> Result<usize> {
        self.ep_mut(|ep| ep.gpu_flush(mr))
    }

    /// Connects on `qp`, a QP this node's application created
    /// ([`Endpoint::cm_connect_qp`]: `params.qp` is ignored; `driver` says
    /// whether the CM or the application moves the QP).
    pub fn cm_connect_qp(&mut self, qp: QpId, driver: QpDriver, params: &ConnectParams) -> Result<ConnId> {
        self.drive(|ep, now| ep.cm_connect_qp(now, qp, driver, params))
    }

    /// Accepts `conn` on `qp`, a QP this node's application created
    /// ([`Endpoint::cm_accept_qp`]).
    pub fn cm_accept_qp(&mut self, conn: ConnId, qp: QpId, driver: QpDriver, params: &AcceptParams) -> Result<()> {
        self.drive(|ep, now| ep.cm_accept_qp(now, conn, qp, driver, params))
    }

    /// The attributes the CM moves (or would move) `conn`'s QP to `target`
    /// with ([`Endpoint::cm_qp_attr`], `rdma_init_qp_attr`).
    pub fn cm_qp_attr(&self, conn: ConnId, target: QpState) -> Result<QpTransition> {
        self.ep(|ep| ep.cm_qp_attr(conn, target))
    }

    /// Sends the RTU of an application-driven connect
    /// ([`Endpoint::cm_establish`], `rdma_establish`).
    pub fn cm_establish(&mut self, conn: ConnId) -> Result<()> {
        self.drive(|ep, now| ep.cm_establish(now, conn))
    }

    fn ep<R>(&self, f: impl FnOnce(&Endpoint) -> R) -> R {
        f(&self.world.borrow().nodes[self.node].ep)
    }

    /// A verb that starts no protocol work.
    fn ep_mut<R>(&mut self, f: impl FnOnce(&mut Endpoint) -> R) -> R {
        f(&mut self.world.borrow_mut().nodes[self.node].ep)
    }

    /// A verb that may: the world takes the endpoint's outputs after it.
    fn drive<R>(&mut self, f: impl FnOnce(&mut Endpoint, Instant) -> R) -> R {
        let mut w = self.world.borrow_mut();
        let now = w.now;
        let r = f(&mut w.nodes[self.node].ep, now);
        w.sync(self.node);
        r
    }
}

impl Transport for SimTransport {
    fn device(&self) -> Result<DeviceInfo> {
        let mut d = self.ep(|ep| ep.device())?;
        d.name = format!("sim-{}", d.name);
        Ok(d)
    }

    fn port(&self, port: u8) -> Result<PortInfo> {
        self.ep(|ep| ep.port(port))
    }

    fn alloc_pd(&mut self) -> Result<PdId> {
        self.ep_mut(|ep| ep.alloc_pd())
    }

    fn dealloc_pd(&mut self, pd: PdId) -> Result<()> {
        self.ep_mut(|ep| ep.dealloc_pd(pd))
    }

    fn reg_mr(&mut self, pd: PdId, len: u64, access: Access) -> Result<MrInfo> {
        self.ep_mut(|ep| ep.reg_mr(pd, len, access))
    }

    fn dereg_mr(&mut self, mr: MrId) -> Result<()> {
        self.ep_mut(|ep| ep.dereg_mr(mr))
    }

    fn mr_info(&self, mr: MrId) -> Result<MrInfo> {
        self.ep(|ep| ep.mr_info(mr))
    }

    // The small verbs a peer model calls on every command are inlined
    // across crates (the models live in rctb-models, their generic code is
    // instantiated where it is used).
    #[inline]
    fn mr_write(&mut self, mr: MrId, offset: u64, data: &[u8]) -> Result<()> {
        self.ep_mut(|ep| ep.mr_write(mr, offset, data))
    }

    #[inline]
    fn mr_read(&self, mr: MrId, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.ep(|ep| ep.mr_read(mr, offset, buf))
    }

    fn mr_view(&self, mr: MrId, offset: u64, len: u64, f: &mut dyn MrVisitor) -> Result<()> {
        self.ep(|ep| ep.mr_view(mr, offset, len, f))
    }

    fn create_cq(&mut self, depth: u32) -> Result<CqId> {
        self.ep_mut(|ep| ep.create_cq(depth))
    }

    fn destroy_cq(&mut self, cq: CqId) -> Result<()> {
        self.ep_mut(|ep| ep.destroy_cq(cq))
    }

    fn create_qp(&mut self, init: &QpInit) -> Result<QpInfo> {
        self.ep_mut(|ep| ep.create_qp(init))
    }

    fn modify_qp(&mut self, qp: QpId, transition: &QpTransition) -> Result<()> {
        self.drive(|ep, now| ep.modify_qp(now, qp, transition))
    }

    fn query_qp(&self, qp: QpId) -> Result<QpInfo> {
        self.ep(|ep| ep.query_qp(qp))
    }

    fn destroy_qp(&mut self, qp: QpId) -> Result<()> {
        self.ep_mut(|ep| ep.destroy_qp(qp))
    }

    fn post_send<'a>(&mut self, qp: QpId, wr: &SendWr<'a>) -> Result<()> {
        self.drive(|ep, now| ep.post_send(now, qp, wr))
    }

    fn post_recv<'a>(&mut self, qp: QpId, wr: &RecvWr<'a>) -> Result<()> {
        // It starts no protocol work (`Endpoint::post_recv`): no outputs to
        // take after it.
        let mut w = self.world.borrow_mut();
        let now = w.now;
        w.nodes[self.node].ep.post_recv(now, qp, wr)
    }

    fn poll_cq(&mut self, cq: CqId, max: usize, out: &mut Vec<Completion>) -> Result<usize> {
        self.ep_mut(|ep| ep.poll_cq(cq, max, out))
    }

    fn create_srq(&mut self, init: &SrqInit) -> Result<SrqId> {
        self.ep_mut(|ep| ep.create_srq(init))
    }

    fn modify_srq(&mut self, srq: SrqId, limit: u32) -> Result<()> {
        self.ep_mut(|ep| ep.modify_srq(srq, limit))
    }

    fn destroy_srq(&mut self, srq: SrqId) -> Result<()> {
        self.ep_mut(|ep| ep.destroy_srq(srq))
    }

    fn post_srq_recv<'a>(&mut self, srq: SrqId, wr: &RecvWr<'a>) -> Result<()> {
        // A posted receive may end an RNR wait: the world looks again.
        self.drive(|ep, _| ep.post_srq_recv(srq, wr))
    }

    fn poll_async_event(&mut self) -> Result<Option<AsyncEvent>> {
        Ok(self.ep_mut(|ep| ep.poll_async_event()))
    }

    fn cm_listen(&mut self, port: u16) -> Result<ListenId> {
        self.ep_mut(|ep| ep.cm_listen(port))
    }

    fn cm_connect(&mut self, params: &ConnectParams) -> Result<(ConnId, QpId)> {
        self.drive(|ep, now| ep.cm_connect(now, params))
    }

    fn cm_accept(&mut self, conn: ConnId, params: &AcceptParams) -> Result<QpId> {
        self.drive(|ep, now| ep.cm_accept(now, conn, params))
    }

    fn cm_reject(&mut self, conn: ConnId, private_data: &[u8]) -> Result<()> {
        self.drive(|ep, _| ep.cm_reject(conn, private_data))
    }

    fn cm_disconnect(&mut self, conn: ConnId) -> Result<()> {
        self.drive(|ep, now| ep.cm_disconnect(now, conn))
    }

    fn cm_destroy(&mut self, conn: ConnId) -> Result<()> {
        self.ep_mut(|ep| ep.cm_destroy(conn))
    }

    fn cm_close_listener(&mut self, listener: ListenId) -> Result<()> {
        self.ep_mut(|ep| ep.cm_close_listener(listener))
    }

    #[inline]
    fn cm_poll(&mut self) -> Option<CmEvent> {
        self.ep_mut(|ep| ep.poll_cm_event())
    }

    #[inline]
    fn now(&self) -> Instant {
        self.world.borrow().now
    }

    // Inlined across crates: the caller's wait loop is then compiled with
    // the world's step loop in it (`wait_step`; the instants themselves
    // stay out of line), which measured -41 instructions per 64-byte SEND
    // in `benches/fabric.rs`.
    #[inline]
    fn wait(&mut self, cqs: &[CqId], deadline: Instant) -> Result<Readiness> {
        loop {
            let step = self.world.borrow_mut().wait_step(self.node, cqs, deadline);
            match step {
                WaitStep::Ready => return Ok(Readiness::Ready),
                WaitStep::TimedOut => return Ok(Readiness::TimedOut),
                WaitStep::RunActors => crate::actor::run_actors(&self.world),
            }
        }
    }
}
