//! Running a UDP endpoint against a transport of another kind in one
//! thread (the conformance suite between this backend and kernel rxe).
//!
//! A UDP endpoint makes progress only while its reactor is called, while an
//! RDMA device answers by itself. [`Driven`] wraps the other transport so
//! that waiting on it also drives a reactor, and [`Either`] gives the two a
//! single type, as the conformance harness wants.

use rctb_core::time::{Duration, Instant};
use rctb_core::transport::*;

use crate::transport::UdpReactor;

/// The longest a [`Driven`] wait blocks on the reactor before it looks at
/// the inner transport again (which has no descriptor to poll with it).
pub const DRIVE_SLICE: Duration = Duration::from_micros(500);

/// One of two transports.
#[derive(Debug)]
pub enum Either<A, B> {
    /// The first kind (e.g. a UDP endpoint).
    A(A),
    /// The second kind (e.g. a verbs device).
    B(B),
}

macro_rules! either {
    ($self:ident, $t:ident => $e:expr) => {
        match $self {
            Either::A($t) => $e,
            Either::B($t) => $e,
        }
    };
}

impl<A: Transport, B: Transport> Transport for Either<A, B> {
    fn device(&self) -> Result<DeviceInfo> {
        either!(self, t => t.device())
    }
    fn port(&self, port: u8) -> Result<PortInfo> {
        either!(self, t => t.port(port))
    }
    fn alloc_pd(&mut self) -> Result<PdId> {
        either!(self, t => t.alloc_pd())
    }
    fn dealloc_pd(&mut self, pd: PdId) -> Result<()> {
        either!(self, t => t.dealloc_pd(pd))
    }
    fn reg_mr(&mut self, pd: PdId, len: u64, access: Access) -> Result<MrInfo> {
        either!(self, t => t.reg_mr(pd, len, access))
    }
    fn dereg_mr(&mut self, mr: MrId) -> Result<()> {
        either!(self, t => t.dereg_mr(mr))
    }
    fn mr_info(&self, mr: MrId) -> Result<MrInfo> {
        either!(self, t => t.mr_info(mr))
    }
    fn mr_write(&mut self, mr: MrId, offset: u64, data: &[u8]) -> Result<()> {
        either!(self, t => t.mr_write(mr, offset, data))
    }
    fn mr_read(&self, mr: MrId, offset: u64, buf: &mut [u8]) -> Result<()> {
        either!(self, t => t.mr_read(mr, offset, buf))
    }
    fn mr_view(&self, mr: MrId, offset: u64, len: u64, f: &mut dyn MrVisitor) -> Result<()> {
        either!(self, t => t.mr_view(mr, offset, len, f))
    }
    fn create_cq(&mut self, depth: u32) -> Result<CqId> {
        either!(self, t => t.create_cq(depth))
    }
    fn destroy_cq(&mut self, cq: CqId) -> Result<()> {
        either!(self, t => t.destroy_cq(cq))
    }
    fn create_qp(&mut self, init: &QpInit) -> Result<QpInfo> {
        either!(self, t => t.create_qp(init))
    }
    fn modify_qp(&mut self, qp: QpId, transition: &QpTransition) -> Result<()> {
        either!(self, t => t.modify_qp(qp, transition))
    }
    fn query_qp(&self, qp: QpId) -> Result<QpInfo> {
        either!(self, t => t.query_qp(qp))
    }
    fn create_srq(&mut self, init: &SrqInit) -> Result<SrqId> {
        either!(self, t => t.create_srq(init))
    }
    fn modify_srq(&mut self, srq: SrqId, limit: u32) -> Result<()> {
        either!(self, t => t.modify_srq(srq, limit))
    }
    fn destroy_srq(&mut self, srq: SrqId) -> Result<()> {
        either!(self, t => t.destroy_srq(srq))
    }
    fn post_srq_recv<'a>(&mut self, srq: SrqId, wr: &RecvWr<'a>) -> Result<()> {
        either!(self, t => t.post_srq_recv(srq, wr))
    }
    fn poll_async_event(&mut self) -> Result<Option<AsyncEvent>> {
        either!(self, t => t.poll_async_event())
    }
    fn destroy_qp(&mut self, qp: QpId) -> Result<()> {
        either!(self, t => t.destroy_qp(qp))
    }
    fn post_send<'a>(&mut self, qp: QpId, wr: &SendWr<'a>) -> Result<()> {
        either!(self, t => t.post_send(qp, wr))
    }
    fn post_recv<'a>(&mut self, qp: QpId, wr: &RecvWr<'a>) -> Result<()> {
        either!(self, t => t.post_recv(qp, wr))
    }
    fn post_recv_many<'a>(&mut self, qp: QpId, wrs: &[RecvWr<'a>]) -> Result<()> {
        either!(self, t => t.post_recv_many(qp, wrs))
    }
    fn poll_cq(&mut self, cq: CqId, max: usize, out: &mut Vec<Completion>) -> Result<usize> {
        either!(self, t => t.poll_cq(cq, max, out))
    }
    fn cm_listen(&mut self, port: u16) -> Result<ListenId> {
        either!(self, t => t.cm_listen(port))
    }
    fn cm_connect(&mut self, params: &ConnectParams) -> Result<(ConnId, QpId)> {
        either!(self, t => t.cm_connect(params))
    }
    fn cm_accept(&mut self, conn: ConnId, params: &AcceptParams) -> Result<QpId> {
        either!(self, t => t.cm_accept(conn, params))
    }
    fn cm_reject(&mut self, conn: ConnId, private_data: &[u8]) -> Result<()> {
        either!(self, t => t.cm_reject(conn, private_data))
    }
    fn cm_disconnect(&mut self, conn: ConnId) -> Result<()> {
        either!(self, t => t.cm_disconnect(conn))
    }
    fn cm_destroy(&mut self, conn: ConnId) -> Result<()> {
        either!(self, t => t.cm_destroy(conn))
    }
    fn cm_close_listener(&mut self, listener: ListenId) -> Result<()> {
        either!(self, t => t.cm_close_listener(listener))
    }
    fn cm_poll(&mut self) -> Option<CmEvent> {
        either!(self, t => t.cm_poll())
    }
    fn now(&self) -> Instant {
        either!(self, t => t.now())
    }
    fn wait(&mut self, cqs: &[CqId], deadline: Instant) -> Result<Readiness> {
        either!(self, t => t.wait(cqs, deadline))
    }
}

/// A transport whose calls also drive a UDP reactor: waiting on it, or
/// polling it, lets the reactor's endpoints answer their peers.
#[derive(Debug)]
pub struct Driven<T> {
    /// The transport the calls go to.
    pub inner: T,
    /// The reactor they drive as well.
    pub reactor: UdpReactor,
}

impl<T: Transport> Driven<T> {
    /// `inner`, whose waits and polls also turn `reactor`.
    pub fn new(inner: T, reactor: UdpReactor) -> Self {
        Driven { inner, reactor }
    }
}

impl<T: Transport> Transport for Driven<T> {
    fn device(&self) -> Result<DeviceInfo> {
        self.inner.device()
    }
    fn port(&self, port: u8) -> Result<PortInfo> {
        self.inner.port(port)
    }
    fn alloc_pd(&mut self) -> Result<PdId> {
        self.inner.alloc_pd()
    }
    fn dealloc_pd(&mut self, pd: PdId) -> Result<()> {
        self.inner.dealloc_pd(pd)
    }
    fn reg_mr(&mut self, pd: PdId, len: u64, access: Access) -> Result<MrInfo> {
        self.inner.reg_mr(pd, len, access)
    }
    fn dereg_mr(&mut self, mr: MrId) -> Result<()> {
        self.inner.dereg_mr(mr)
    }
    fn mr_info(&self, mr: MrId) -> Result<MrInfo> {
        self.inner.mr_info(mr)
    }
    fn mr_write(&mut self, mr: MrId, offset: u64, data: &[u8]) -> Result<()> {
        self.inner.mr_write(mr, offset, data)
    }
    fn mr_read(&self, mr: MrId, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.mr_read(mr, offset, buf)
    }
    fn mr_view(&self, mr: MrId, offset: u64, len: u64, f: &mut dyn MrVisitor) -> Result<()> {
        self.inner.mr_view(mr, offset, len, f)
    }
    fn create_cq(&mut self, depth: u32) -> Result<CqId> {
        self.inner.create_cq(depth)
    }
    fn destroy_cq(&mut self, cq: CqId) -> Result<()> {
        self.inner.destroy_cq(cq)
    }
    fn create_qp(&mut self, init: &QpInit) -> Result<QpInfo> {
        self.inner.create_qp(init)
    }
    fn modify_qp(&mut self, qp: QpId, transition: &QpTransition) -> Result<()> {
        self.inner.modify_qp(qp, transition)
    }
    fn query_qp(&self, qp: QpId) -> Result<QpInfo> {
        self.inner.query_qp(qp)
    }
    fn create_srq(&mut self, init: &SrqInit) -> Result<SrqId> {
        self.inner.create_srq(init)
    }
    fn modify_srq(&mut self, srq: SrqId, limit: u32) -> Result<()> {
        self.inner.modify_srq(srq, limit)
    }
    fn destroy_srq(&mut self, srq: SrqId) -> Result<()> {
        self.inner.destroy_srq(srq)
    }
    fn post_srq_recv<'a>(&mut self, srq: SrqId, wr: &RecvWr<'a>) -> Result<()> {
        self.inner.post_srq_recv(srq, wr)
    }
    fn poll_async_event(&mut self) -> Result<Option<AsyncEvent>> {
        self.reactor.turn()?;
        self.inner.poll_async_event()
    }
    fn destroy_qp(&mut self, qp: QpId) -> Result<()> {
        self.inner.destroy_qp(qp)
    }
    fn post_send<'a>(&mut self, qp: QpId, wr: &SendWr<'a>) -> Result<()> {
        self.inner.post_send(qp, wr)
    }
    fn post_recv<'a>(&mut self, qp: QpId, wr: &RecvWr<'a>) -> Result<()> {
        self.inner.post_recv(qp, wr)
    }
    fn post_recv_many<'a>(&mut self, qp: QpId, wrs: &[RecvWr<'a>]) -> Result<()> {
        self.inner.post_recv_many(qp, wrs)
    }
    fn poll_cq(&mut self, cq: CqId, max: usize, out: &mut Vec<Completion>) -> Result<usize> {
        self.reactor.turn()?;
        self.inner.poll_cq(cq, max, out)
    }
    fn cm_listen(&mut self, port: u16) -> Result<ListenId> {
        self.inner.cm_listen(port)
    }
    fn cm_connect(&mut self, params: &ConnectParams) -> Result<(ConnId, QpId)> {
        self.inner.cm_connect(params)
    }
    fn cm_accept(&mut self, conn: ConnId, params: &AcceptParams) -> Result<QpId> {
        self.inner.cm_accept(conn, params)
    }
    fn cm_reject(&mut self, conn: ConnId, private_data: &[u8]) -> Result<()> {
        self.inner.cm_reject(conn, private_data)
    }
    fn cm_disconnect(&mut self, conn: ConnId) -> Result<()> {
        self.inner.cm_disconnect(conn)
    }
    fn cm_destroy(&mut self, conn: ConnId) -> Result<()> {
        self.inner.cm_destroy(conn)
    }
    fn cm_close_listener(&mut self, listener: ListenId) -> Result<()> {
        self.inner.cm_close_listener(listener)
    }
    fn cm_poll(&mut self) -> Option<CmEvent> {
        self.inner.cm_poll()
    }
    fn now(&self) -> Instant {
        self.inner.now()
    }

    /// Alternates: the reactor's work, a non-blocking look at the inner
    /// transport, then up to [`DRIVE_SLICE`] blocked on the reactor.
    fn wait(&mut self, cqs: &[CqId], deadline: Instant) -> Result<Readiness> {
        loop {
            self.reactor.turn()?;
            let now = self.inner.now();
            if self.inner.wait(cqs, now)? == Readiness::Ready {
                return Ok(Readiness::Ready);
            }
            let left = deadline.saturating_duration_since(self.inner.now());
            if left.is_zero() {
                return Ok(Readiness::TimedOut);
            }
            self.reactor.block(self.reactor.now() + left.min(DRIVE_SLICE))?;
        }
    }
}
