//! A model of the FPGA's RoCEv2 engine (surf `RoCEv2Engine`) and its host
//! driver, as docs/protocols.md §1.11 describes them.
//!
//! This module owns three things:
//! - [`FpgaEngine`]: the engine's register file. Writing [`REG_CONTROL`] with
//!   the send bit executes the MetaDataTx word in the TX registers (PD, MR or
//!   QP request, decoded with [`rctb_core::wire::surf`]) on the node's
//!   transport and leaves the MetaDataRx answer in the RX registers with the
//!   receive bit set. [`REG_SOFT_RESET`] destroys every verbs object.
//! - [`setup_connection`] / [`teardown_connection`]: the host-side sequence
//!   over the registers (validate ranges before any write, soft reset, PD, MR,
//!   QP create, INIT, RTR, RTS; roll back in reverse on failure).
//! - Frame streaming ([`StreamConfig`]): SEND_WITH_IMM with
//!   `imm = ring position << 8 | channel` and a [`prbs()`] payload that the
//!   receiving side recomputes.
//!
//! The engine has no wire of its own towards the host: the QP message carries
//! no GID, so the model is told the host's IP when it is built (the FPGA
//! learns it from its own configuration registers).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use rctb_core::roce::{HostParams, TransportConfig};
use rctb_core::time::{Duration, Instant};
use rctb_core::transport::*;
use rctb_core::wire::surf::{
    CONTROL_RECV, CONTROL_SEND, MrTx, PdTx, QpRequest, QpTx, REG_CONTROL, REG_RX, REG_SOFT_RESET, REG_TX, RX_REGS, Rx,
    TX_REGS, Tx,
};
use thiserror::Error;

/// IBV QP state codes carried in the QP message's `state` field.
pub const QPS_RESET: u8 = 0;
/// `IBV_QPS_INIT`.
pub const QPS_INIT: u8 = 1;
/// `IBV_QPS_RTR`.
pub const QPS_RTR: u8 = 2;
/// `IBV_QPS_RTS`.
pub const QPS_RTS: u8 = 3;
/// `IBV_QPS_ERR`.
pub const QPS_ERR: u8 = 6;

/// Attribute masks of the setup sequence (surf's frozen values).
pub const MASK_INIT: u32 = 25;
/// The RESET/INIT to RTR step's mask.
pub const MASK_RTR: u32 = 0x12_9300;
/// The RTR to RTS step's mask.
pub const MASK_RTS: u32 = 0x1_E601;

/// The payload of frame `seq` on `channel` (PROTOCOLS-level contract kept in
/// [`rctb_core::roce::prbs()`], so receivers check it without the simulator).
pub use rctb_core::roce::prbs;

fn state_code(s: QpState) -> u8 {
    match s {
        QpState::Reset => QPS_RESET,
        QpState::Init => QPS_INIT,
        QpState::Rtr => QPS_RTR,
        QpState::Rts => QPS_RTS,
        QpState::Sqd => 4,
        QpState::Sqe => 5,
        QpState::Err => QPS_ERR,
    }
}

/// Local misuse of the register file.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum EngineError {
    /// An address outside the engine's register file.
    #[error("register {0:#x} is not part of the engine")]
    BadRegister(u32),
    /// Streaming before the setup sequence connected a QP.
    #[error("no connected QP to stream on")]
    NotConnected,
    /// A [`StreamConfig`] field broke its rule.
    #[error("stream: {0}")]
    Stream(#[from] InvalidValue),
    /// A verb of the engine's transport failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
}

#[derive(Clone, Copy, Debug)]
struct EngineQp {
    qp: QpInfo,
    cq: CqId,
}

/// What to stream: frame `i` goes on `channels[i % channels.len()]` with
/// length `sizes[i % sizes.len()]`, ring position `i mod 2^24`, and is posted
/// no earlier than `start + i * gap`. At most `window` sends are outstanding.
// Not non_exhaustive: every field is the caller's choice (there is no
// default stream), so callers build it whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamConfig {
    /// The channels frames go on, in turn.
    pub channels: Vec<u8>,
    /// Frame lengths in bytes, in turn.
    pub sizes: Vec<u32>,
    /// Frames to send.
    pub count: u64,
    /// The least time between two frames' posts.
    pub gap: Duration,
    /// Sends outstanding at most.
    pub window: u32,
    /// What the frames carry.
    pub payload: Payload,
}

/// What a frame carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Payload {
    /// [`prbs()`] of (channel, ring position): every byte can be checked.
    #[default]
    Prbs,
    /// Whatever the staging region holds (zeros): no generation cost, for
    /// throughput measurements where the receiver does not check data.
    Unchecked,
}

impl StreamConfig {
    fn validate(&self, max_send_wr: u32, staging: u64) -> Result<(), InvalidValue> {
        if self.channels.is_empty() {
            return Err(InvalidValue::new("channels", 0, "at least one channel"));
        }
        if self.sizes.is_empty() || self.sizes.contains(&0) {
            return Err(InvalidValue::new("sizes", 0, "at least one size, each > 0"));
        }
        if self.window == 0 || self.window > max_send_wr {
            return Err(InvalidValue::new("window", self.window as u64, "must be 1..=the QP's max_send_wr (32)"));
        }
        let max = *self.sizes.iter().max().expect("checked non-empty") as u64;
        if max * self.window as u64 > staging {
            return Err(InvalidValue::new("sizes", max, "window x largest size must fit the engine's MR"));
        }
        Ok(())
    }
}

/// Progress of a stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Frames posted.
    pub posted: u64,
    /// Frames whose send completed successfully.
    pub completed: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Error completions of the engine's sends (e.g. RETRY_EXC_ERR).
    pub errors: Vec<WcStatus>,
}

struct Stream {
    cfg: StreamConfig,
    /// The connected QP and the staging MR, looked up once when the stream
    /// starts (destroying the QP or a soft reset ends the stream).
    q: EngineQp,
    mr: MrInfo,
    /// Staging bytes per window slot: the largest frame.
    slot_len: u64,
    /// The next frame's (number `stats.posted`) index in `cfg.channels`,
    /// in `cfg.sizes` and its window slot: the frame number modulo each,
    /// kept as cursors so that a frame costs no division.
    next_channel: usize,
    next_size: usize,
    next_slot: u64,
    /// Unsignalled sends still to go before the next signalled one.
    until_signal: u32,
    start: Instant,
    stats: StreamStats,
    outstanding: u32,
    /// Frames `0..retired` are accounted for (completed or failed).
    retired: u64,
    /// One send in this many is signalled (the stream's last always is).
    signal_every: u32,
}

/// `i` stepped past the end of a list of `len` goes back to 0 (a cursor's
/// increment modulo `len`, without a division).
fn wrap<N: PartialEq + Default>(i: N, len: N) -> N {
    if i == len { N::default() } else { i }
}

/// The engine: a register file over a node's transport.
pub struct FpgaEngine<T: Transport> {
    t: T,
    host_ip: Ipv4Addr,
    sgid_index: u32,
    control: u32,
    tx: [u32; TX_REGS],
    rx: [u32; RX_REGS],
    /// Objects by the handle/key/QPN the bus uses for them.
    pds: BTreeMap<u32, PdId>,
    mrs: BTreeMap<u32, MrInfo>,
    qps: BTreeMap<u32, EngineQp>,
    stream: Option<Stream>,
    scratch: Vec<Completion>,
    frame: Vec<u8>,
    /// Streams started from now on signal one send in this many.
    signal_every: u32,
}

impl<T: Transport> std::fmt::Debug for FpgaEngine<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FpgaEngine")
            .field("host_ip", &self.host_ip)
            .field("pds", &self.pds.len())
            .field("mrs", &self.mrs.len())
            .field("qps", &self.qps.keys().collect::<Vec<_>>())
            .field("stream", &self.stream_stats())
            .finish_non_exhaustive()
    }
}

impl<T: Transport> FpgaEngine<T> {
    /// An engine on `t` that talks to `host_ip` from GID index `sgid_index`
    /// (1 on a simulator node: the IPv4-mapped GID).
    pub fn new(t: T, host_ip: Ipv4Addr, sgid_index: u32) -> Self {
        FpgaEngine {
            t,
            host_ip,
            sgid_index,
            control: 0,
            tx: [0; TX_REGS],
            rx: [0; RX_REGS],
            pds: BTreeMap::new(),
            mrs: BTreeMap::new(),
            qps: BTreeMap::new(),
            stream: None,
            scratch: Vec::with_capacity(32),
            frame: Vec::new(),
            signal_every: 1,
        }
    }

    /// Signals only one send in `n` of the streams started from now on, as
    /// `ib_send_bw -Q n` does: on RC sends complete in order, so the
    /// completion of a signalled send retires it and every unsignalled one
    /// before it, and the window counts them all. The stream's last send is
    /// always signalled; a send that fails completes whether signalled or
    /// not. 1 (the default) signals every send. `n` must be >= 1 and at most
    /// the stream's window (checked by [`start_stream`](Self::start_stream):
    /// with fewer sends outstanding than `n` the window could fill with
    /// unsignalled sends that never complete).
    pub fn set_signal_every(&mut self, n: u32) -> Result<(), EngineError> {
        if n == 0 {
            return Err(InvalidValue::new("signal_every", 0, "must be >= 1 (1 signals every send)").into());
        }
        self.signal_every = n;
        Ok(())
    }

    /// One send in how many is signalled (see [`set_signal_every`](Self::set_signal_every)).
    pub fn signal_every(&self) -> u32 {
        self.signal_every
    }

    /// The engine's transport.
    pub fn transport(&self) -> &T {
        &self.t
    }
    /// The engine's transport, mutable.
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.t
    }

    /// Reads a 32-bit register.
    pub fn read(&self, addr: u32) -> Result<u32, EngineError> {
        match addr {
            REG_CONTROL => Ok(self.control),
            REG_SOFT_RESET => Ok(0),
            a if (REG_TX..REG_TX + 4 * TX_REGS as u32).contains(&a) && a % 4 == 0 => {
                Ok(self.tx[((a - REG_TX) / 4) as usize])
            }
            a if (REG_RX..REG_RX + 4 * RX_REGS as u32).contains(&a) && a % 4 == 0 => {
                Ok(self.rx[((a - REG_RX) / 4) as usize])
            }
            a => Err(EngineError::BadRegister(a)),
        }
    }

    /// Writes a 32-bit register; the control and soft-reset registers act.
    pub fn write(&mut self, addr: u32, value: u32) -> Result<(), EngineError> {
        match addr {
            REG_CONTROL => {
                // Writing the receive bit acknowledges the answer.
                if value & CONTROL_RECV != 0 {
                    self.control &= !CONTROL_RECV;
                }
                if value & CONTROL_SEND != 0 {
                    let answer = self.execute();
                    self.rx = answer.encode();
                    self.control |= CONTROL_RECV;
                }
                Ok(())
            }
            REG_SOFT_RESET => {
                if value & 1 != 0 {
                    self.soft_reset();
                }
                Ok(())
            }
            a if (REG_TX..REG_TX + 4 * TX_REGS as u32).contains(&a) && a % 4 == 0 => {
                self.tx[((a - REG_TX) / 4) as usize] = value;
                Ok(())
            }
            a => Err(EngineError::BadRegister(a)),
        }
    }

    /// Destroys every object the engine made (QPs, their CQs, MRs, PDs) and
    /// forgets the stream: a new session starts from nothing, PSNs included.
    pub fn soft_reset(&mut self) {
        for (_, q) in std::mem::take(&mut self.qps) {
            let _ = self.t.modify_qp(q.qp.id, &QpTransition::Err);
            let _ = self.t.destroy_qp(q.qp.id);
            let _ = self.t.destroy_cq(q.cq);
        }
        for (_, mr) in std::mem::take(&mut self.mrs) {
            let _ = self.t.dereg_mr(mr.id);
        }
        for (_, pd) in std::mem::take(&mut self.pds) {
            let _ = self.t.dealloc_pd(pd);
        }
        self.stream = None;
        self.control = 0;
    }

    /// Executes the TX word; a failure is an answer with the success bit clear.
    fn execute(&mut self) -> Rx {
        match Tx::decode(&self.tx) {
            Ok(Tx::Pd(pd)) => self.exec_pd(pd),
            Ok(Tx::Mr(mr)) => self.exec_mr(mr),
            Ok(Tx::Qp(qp)) => self.exec_qp(qp),
            // An undecodable word: answer a failed PD request.
            Err(_) => Rx::Pd { success: false, handler: 0 },
        }
    }

    fn exec_pd(&mut self, m: PdTx) -> Rx {
        if m.alloc {
            match self.t.alloc_pd() {
                Ok(pd) => {
                    // The handler is what later messages name the PD by.
                    let handler = pd.0 ^ m.key;
                    self.pds.insert(handler, pd);
                    Rx::Pd { success: true, handler }
                }
                Err(_) => Rx::Pd { success: false, handler: 0 },
            }
        } else {
            let ok = self.pds.get(&m.handler).is_some_and(|&pd| self.t.dealloc_pd(pd).is_ok());
            if ok {
                self.pds.remove(&m.handler);
            }
            Rx::Pd { success: ok, handler: m.handler }
        }
    }

    fn exec_mr(&mut self, m: MrTx) -> Rx {
        if m.alloc {
            let Some(&pd) = self.pds.get(&m.pd_handler) else {
                return Rx::Mr { success: false, lkey: 0, rkey: 0 };
            };
            let access = Access::from_bits(m.access as u32 & 0x7).unwrap_or(Access::LOCAL_WRITE);
            match self.t.reg_mr(pd, m.len as u64, access | Access::LOCAL_WRITE) {
                Ok(mr) => {
                    self.mrs.insert(mr.lkey, mr);
                    Rx::Mr { success: true, lkey: mr.lkey, rkey: mr.rkey }
                }
                Err(_) => Rx::Mr { success: false, lkey: 0, rkey: 0 },
            }
        } else {
            let ok = self.mrs.get(&m.lkey).is_some_and(|mr| self.t.dereg_mr(mr.id).is_ok());
            if ok {
                self.mrs.remove(&m.lkey);
            }
            Rx::Mr { success: ok, lkey: m.lkey, rkey: m.rkey }
        }
    }

    fn exec_qp(&mut self, m: QpTx) -> Rx {
        let fail = Rx::Qp { success: false, qpn: m.qpn, state: 0 };
        match m.request {
            QpRequest::Create => {
                let Some(&pd) = self.pds.get(&m.pd_handler) else { return fail };
                // cap: max_send_wr, max_recv_wr, send SGEs, recv SGEs, inline (a byte each).
                let b = |i: u32| ((m.cap >> (8 * i)) & 0xFF) as u32;
                let caps = QpCaps {
                    max_send_wr: b(4),
                    max_recv_wr: b(3),
                    max_send_sge: b(2),
                    max_recv_sge: b(1),
                    max_inline_data: b(0),
                };
                let Ok(cq) = self.t.create_cq(caps.max_send_wr.max(1) + caps.max_recv_wr) else { return fail };
                match self.t.create_qp(&QpInit {
                    pd,
                    send_cq: cq,
                    recv_cq: cq,
                    caps,
                    sq_sig_all: m.sq_sig_all,
                    srq: None,
                }) {
                    Ok(qp) => {
                        self.qps.insert(qp.qpn, EngineQp { qp, cq });
                        Rx::Qp { success: true, qpn: qp.qpn, state: QPS_RESET }
                    }
                    Err(_) => {
                        let _ = self.t.destroy_cq(cq);
                        fail
                    }
                }
            }
            QpRequest::Destroy => {
                let Some(q) = self.qps.get(&m.qpn).copied() else { return fail };
                if self.t.destroy_qp(q.qp.id).is_err() {
                    return fail;
                }
                let _ = self.t.destroy_cq(q.cq);
                self.qps.remove(&m.qpn);
                self.stream = None;
                Rx::Qp { success: true, qpn: m.qpn, state: QPS_RESET }
            }
            QpRequest::Modify => {
                let Some(q) = self.qps.get(&m.qpn).copied() else { return fail };
                let Some(transition) = self.transition(&m) else { return fail };
                if self.t.modify_qp(q.qp.id, &transition).is_err() {
                    return fail;
                }
                let state = self.t.query_qp(q.qp.id).map(|i| state_code(i.state)).unwrap_or(m.state);
                Rx::Qp { success: true, qpn: m.qpn, state }
            }
        }
    }

    fn transition(&self, m: &QpTx) -> Option<QpTransition> {
        Some(match m.state {
            QPS_INIT => QpTransition::Init(InitAttr {
                pkey_index: 0,
                port: 1,
                access: Access::from_bits(m.access as u32).ok()?,
            }),
            QPS_RTR => QpTransition::Rtr(RtrAttr {
                path_mtu: Mtu::from_code(m.pmtu).ok()?,
                dest_qpn: m.dest_qpn,
                rq_psn: Psn::new(m.rq_psn).ok()?,
                max_dest_rd_atomic: m.max_dest_rd_atomic,
                min_rnr_timer: RnrTimer::from_code(m.min_rnr_timer).ok()?,
                av: AddressVector::new(Gid::from_ipv4(self.host_ip), self.sgid_index),
            }),
            QPS_RTS => QpTransition::Rts(RtsAttr {
                sq_psn: Psn::new(m.sq_psn).ok()?,
                timeout: m.timeout,
                retry_cnt: m.retry_cnt,
                rnr_retry: m.rnr_retry,
                max_rd_atomic: m.max_rd_atomic,
            }),
            QPS_ERR => QpTransition::Err,
            QPS_RESET => QpTransition::Reset,
            _ => return None,
        })
    }

    /// The engine's QP in RTS and its staging MR (the one connected session).
    fn session(&self) -> Result<(EngineQp, MrInfo), EngineError> {
        let q = self.qps.values().next().copied().ok_or(EngineError::NotConnected)?;
        let mr = self.mrs.values().next().copied().ok_or(EngineError::NotConnected)?;
        Ok((q, mr))
    }

    /// Starts streaming on the connected QP; frames go out as [`pump`](Self::pump) runs.
    pub fn start_stream(&mut self, cfg: StreamConfig) -> Result<(), EngineError> {
        let (q, mr) = self.session()?;
        cfg.validate(32, mr.len)?;
        if self.signal_every > cfg.window {
            return Err(InvalidValue::new(
                "signal_every",
                self.signal_every as u64,
                "must be 1..=the stream's window (a window of unsignalled sends never completes)",
            )
            .into());
        }
        let slot_len = *cfg.sizes.iter().max().expect("validated") as u64;
        self.stream = Some(Stream {
            cfg,
            q,
            mr,
            slot_len,
            next_channel: 0,
            next_size: 0,
            next_slot: 0,
            until_signal: self.signal_every - 1,
            start: self.t.now(),
            stats: StreamStats::default(),
            outstanding: 0,
            retired: 0,
            signal_every: self.signal_every,
        });
        Ok(())
    }

    /// Reaps send completions and posts every frame that is due and fits the
    /// window. Returns when the next frame is due (`None`: nothing left to
    /// post, or waiting for completions only).
    ///
    /// Per frame this does what the FPGA's streaming engine does: take the
    /// next slot of the staging region, post it, count it. The QP, MR and
    /// slot size are looked up when the stream starts, not per call.
    pub fn pump(&mut self) -> Result<Option<Instant>, EngineError> {
        if self.qps.is_empty() || self.mrs.is_empty() {
            return Err(EngineError::NotConnected);
        }
        let Some(s) = self.stream.as_mut() else { return Ok(None) };
        Self::pump_stream(&mut self.t, &mut self.scratch, &mut self.frame, s)
    }

    fn pump_stream(
        t: &mut T,
        scratch: &mut Vec<Completion>,
        frame: &mut Vec<u8>,
        s: &mut Stream,
    ) -> Result<Option<Instant>, EngineError> {
        scratch.clear();
        t.poll_cq(s.q.cq, usize::MAX, scratch)?;
        for c in scratch.iter() {
            // The completion of send `wr_id` retires it and the unsignalled
            // sends before it (RC completes sends in order); a completion
            // for a send already retired, or not posted, retires nothing.
            let n = c.wr_id.saturating_add(1).saturating_sub(s.retired).min(s.outstanding as u64);
            s.retired += n;
            s.outstanding -= n as u32;
            s.stats.completed += n;
            if !c.status.is_success() {
                s.stats.errors.push(c.status);
            }
        }
        while s.stats.posted < s.cfg.count && s.outstanding < s.cfg.window && s.stats.errors.is_empty() {
            let i = s.stats.posted;
            // (No clock read without pacing: a clock read can cost a system
            // call, e.g. on a VM whose clocksource is the HPET.)
            if !s.cfg.gap.is_zero() {
                let due = s.start + s.cfg.gap * (i as u32);
                if t.now() < due {
                    return Ok(Some(due));
                }
            }
            let channel = s.cfg.channels[s.next_channel];
            let len = s.cfg.sizes[s.next_size];
            let ring = (i as u32) & MAX_24BIT;
            let offset = s.next_slot * s.slot_len;
            if s.cfg.payload == Payload::Prbs {
                frame.resize(len as usize, 0);
                rctb_core::roce::prbs_fill(channel, ring, frame);
                t.mr_write(s.mr.id, offset, frame)?;
            }
            let sge = [Sge::new(s.mr.id, offset, len)];
            let imm = (ring << 8) | channel as u32;
            let wr = SendWr::new(i, SendOp::SendWithImm { imm }, &sge);
            // Send i is signalled when (i + 1) is a multiple of signal_every.
            let signaled = s.until_signal == 0 || i + 1 == s.cfg.count;
            let wr = if signaled { wr } else { wr.unsignaled() };
            t.post_send(s.q.qp.id, &wr)?;
            s.outstanding += 1;
            s.stats.posted += 1;
            s.stats.bytes += len as u64;
            s.until_signal = s.until_signal.checked_sub(1).unwrap_or(s.signal_every - 1);
            s.next_channel = wrap(s.next_channel + 1, s.cfg.channels.len());
            s.next_size = wrap(s.next_size + 1, s.cfg.sizes.len());
            s.next_slot = wrap(s.next_slot + 1, s.cfg.window as u64);
        }
        Ok(None)
    }

    /// Progress of the current stream.
    pub fn stream_stats(&self) -> Option<&StreamStats> {
        self.stream.as_ref().map(|s| &s.stats)
    }

    /// The CQ of the engine's QP (to wait on it).
    pub fn cq(&self) -> Option<CqId> {
        self.qps.values().next().map(|q| q.cq)
    }
}

/// What the setup sequence returns (surf `RoCEv2FpgaParams`).
// Not non_exhaustive: the values the surf hand-off carries, fixed by that
// protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FpgaParams {
    /// The engine's QP number, for the host's RTR.
    pub qpn: Qpn,
    /// The engine's local key.
    pub lkey: u32,
    /// The engine's PD handle.
    pub pd_handler: u32,
    /// The engine's remote key.
    pub rkey: u32,
}

/// Why the setup sequence failed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SetupError {
    /// A parameter out of its range.
    #[error("invalid setup parameter: {0}")]
    Invalid(#[from] InvalidValue),
    /// The engine said no to a step; what came before was undone.
    #[error("engine refused {step} (rolled back)")]
    Refused {
        /// The step (`alloc_pd`, `reg_mr`, `create_qp`, a transition).
        step: &'static str,
    },
    /// The metadata bus failed or answered out of turn.
    #[error("metadata bus: {0}")]
    Bus(String),
    /// The engine's own error.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Writes a TX word, triggers it and reads the answer (the host driver's view).
fn transact<T: Transport>(e: &mut FpgaEngine<T>, tx: Tx) -> Result<Rx, SetupError> {
    let regs = tx.encode().map_err(|err| SetupError::Bus(err.to_string()))?;
    for (i, r) in regs.iter().enumerate() {
        e.write(REG_TX + 4 * i as u32, *r)?;
    }
    e.write(REG_CONTROL, CONTROL_SEND)?;
    if e.read(REG_CONTROL)? & CONTROL_RECV == 0 {
        return Err(SetupError::Bus("no answer".into()));
    }
    let mut rx = [0u32; RX_REGS];
    for (i, r) in rx.iter_mut().enumerate() {
        *r = e.read(REG_RX + 4 * i as u32)?;
    }
    e.write(REG_CONTROL, CONTROL_RECV)?;
    Rx::decode(&rx).map_err(|err| SetupError::Bus(err.to_string()))
}

/// The surf setup sequence. `mr_len` is the engine's own staging region;
/// `rng` draws the PD key and MR key parts.
pub fn setup_connection<T: Transport>(
    e: &mut FpgaEngine<T>,
    host: &HostParams,
    tc: &TransportConfig,
    mr_len: u32,
    rng: &mut impl FnMut() -> u32,
) -> Result<FpgaParams, SetupError> {
    // Validate everything before the first register write.
    if host.qpn > MAX_24BIT {
        return Err(InvalidValue::new("host_qpn", host.qpn as u64, "must fit 24 bits").into());
    }
    if mr_len == 0 {
        return Err(InvalidValue::new("mr_len", 0, "must be > 0").into());
    }
    if host.mr_len >= 1 << 32 {
        return Err(InvalidValue::new("host mr_len", host.mr_len, "must be < 2^32").into());
    }
    e.write(REG_SOFT_RESET, 1)?;

    let pd_key = rng();
    let (lkey_part, rkey_part) = (rng() & 0x7FFF_FFFF, rng() & 0x7FFF_FFFF);
    let pd_handler = match transact(e, Tx::Pd(PdTx { alloc: true, key: pd_key, handler: 0 }))? {
        Rx::Pd { success: true, handler } => handler,
        _ => return Err(SetupError::Refused { step: "PD alloc" }),
    };
    // Undo stack, run in reverse on failure.
    let mut undo: Vec<Tx> = vec![Tx::Pd(PdTx { alloc: false, key: pd_key, handler: pd_handler })];
    let result = (|| {
        let mr = MrTx {
            alloc: true,
            laddr: 0,
            len: mr_len,
            access: 0x0F,
            pd_handler,
            lkey_part,
            rkey_part,
            lkey_or_not: false,
            lkey: 0,
            rkey: 0,
        };
        let (lkey, rkey) = match transact(e, Tx::Mr(mr))? {
            Rx::Mr { success: true, lkey, rkey } => (lkey, rkey),
            _ => return Err(SetupError::Refused { step: "MR alloc" }),
        };
        undo.push(Tx::Mr(MrTx { alloc: false, lkey, rkey, lkey_or_not: true, ..mr }));
        let qpn = match transact(e, Tx::Qp(QpTx::rc(QpRequest::Create, pd_handler, 0)))? {
            Rx::Qp { success: true, qpn, .. } => qpn,
            _ => return Err(SetupError::Refused { step: "QP create" }),
        };
        undo.push(Tx::Qp(QpTx::rc(QpRequest::Destroy, pd_handler, qpn)));
        let modify =
            |state: u8, attr_mask: u32| QpTx { state, attr_mask, ..QpTx::rc(QpRequest::Modify, pd_handler, qpn) };
        let steps = [
            ("INIT", modify(QPS_INIT, MASK_INIT)),
            (
                "RTR",
                QpTx {
                    pmtu: tc.pmtu().code(),
                    dest_qpn: host.qpn,
                    rq_psn: host.rq_psn.get(),
                    min_rnr_timer: tc.min_rnr_timer().code(),
                    ..modify(QPS_RTR, MASK_RTR)
                },
            ),
            (
                "RTS",
                QpTx {
                    sq_psn: host.sq_psn.get(),
                    retry_cnt: tc.retry_count(),
                    rnr_retry: tc.rnr_retry(),
                    ..modify(QPS_RTS, MASK_RTS)
                },
            ),
        ];
        for (step, m) in steps {
            match transact(e, Tx::Qp(m))? {
                Rx::Qp { success: true, .. } => {}
                _ => return Err(SetupError::Refused { step }),
            }
        }
        Ok(FpgaParams { qpn, lkey, pd_handler, rkey })
    })();
    if result.is_err() {
        for tx in undo.into_iter().rev() {
            let _ = transact(e, tx);
        }
    }
    result
}

/// The surf teardown: ERR, destroy QP, free MR, free PD.
pub fn teardown_connection<T: Transport>(e: &mut FpgaEngine<T>, p: &FpgaParams) -> Result<(), SetupError> {
    let steps = [
        ("QP ERR", Tx::Qp(QpTx { state: QPS_ERR, attr_mask: 1, ..QpTx::rc(QpRequest::Modify, p.pd_handler, p.qpn) })),
        ("QP destroy", Tx::Qp(QpTx::rc(QpRequest::Destroy, p.pd_handler, p.qpn))),
        (
            "MR free",
            Tx::Mr(MrTx {
                alloc: false,
                laddr: 0,
                len: 0,
                access: 0x0F,
                pd_handler: p.pd_handler,
                lkey_part: 0,
                rkey_part: 0,
                lkey_or_not: true,
                lkey: p.lkey,
                rkey: p.rkey,
            }),
        ),
        ("PD free", Tx::Pd(PdTx { alloc: false, key: 0, handler: p.pd_handler })),
    ];
    let mut first = None;
    for (step, tx) in steps {
        let ok = matches!(
            transact(e, tx)?,
            Rx::Pd { success: true, .. } | Rx::Mr { success: true, .. } | Rx::Qp { success: true, .. }
        );
        if !ok && first.is_none() {
            first = Some(SetupError::Refused { step });
        }
    }
    first.map_or(Ok(()), Err)
}
