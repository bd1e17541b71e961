//! [`UdpTransport`]: the `Transport` of one endpoint, and [`UdpReactor`],
//! which owns the endpoints that progress together.
//!
//! Every verb is the simulator's own (`SimTransport` of the endpoint's
//! node). Around them: the world's clock is brought to the present before a
//! verb, and after a verb that can produce frames the reactor runs once
//! without blocking so they leave at once. `poll_cq` on an empty CQ also
//! runs the reactor, so a program that spins on `poll_cq` makes progress;
//! `wait` blocks in `poll(2)` until a completion, a frame, a timer or the
//! deadline.

use std::cell::RefCell;
use std::hash::{BuildHasher, RandomState};
use std::rc::Rc;

use rctb_core::time::Instant;
use rctb_core::transport::*;
use rctb_sim::{FabricStats, SimTransport};

use crate::config::UdpConfig;
use crate::error::UdpError;
use crate::reactor::Reactor;
use crate::stats::UdpStats;

/// Endpoints that share one RC engine world and make progress together
/// (a cheap handle: clones share it). Use one reactor per thread.
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

    /// Binds an endpoint (its sockets, its node in the world).
    pub fn endpoint(&self, cfg: UdpConfig) -> Result<UdpTransport, UdpError> {
        let mut r = self.inner.borrow_mut();
        let ep = r.add(cfg)?;
        let sim = r.sim.transport(r.endpoints[ep].node);
        Ok(UdpTransport { reactor: self.inner.clone(), sim, ep })
    }

    /// Starts recording every frame the endpoints send (as a pcap with
    /// Ethernet headers, real-time stamps, ICRCs as sent).
    pub fn enable_pcap(&self) {
        self.inner.borrow().sim.enable_pcap();
    }

    /// The pcap recorded so far (recording stops).
    pub fn take_pcap(&self) -> Option<Vec<u8>> {
        self.inner.borrow().sim.take_pcap()
    }

    /// The world the endpoints' RC engines live in (a handle). Its
    /// `SimTransport`s (`world().transport(world().node(name))`) are the
    /// endpoints' verbs without the reactor around them: code that drives
    /// the reactor itself ([`turn`](Self::turn), [`block`](Self::block),
    /// as the scenario runner does) may use them directly. The world is in
    /// external mode: whatever it transmits goes out on the sockets.
    pub fn world(&self) -> rctb_sim::Sim {
        self.inner.borrow().sim.clone()
    }

    /// The reactor's clock (real time since the reactor was made).
    pub fn now(&self) -> Instant {
        self.inner.borrow().clock.now()
    }

    /// Does everything that needs no waiting: timers due, frames to send,
    /// frames received.
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

    /// The RC engine's counters (frames sent, ACKs, NAKs, retransmissions,
    /// timeouts) over every endpoint.
    pub fn engine_stats(&self) -> FabricStats {
        self.inner.borrow().sim.stats()
    }
}

/// One endpoint's `Transport`.
pub struct UdpTransport {
    reactor: Rc<RefCell<Reactor>>,
    sim: SimTransport,
    ep: usize,
}

impl std::fmt::Debug for UdpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self.reactor.borrow();
        f.debug_struct("UdpTransport").field("local", &r.endpoints[self.ep].local).finish_non_exhaustive()
    }
}

const NO_CM: &str = "RDMA CM over UDP (connect QPs by hand: QPN, PSN and GID exchanged out of band)";

impl UdpTransport {
    /// The reactor this endpoint belongs to.
    pub fn reactor(&self) -> UdpReactor {
        UdpReactor { inner: self.reactor.clone() }
    }

    /// An endpoint with a reactor of its own.
    pub fn bind(cfg: UdpConfig) -> Result<Self, UdpError> {
        UdpReactor::new(cfg.seed).endpoint(cfg)
    }

    /// This endpoint's socket counters.
    pub fn stats(&self) -> UdpStats {
        self.reactor.borrow().endpoints[self.ep].stats
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

    /// Brings the world's clock to the present (before a verb that stamps
    /// timers).
    fn advance(&self) {
        self.reactor.borrow_mut().advance();
    }

    /// Runs the reactor without blocking (after a verb that made frames).
    fn turn(&self) -> Result<()> {
        self.reactor.borrow_mut().turn()
    }

    fn then_turn<R>(&self, r: Result<R>) -> Result<R> {
        let v = r?;
        self.turn()?;
        Ok(v)
    }
}

impl Transport for UdpTransport {
    fn device(&self) -> Result<DeviceInfo> {
        let mut d = self.sim.device()?;
        d.name = format!("udp-{}", self.sim.node_name());
        Ok(d)
    }

    fn port(&self, port: u8) -> Result<PortInfo> {
        self.sim.port(port)
    }

    fn alloc_pd(&mut self) -> Result<PdId> {
        self.sim.alloc_pd()
    }

    fn dealloc_pd(&mut self, pd: PdId) -> Result<()> {
        self.sim.dealloc_pd(pd)
    }

    fn reg_mr(&mut self, pd: PdId, len: u64, access: Access) -> Result<MrInfo> {
        self.sim.reg_mr(pd, len, access)
    }

    fn dereg_mr(&mut self, mr: MrId) -> Result<()> {
        self.sim.dereg_mr(mr)
    }

    fn mr_info(&self, mr: MrId) -> Result<MrInfo> {
        self.sim.mr_info(mr)
    }

    fn mr_write(&mut self, mr: MrId, offset: u64, data: &[u8]) -> Result<()> {
        self.sim.mr_write(mr, offset, data)
    }

    fn mr_read(&self, mr: MrId, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.sim.mr_read(mr, offset, buf)
    }

    fn mr_view(&self, mr: MrId, offset: u64, len: u64, f: &mut dyn MrVisitor) -> Result<()> {
        self.sim.mr_view(mr, offset, len, f)
    }

    fn create_cq(&mut self, depth: u32) -> Result<CqId> {
        self.sim.create_cq(depth)
    }

    fn destroy_cq(&mut self, cq: CqId) -> Result<()> {
        self.sim.destroy_cq(cq)
    }

    fn create_qp(&mut self, init: &QpInit) -> Result<QpInfo> {
        self.sim.create_qp(init)
    }

    fn modify_qp(&mut self, qp: QpId, transition: &QpTransition) -> Result<()> {
        self.advance();
        let r = self.sim.modify_qp(qp, transition);
        self.then_turn(r)
    }

    fn query_qp(&self, qp: QpId) -> Result<QpInfo> {
        self.sim.query_qp(qp)
    }

    fn destroy_qp(&mut self, qp: QpId) -> Result<()> {
        self.sim.destroy_qp(qp)
    }

    fn post_send<'a>(&mut self, qp: QpId, wr: &SendWr<'a>) -> Result<()> {
        self.advance();
        let r = self.sim.post_send(qp, wr);
        self.then_turn(r)
    }

    fn post_recv<'a>(&mut self, qp: QpId, wr: &RecvWr<'a>) -> Result<()> {
        self.advance();
        let r = self.sim.post_recv(qp, wr);
        self.then_turn(r)
    }

    fn poll_cq(&mut self, cq: CqId, max: usize, out: &mut Vec<Completion>) -> Result<usize> {
        let n = self.sim.poll_cq(cq, max, out)?;
        if n > 0 || max == 0 {
            return Ok(n);
        }
        self.turn()?;
        self.sim.poll_cq(cq, max, out)
    }

    fn cm_listen(&mut self, _port: u16) -> Result<ListenId> {
        Err(TransportError::Unsupported { verb: Verb::CmListen, what: NO_CM })
    }

    fn cm_connect(&mut self, _params: &ConnectParams) -> Result<(ConnId, QpId)> {
        Err(TransportError::Unsupported { verb: Verb::CmConnect, what: NO_CM })
    }

    fn cm_accept(&mut self, conn: ConnId, params: &AcceptParams) -> Result<QpId> {
        self.sim.cm_accept(conn, params)
    }

    fn cm_reject(&mut self, conn: ConnId, private_data: &[u8]) -> Result<()> {
        self.sim.cm_reject(conn, private_data)
    }

    fn cm_disconnect(&mut self, conn: ConnId) -> Result<()> {
        self.sim.cm_disconnect(conn)
    }

    fn cm_destroy(&mut self, conn: ConnId) -> Result<()> {
        self.sim.cm_destroy(conn)
    }

    fn cm_close_listener(&mut self, listener: ListenId) -> Result<()> {
        self.sim.cm_close_listener(listener)
    }

    fn cm_poll(&mut self) -> Option<CmEvent> {
        self.sim.cm_poll()
    }

    fn now(&self) -> Instant {
        self.reactor.borrow().clock.now()
    }

    fn wait(&mut self, cqs: &[CqId], deadline: Instant) -> Result<Readiness> {
        loop {
            self.turn()?;
            if self.sim.has_events(cqs) {
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
