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
//!
//! This file holds the register file and the verbs requests it executes;
//! `stream.rs` the frame streaming; `setup.rs` the host-side setup and
//! teardown sequences.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use rctb_core::transport::*;
use rctb_core::wire::surf::{
    CONTROL_RECV, CONTROL_SEND, MrTx, PdTx, QpRequest, QpTx, REG_CONTROL, REG_RX, REG_SOFT_RESET, REG_TX, RX_REGS, Rx,
    TX_REGS, Tx,
};
use thiserror::Error;

mod setup;
mod stream;

pub use setup::{FpgaParams, SetupError, setup_connection, teardown_connection};
use stream::Stream;
pub use stream::{Payload, StreamConfig, StreamStats};

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

    /// The CQ of the engine's QP (to wait on it).
    pub fn cq(&self) -> Option<CqId> {
        self.qps.values().next().map(|q| q.cq)
    }
}
