//! [`UdpTransport`]: the `Transport` of one endpoint, and [`UdpReactor`],
//! which owns the endpoints that progress together.
//!
//! Every verb is the endpoint's RC engine's own (`rctb_engine::Endpoint`),
//! stamped with the reactor's clock read just before. After a verb that
//! can produce frames the reactor runs once without blocking so they leave
//! at once. `poll_cq` on an empty CQ also runs the reactor, so a program
//! that spins on `poll_cq` makes progress; `wait` blocks in `poll(2)` until
//! a completion, a frame, a timer or the deadline. An
//! [`undriven`](UdpTransport::undriven) handle leaves the running to its
//! caller (all but `wait`).

use std::cell::RefCell;
use std::hash::{BuildHasher, RandomState};
use std::rc::Rc;

use rctb_core::time::Instant;
use rctb_core::transport::*;
use rctb_engine::Resources;

use crate::config::UdpConfig;
use crate::error::UdpError;
use crate::reactor::Driver as Reactor;
use crate::stats::{EngineStats, UdpStats};

/// Endpoints whose RC engines make progress together (a cheap handle:
/// clones share it). Use one reactor per thread.
#[derive(Clone)]
pub struct UdpReactor {
    inner: Rc<RefCell<Reactor>>,
}

impl std::fmt::Debug for UdpReactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self.inner.borrow();
        f.debug_struct("UdpReactor").field("endpoints", &r.endpoints.len()).finish_non_exhaustive()
    }
}

impl UdpReactor {
    /// A reactor whose keys and CM PSNs come from `seed` (`None`: a fresh
    /// random seed for this process).
    pub fn new(seed: Option<u64>) -> Self {
        let seed = seed.unwrap_or_else(|| RandomState::new().hash_one(std::process::id()));
        UdpReactor { inner: Rc::new(RefCell::new(Reactor::new(seed))) }
    }

    /// Binds an endpoint (its sockets, its RC engine).
    pub fn endpoint(&self, cfg: UdpConfig) -> Result<UdpTransport, UdpError> {
        let ep = self.inner.borrow_mut().add(cfg)?;
        Ok(UdpTransport { reactor: self.inner.clone(), ep, drives: true })
    }

    /// Starts recording every frame the endpoints send (as a pcap with
    /// Ethernet headers, real-time stamps, ICRCs as sent).
    pub fn enable_pcap(&self) {
        self.inner.borrow_mut().enable_pcap();
    }

    /// The pcap recorded so far (recording stops).
    pub fn take_pcap(&self) -> Option<Vec<u8>> {
        self.inner.borrow_mut().take_pcap()
    }

    /// The reactor's clock (real time since the reactor was made).
    pub fn now(&self) -> Instant {
        self.inner.borrow().clock.now()
    }

    /// Does everything that needs no waiting: frames received, timers due,
    /// frames to send.
    pub fn turn(&self) -> Result<()> {
        self.inner.borrow_mut().turn()
    }

    /// Blocks until a frame arrives, a timer is due or `until` (on
    /// [`now`](Self::now)'s clock), whichever is first.
    pub fn block(&self, until: Instant) -> Result<()> {
        self.inner.borrow_mut().block(until)
    }

    /// The socket counters of every endpoint, in the order they were bound
    /// (what [`UdpTransport::stats`] gives, still there after the endpoint
    /// was handed away or dropped).
    pub fn endpoint_stats(&self) -> Vec<UdpStats> {
        self.inner.borrow().endpoints.iter().map(|e| e.stats).collect()
    }

    /// The RC engines' counters (frames sent, ACKs, NAKs, retransmissions,
    /// timeouts) over every endpoint.
    pub fn engine_stats(&self) -> EngineStats {
        self.inner.borrow().engine_stats()
    }

    /// The verbs objects (PDs, MRs, CQs, QPs) alive on every endpoint,
    /// summed (leak checks).
    pub fn resources(&self) -> Resources {
        self.inner.borrow().resources()
    }
}

/// One endpoint's `Transport`.
pub struct UdpTransport {
    reactor: Rc<RefCell<Reactor>>,
    ep: usize,
    /// Verbs run the reactor (see [`undriven`](Self::undriven)).
    drives: bool,
}

impl std::fmt::Debug for UdpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self.reactor.borrow();
        f.debug_struct("UdpTransport").field("local", &r.endpoints[self.ep].local).finish_non_exhaustive()
    }
}

impl UdpTransport {
    /// The reactor this endpoint belongs to.
    pub fn reactor(&self) -> UdpReactor {
        UdpReactor { inner: self.reactor.clone() }
    }

    /// An endpoint with a reactor of its own.
    pub fn bind(cfg: UdpConfig) -> Result<Self, UdpError> {
        UdpReactor::new(cfg.seed).endpoint(cfg)
    }

    /// Another handle to this endpoint whose verbs and `poll_cq` do not run
    /// the reactor, for code that runs it itself with
    /// [`UdpReactor::turn`] and [`UdpReactor::block`] (the scenario runner:
    /// frames then leave at its next turn, as on the simulator they leave
    /// at its next step). Its `wait` still runs the reactor: nothing else
    /// could make it return early.
    pub fn undriven(&self) -> UdpTransport {
        UdpTransport { reactor: self.reactor.clone(), ep: self.ep, drives: false }
    }

    /// This endpoint's socket counters.
    pub fn stats(&self) -> UdpStats {
        self.reactor.borrow().endpoints[self.ep].stats
    }

    /// This endpoint's engine counters: retransmissions, timeouts, and
    /// what its CM sent again, answered as duplicates, ignored or refused.
    pub fn engine_counters(&self) -> rctb_engine::EndpointCounters {
        self.engine(|e| e.counters())
    }

    /// Replaces the hook that loses or duplicates packets on this
    /// endpoint's UDP path (`None`: every packet passes).
    pub fn set_hook(&self, hook: Option<crate::PathHook>) {
        self.reactor.borrow_mut().endpoints[self.ep].hook = hook;
    }

    /// The address and port it is bound to.
    pub fn local_addr(&self) -> std::net::SocketAddrV4 {
        self.reactor.borrow().endpoints[self.ep].local
    }

    /// A getter on the engine.
    fn engine<R>(&self, f: impl FnOnce(&rctb_engine::Endpoint) -> R) -> R {
        f(&self.reactor.borrow().endpoints[self.ep].engine)
    }

    /// A verb that starts no protocol work.
    fn engine_mut<R>(&mut self, f: impl FnOnce(&mut rctb_engine::Endpoint) -> R) -> R {
        f(&mut self.reactor.borrow_mut().endpoints[self.ep].engine)
    }

    /// A verb that may: stamped with the clock read now, then (when this
    /// handle drives) the reactor runs without blocking so its frames leave.
    fn drive<R>(&mut self, f: impl FnOnce(&mut rctb_engine::Endpoint, Instant) -> Result<R>) -> Result<R> {
        let v = {
            let mut r = self.reactor.borrow_mut();
            let now = r.advance();
            f(&mut r.endpoints[self.ep].engine, now)?
        };
        if self.drives {
            self.reactor.borrow_mut().turn()?;
        }
        Ok(v)
    }
}

impl Transport for UdpTransport {
    fn device(&self) -> Result<DeviceInfo> {
        let mut d = self.engine(|e| e.device())?;
        d.name = format!("udp-{}", d.name);
        Ok(d)
    }

    fn port(&self, port: u8) -> Result<PortInfo> {
        self.engine(|e| e.port(port))
    }

    fn alloc_pd(&mut self) -> Result<PdId> {
        self.engine_mut(|e| e.alloc_pd())
    }

    fn dealloc_pd(&mut self, pd: PdId) -> Result<()> {
        self.engine_mut(|e| e.dealloc_pd(pd))
    }

    fn reg_mr(&mut self, pd: PdId, len: u64, access: Access) -> Result<MrInfo> {
        self.engine_mut(|e| e.reg_mr(pd, len, access))
    }

    fn dereg_mr(&mut self, mr: MrId) -> Result<()> {
        self.engine_mut(|e| e.dereg_mr(mr))
    }

    fn mr_info(&self, mr: MrId) -> Result<MrInfo> {
        self.engine(|e| e.mr_info(mr))
    }

    fn mr_write(&mut self, mr: MrId, offset: u64, data: &[u8]) -> Result<()> {
        self.engine_mut(|e| e.mr_write(mr, offset, data))
    }

    fn mr_read(&self, mr: MrId, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.engine(|e| e.mr_read(mr, offset, buf))
    }

    fn mr_view(&self, mr: MrId, offset: u64, len: u64, f: &mut dyn MrVisitor) -> Result<()> {
        self.engine(|e| e.mr_view(mr, offset, len, f))
    }

    fn create_cq(&mut self, depth: u32) -> Result<CqId> {
        self.engine_mut(|e| e.create_cq(depth))
    }

    fn destroy_cq(&mut self, cq: CqId) -> Result<()> {
        self.engine_mut(|e| e.destroy_cq(cq))
    }

    fn create_qp(&mut self, init: &QpInit) -> Result<QpInfo> {
        self.engine_mut(|e| e.create_qp(init))
    }

    fn modify_qp(&mut self, qp: QpId, transition: &QpTransition) -> Result<()> {
        self.drive(|e, now| e.modify_qp(now, qp, transition))
    }

    fn query_qp(&self, qp: QpId) -> Result<QpInfo> {
        self.engine(|e| e.query_qp(qp))
    }

    fn destroy_qp(&mut self, qp: QpId) -> Result<()> {
        self.engine_mut(|e| e.destroy_qp(qp))
    }

    fn post_send<'a>(&mut self, qp: QpId, wr: &SendWr<'a>) -> Result<()> {
        self.drive(|e, now| e.post_send(now, qp, wr))
    }

    fn post_recv<'a>(&mut self, qp: QpId, wr: &RecvWr<'a>) -> Result<()> {
        self.drive(|e, now| e.post_recv(now, qp, wr))
    }

    fn poll_cq(&mut self, cq: CqId, max: usize, out: &mut Vec<Completion>) -> Result<usize> {
        let n = self.engine_mut(|e| e.poll_cq(cq, max, out))?;
        if n > 0 || max == 0 || !self.drives {
            return Ok(n);
        }
        self.reactor.borrow_mut().turn()?;
        self.engine_mut(|e| e.poll_cq(cq, max, out))
    }

    fn create_srq(&mut self, init: &SrqInit) -> Result<SrqId> {
        self.engine_mut(|e| e.create_srq(init))
    }

    fn modify_srq(&mut self, srq: SrqId, limit: u32) -> Result<()> {
        self.engine_mut(|e| e.modify_srq(srq, limit))
    }

    fn destroy_srq(&mut self, srq: SrqId) -> Result<()> {
        self.engine_mut(|e| e.destroy_srq(srq))
    }

    fn post_srq_recv<'a>(&mut self, srq: SrqId, wr: &RecvWr<'a>) -> Result<()> {
        self.drive(|e, _| e.post_srq_recv(srq, wr))
    }

    fn poll_async_event(&mut self) -> Result<Option<AsyncEvent>> {
        // Like poll_cq: a driving transport takes what the socket holds first.
        if let Some(ev) = self.engine_mut(|e| e.poll_async_event()) {
            return Ok(Some(ev));
        }
        if self.drives {
            self.reactor.borrow_mut().turn()?;
        }
        Ok(self.engine_mut(|e| e.poll_async_event()))
    }

    fn cm_listen(&mut self, port: u16) -> Result<ListenId> {
        self.engine_mut(|e| e.cm_listen(port))
    }

    fn cm_connect(&mut self, params: &ConnectParams) -> Result<(ConnId, QpId)> {
        self.drive(|e, now| e.cm_connect(now, params))
    }

    fn cm_accept(&mut self, conn: ConnId, params: &AcceptParams) -> Result<QpId> {
        self.drive(|e, now| e.cm_accept(now, conn, params))
    }

    fn cm_reject(&mut self, conn: ConnId, private_data: &[u8]) -> Result<()> {
        self.drive(|e, _| e.cm_reject(conn, private_data))
    }

    fn cm_disconnect(&mut self, conn: ConnId) -> Result<()> {
        self.drive(|e, now| e.cm_disconnect(now, conn))
    }

    fn cm_destroy(&mut self, conn: ConnId) -> Result<()> {
        self.engine_mut(|e| e.cm_destroy(conn))
    }

    fn cm_close_listener(&mut self, listener: ListenId) -> Result<()> {
        self.engine_mut(|e| e.cm_close_listener(listener))
    }

    fn cm_poll(&mut self) -> Option<CmEvent> {
        if let Some(ev) = self.engine_mut(|e| e.poll_cm_event()) {
            return Some(ev);
        }
        // As poll_cq on an empty CQ: a caller that only polls still moves
        // the MADs (a socket error is left for the next verb to report).
        if self.drives && self.reactor.borrow_mut().turn().is_err() {
            return None;
        }
        self.engine_mut(|e| e.poll_cm_event())
    }

    fn now(&self) -> Instant {
        self.reactor.borrow().clock.now()
    }

    fn wait(&mut self, cqs: &[CqId], deadline: Instant) -> Result<Readiness> {
        loop {
            self.reactor.borrow_mut().turn()?;
            if self.engine(|e| e.has_events(cqs)) {
                return Ok(Readiness::Ready);
            }
            let mut r = self.reactor.borrow_mut();
            if r.clock.now() >= deadline {
                return Ok(Readiness::TimedOut);
            }
            r.block(deadline)?;
        }
    }
}
