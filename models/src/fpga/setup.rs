//! The host driver's side: the setup sequence over the engine's registers
//! (validate, soft reset, PD, MR, QP create, INIT, RTR, RTS; roll back in
//! reverse on failure) and the teardown.

use rctb_core::roce::{HostParams, TransportConfig};
use rctb_core::transport::*;
use rctb_core::wire::surf::{
    CONTROL_RECV, CONTROL_SEND, MrTx, PdTx, QpRequest, QpTx, REG_CONTROL, REG_RX, REG_SOFT_RESET, REG_TX, RX_REGS, Rx,
    Tx,
};
use thiserror::Error;

use super::{EngineError, FpgaEngine, MASK_INIT, MASK_RTR, MASK_RTS, QPS_ERR, QPS_INIT, QPS_RTR, QPS_RTS};

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
