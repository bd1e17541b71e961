//! What every conformance case stands on: two endpoints with a PD and a CQ
//! each, helpers to make regions and RC QPs connected by hand (the
//! out-of-band hand-off an FPGA uses), bounded waits, and cleanup.

use std::net::Ipv4Addr;

use rctb_core::time::{Duration, Instant};
use rctb_core::transport::*;

/// The most any single wait in a case may take (on the transport's clock).
pub const WAIT_LIMIT: Duration = Duration::from_secs(10);

/// One endpoint's per-case resources.
#[derive(Debug)]
pub struct Side {
    /// The case's protection domain.
    pub pd: PdId,
    /// The one CQ every QP of the case completes on.
    pub cq: CqId,
    /// The port's IPv4-mapped RoCE v2 GID and its index.
    pub gid: Gid,
    /// Where `gid` sits in the port's GID table.
    pub gid_index: u32,
    /// The IPv4 address inside `gid` (where CM listens and connects).
    pub ip: Ipv4Addr,
    /// Port 1's active MTU.
    pub active_mtu: Mtu,
    mrs: Vec<MrId>,
    qps: Vec<QpId>,
    srqs: Vec<SrqId>,
    cqs: Vec<CqId>,
    conns: Vec<ConnId>,
    listeners: Vec<ListenId>,
}

/// Both endpoints of a case: `a` requests, `b` responds.
pub struct Endpoints<'t, T: Transport> {
    /// The requester's transport.
    pub a: &'t mut T,
    /// The responder's transport.
    pub b: &'t mut T,
    /// `a`'s resources.
    pub sa: Side,
    /// `b`'s resources.
    pub sb: Side,
}

impl<T: Transport> std::fmt::Debug for Endpoints<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoints").field("sa", &self.sa).field("sb", &self.sb).finish_non_exhaustive()
    }
}

/// A connected pair of QPs, one per side.
#[derive(Clone, Copy, Debug)]
pub struct QpPair {
    /// The requester's QP.
    pub a: QpInfo,
    /// The responder's QP.
    pub b: QpInfo,
}

/// Knobs of a hand-connected QP pair.
#[derive(Clone, Copy, Debug)]
pub struct Link {
    /// The requester's RNR retry count (7: forever).
    pub rnr_retry: u8,
    /// The requester's transport retry count.
    pub retry_cnt: u8,
    /// The requester's local ACK timeout code (4.096 us x 2^code).
    pub timeout: u8,
    /// The responder's (b's) min RNR timer.
    pub min_rnr_timer: RnrTimer,
    /// What the responder's (b's) QP lets the requester do remotely.
    pub responder_access: Access,
    /// READs and atomics the requester keeps outstanding (a's `max_rd_atomic`).
    pub max_rd_atomic: u8,
    /// READs and atomics the responder keeps resources for (b's `max_dest_rd_atomic`).
    pub max_dest_rd_atomic: u8,
}

/// Every remote access a QP can grant, and local write.
pub const QP_ACCESS_ALL: Access =
    Access::LOCAL_WRITE.union(Access::REMOTE_WRITE).union(Access::REMOTE_READ).union(Access::REMOTE_ATOMIC);

impl Default for Link {
    fn default() -> Self {
        Link {
            rnr_retry: 7,
            retry_cnt: 7,
            timeout: 14,
            min_rnr_timer: RnrTimer::from_code(1).expect("code 1 exists"),
            responder_access: QP_ACCESS_ALL,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
        }
    }
}

fn e(what: &str, err: TransportError) -> String {
    format!("{what}: {err}")
}

fn side<T: Transport>(t: &mut T) -> Result<Side, String> {
    let port = t.port(1).map_err(|x| e("port 1", x))?;
    let entry = port
        .gids
        .iter()
        .find(|g| g.gid_type == GidType::RoceV2 && g.gid.to_ipv4().is_some())
        .ok_or_else(|| format!("port 1 has no IPv4-mapped RoCE v2 GID (table: {:?})", port.gids))?;
    let pd = t.alloc_pd().map_err(|x| e("alloc_pd", x))?;
    let cq = match t.create_cq(4096) {
        Ok(cq) => cq,
        Err(x) => {
            let _ = t.dealloc_pd(pd);
            return Err(e("create_cq", x));
        }
    };
    Ok(Side {
        pd,
        cq,
        gid: entry.gid,
        gid_index: entry.index,
        ip: entry.gid.to_ipv4().expect("checked above"),
        active_mtu: port.active_mtu,
        mrs: Vec::new(),
        qps: Vec::new(),
        srqs: Vec::new(),
        cqs: Vec::new(),
        conns: Vec::new(),
        listeners: Vec::new(),
    })
}

fn release_side<T: Transport>(t: &mut T, s: &mut Side) -> Result<(), String> {
    // CM and async events a case left unread must not reach the next case.
    while t.cm_poll().is_some() {}
    while let Ok(Some(_)) = t.poll_async_event() {}
    let mut first: Option<String> = None;
    let mut note = |r: Result<(), TransportError>, what: &str| {
        if let Err(x) = r
            && first.is_none()
        {
            first = Some(e(what, x));
        }
    };
    for l in s.listeners.drain(..) {
        note(t.cm_close_listener(l), "cm_close_listener");
    }
    for c in s.conns.drain(..) {
        note(t.cm_destroy(c), "cm_destroy");
    }
    for q in s.qps.drain(..) {
        note(t.destroy_qp(q), "destroy_qp");
    }
    for q in s.srqs.drain(..) {
        note(t.destroy_srq(q), "destroy_srq");
    }
    for m in s.mrs.drain(..) {
        note(t.dereg_mr(m), "dereg_mr");
    }
    for c in s.cqs.drain(..) {
        note(t.destroy_cq(c), "destroy_cq");
    }
    note(t.destroy_cq(s.cq), "destroy_cq");
    note(t.dealloc_pd(s.pd), "dealloc_pd");
    first.map_or(Ok(()), Err)
}

impl<'t, T: Transport> Endpoints<'t, T> {
    /// Opens a case's resources on both transports (released by
    /// [`Endpoints::release`], also after a failed case).
    pub fn new(a: &'t mut T, b: &'t mut T) -> Result<Self, String> {
        let sa = side(a)?;
        let sb = match side(b) {
            Ok(s) => s,
            Err(why) => {
                let mut sa = sa;
                let _ = release_side(a, &mut sa);
                return Err(why);
            }
        };
        Ok(Endpoints { a, b, sa, sb })
    }

    /// Releases every resource of the case, children first.
    pub fn release(mut self) -> Result<(), String> {
        let ra = release_side(self.a, &mut self.sa);
        let rb = release_side(self.b, &mut self.sb);
        ra.and(rb)
    }

    /// The path MTU both ports support.
    pub fn path_mtu(&self) -> Mtu {
        self.sa.active_mtu.min(self.sb.active_mtu)
    }

    /// Registers a region on `a` (`on_a`) or `b`.
    pub fn mr(&mut self, on_a: bool, len: u64, access: Access) -> Result<MrInfo, String> {
        let (t, s) = if on_a { (&mut *self.a, &mut self.sa) } else { (&mut *self.b, &mut self.sb) };
        let mr = t.reg_mr(s.pd, len, access).map_err(|x| e("reg_mr", x))?;
        s.mrs.push(mr.id);
        Ok(mr)
    }

    /// Creates a further CQ of `depth` entries on `a` (`on_a`) or `b`.
    pub fn cq(&mut self, on_a: bool, depth: u32) -> Result<CqId, String> {
        let (t, s) = if on_a { (&mut *self.a, &mut self.sa) } else { (&mut *self.b, &mut self.sb) };
        let cq = t.create_cq(depth).map_err(|x| e("create_cq", x))?;
        s.cqs.push(cq);
        Ok(cq)
    }

    /// Creates a shared receive queue in the case's PD on `a` (`on_a`) or `b`.
    pub fn srq(&mut self, on_a: bool, max_wr: u32, limit: u32) -> Result<SrqId, String> {
        let (t, s) = if on_a { (&mut *self.a, &mut self.sa) } else { (&mut *self.b, &mut self.sb) };
        let srq = t.create_srq(&SrqInit { limit, ..SrqInit::new(s.pd, max_wr) }).map_err(|x| e("create_srq", x))?;
        s.srqs.push(srq);
        Ok(srq)
    }

    /// Two RC QPs in RTS, connected to each other by explicit transitions.
    pub fn connect(&mut self, link: Link) -> Result<QpPair, String> {
        self.connect_with(link, |_, _| {})
    }

    /// [`connect`](Self::connect), after `edit` changed the two QPs'
    /// [`QpInit`]s (`a`'s, `b`'s): other CQs, a shared receive queue.
    pub fn connect_with(&mut self, link: Link, edit: impl FnOnce(&mut QpInit, &mut QpInit)) -> Result<QpPair, String> {
        let caps = QpCaps { max_send_wr: 64, max_recv_wr: 64, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let (mut ia, mut ib) = (
            QpInit { pd: self.sa.pd, send_cq: self.sa.cq, recv_cq: self.sa.cq, caps, sq_sig_all: false, srq: None },
            QpInit { pd: self.sb.pd, send_cq: self.sb.cq, recv_cq: self.sb.cq, caps, sq_sig_all: false, srq: None },
        );
        edit(&mut ia, &mut ib);
        let qa = self.a.create_qp(&ia).map_err(|x| e("create_qp a", x))?;
        self.sa.qps.push(qa.id);
        let qb = self.b.create_qp(&ib).map_err(|x| e("create_qp b", x))?;
        self.sb.qps.push(qb.id);
        let mtu = self.path_mtu();
        // Fixed, distinct starting PSNs near the 24-bit wrap.
        let (psn_a, psn_b) = (Psn::wrapping(0xFF_FF00), Psn::wrapping(0x12_3456));
        let (sa, sb) = (&self.sa, &self.sb);
        let ends = [
            (&mut *self.a, qa.id, sb.gid, sa.gid_index, qb.qpn, psn_b, psn_a, RnrTimer::default(), QP_ACCESS_ALL),
            (
                &mut *self.b,
                qb.id,
                sa.gid,
                sb.gid_index,
                qa.qpn,
                psn_a,
                psn_b,
                link.min_rnr_timer,
                link.responder_access,
            ),
        ];
        for (t, qp, peer_gid, my_index, dest, rq_psn, sq_psn, rnr, access) in ends {
            let init = QpTransition::Init(InitAttr { pkey_index: 0, port: 1, access });
            t.modify_qp(qp, &init).map_err(|x| e("RESET->INIT", x))?;
            let rtr = RtrAttr {
                path_mtu: mtu,
                dest_qpn: dest,
                rq_psn,
                max_dest_rd_atomic: link.max_dest_rd_atomic,
                min_rnr_timer: rnr,
                av: AddressVector::new(peer_gid, my_index),
            };
            t.modify_qp(qp, &QpTransition::Rtr(rtr)).map_err(|x| e("INIT->RTR", x))?;
            let rts = RtsAttr {
                sq_psn,
                timeout: link.timeout,
                retry_cnt: link.retry_cnt,
                rnr_retry: link.rnr_retry,
                max_rd_atomic: link.max_rd_atomic,
            };
            t.modify_qp(qp, &QpTransition::Rts(rts)).map_err(|x| e("RTR->RTS", x))?;
        }
        Ok(QpPair { a: qa, b: qb })
    }

    /// Remembers CM objects made by a case so cleanup releases them.
    pub fn track_cm(&mut self, on_a: bool, conn: Option<ConnId>, listener: Option<ListenId>, qp: Option<QpId>) {
        let s = if on_a { &mut self.sa } else { &mut self.sb };
        s.conns.extend(conn);
        s.listeners.extend(listener);
        s.qps.extend(qp);
    }
}

/// Waits for `n` completions on `s`'s CQ of transport `t`, up to
/// `WAIT_LIMIT` (10 s); returns what arrived (possibly fewer).
pub fn completions<T: Transport>(t: &mut T, s: &Side, n: usize) -> Result<Vec<Completion>, String> {
    let deadline = t.now() + WAIT_LIMIT;
    let mut out = Vec::new();
    loop {
        t.poll_cq(s.cq, n - out.len(), &mut out).map_err(|x| e("poll_cq", x))?;
        if out.len() >= n {
            return Ok(out);
        }
        if t.wait(&[s.cq], deadline).map_err(|x| e("wait", x))? == Readiness::TimedOut {
            t.poll_cq(s.cq, n - out.len(), &mut out).map_err(|x| e("poll_cq", x))?;
            return Ok(out);
        }
    }
}

/// Waits for the next asynchronous event on `t`, up to [`WAIT_LIMIT`]
/// (`wait` does not wake for them: it looks every millisecond).
pub fn async_event<T: Transport>(t: &mut T) -> Result<AsyncEvent, String> {
    let deadline = t.now() + WAIT_LIMIT;
    loop {
        if let Some(ev) = t.poll_async_event().map_err(|x| e("poll_async_event", x))? {
            return Ok(ev);
        }
        if t.now() >= deadline {
            return Err("no asynchronous event within the wait limit".into());
        }
        pause(t, Duration::from_millis(1))?;
    }
}

/// Lets `d` pass on `t`'s clock (virtual time jumps; real time sleeps).
pub fn pause<T: Transport>(t: &mut T, d: Duration) -> Result<(), String> {
    let until: Instant = t.now() + d;
    while t.now() < until {
        t.wait(&[], until).map_err(|x| e("wait", x))?;
    }
    Ok(())
}

/// Waits for the next CM event on `t`, up to [`WAIT_LIMIT`].
pub fn cm_event<T: Transport>(t: &mut T) -> Result<CmEvent, String> {
    let deadline = t.now() + WAIT_LIMIT;
    loop {
        if let Some(ev) = t.cm_poll() {
            return Ok(ev);
        }
        if t.wait(&[], deadline).map_err(|x| e("wait", x))? == Readiness::TimedOut {
            return t.cm_poll().ok_or_else(|| "no CM event within the wait limit".to_string());
        }
    }
}

/// A deterministic payload for message `tag`.
pub fn pattern(tag: u32, len: usize) -> Vec<u8> {
    let mut x = tag.wrapping_mul(0x9E37_79B9) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Checks one completion's fields, naming what differs.
pub fn expect_wc(
    wc: Option<&Completion>,
    what: &str,
    status: WcStatus,
    opcode: Option<WcOpcode>,
    len: Option<u32>,
    imm: Option<Option<u32>>,
) -> Result<(), String> {
    let wc = wc.ok_or_else(|| format!("{what}: no completion"))?;
    if wc.status != status {
        return Err(format!("{what}: status {} (expected {})", wc.status, status));
    }
    if let Some(op) = opcode
        && wc.opcode != op
    {
        return Err(format!("{what}: opcode {} (expected {})", wc.opcode.name(), op.name()));
    }
    if let Some(l) = len
        && wc.byte_len != l
    {
        return Err(format!("{what}: byte_len {} (expected {l})", wc.byte_len));
    }
    if let Some(i) = imm
        && wc.imm != i
    {
        return Err(format!("{what}: imm {:?} (expected {i:?})", wc.imm));
    }
    Ok(())
}
