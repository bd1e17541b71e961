//! Shared receive queues: creation, the limit (`ibv_modify_srq` with
//! `IBV_SRQ_LIMIT`) and posting receives.

use std::ptr::NonNull;
use std::sync::Arc;

use rctb_core::transport::{RecvWr, Result, SrqInit, TransportError, Verb};
use rdma_sys::{
    ibv_create_srq, ibv_destroy_srq, ibv_modify_srq, ibv_post_srq_recv, ibv_recv_wr, ibv_sge, ibv_srq, ibv_srq_attr,
    ibv_srq_attr_mask, ibv_srq_init_attr,
};

use crate::pd::Pd;
use crate::sys::{check_rc, last_os_error, os_error, rc_errno};

/// An `ibv_srq`. QPs created on it hold an `Arc` of it, so it outlives
/// them; `destroy_srq` refuses while they exist.
#[derive(Debug)]
pub(crate) struct Srq {
    srq: Option<NonNull<ibv_srq>>,
    /// The capacity asked for (`SrqInit::max_wr`): what the limit may not
    /// exceed, as on every backend.
    pub(crate) asked_wr: u32,
    /// The capacity the provider granted (at least what was asked).
    pub(crate) max_wr: u32,
    /// The SGEs per receive the provider granted (at least what was asked).
    pub(crate) max_sge: u32,
    /// Keeps the PD (and through it the device context) alive.
    pub(crate) pd: Arc<Pd>,
}

impl Srq {
    /// `ibv_create_srq`, then `ibv_modify_srq` to arm `init.limit` when it
    /// is not 0 (`ibv_create_srq` ignores `srq_limit`).
    pub(crate) fn create(pd: &Arc<Pd>, init: &SrqInit) -> Result<Self> {
        let mut attr = ibv_srq_init_attr {
            srq_context: std::ptr::null_mut(),
            attr: ibv_srq_attr { max_wr: init.max_wr, max_sge: init.max_sge, srq_limit: init.limit },
        };
        // SAFETY: the PD is alive (held by `pd`, which the SRQ keeps);
        // `attr` is a valid init attr the provider updates with what it
        // granted.
        let srq = unsafe { ibv_create_srq(pd.as_ptr(), &mut attr) };
        let srq = NonNull::new(srq).ok_or_else(|| match last_os_error(Verb::CreateSrq, "ibv_create_srq") {
            TransportError::Os { errno: libc::EINVAL, .. } => TransportError::invalid(
                Verb::CreateSrq,
                "max_wr",
                init.max_wr.into(),
                "refused by the provider (EINVAL): max_wr or max_sge exceeds what it supports",
            ),
            e => e,
        })?;
        // From here on `Drop` destroys the SRQ.
        let me = Srq {
            srq: Some(srq),
            asked_wr: init.max_wr,
            // ibv_create_srq wrote the granted sizes back into `attr`.
            max_wr: attr.attr.max_wr,
            max_sge: attr.attr.max_sge,
            pd: Arc::clone(pd),
        };
        if init.limit != 0 {
            me.modify_limit(init.limit, Verb::CreateSrq)?;
        }
        Ok(me)
    }

    /// The raw SRQ; valid while `self` lives.
    pub(crate) fn as_ptr(&self) -> *mut ibv_srq {
        self.srq.map_or(std::ptr::null_mut(), NonNull::as_ptr)
    }

    /// Arms the limit: `ibv_modify_srq` with `srq_limit` and `IBV_SRQ_LIMIT`.
    pub(crate) fn modify_limit(&self, limit: u32, verb: Verb) -> Result<()> {
        if limit > self.asked_wr {
            return Err(TransportError::invalid(verb, "limit", limit.into(), "exceeds the SRQ's max_wr"));
        }
        let mut attr = ibv_srq_attr { max_wr: 0, max_sge: 0, srq_limit: limit };
        let mask = ibv_srq_attr_mask::IBV_SRQ_LIMIT.0 as i32;
        // SAFETY: the SRQ is live; `attr` holds the one attribute `mask` names.
        let rc = unsafe { ibv_modify_srq(self.as_ptr(), &mut attr, mask) };
        match rc_errno(rc) {
            0 => Ok(()),
            libc::EINVAL => Err(TransportError::invalid(
                verb,
                "limit",
                limit.into(),
                "refused by the provider (EINVAL): exceeds the SRQ's max_wr",
            )),
            e => Err(os_error(verb, "ibv_modify_srq", e)),
        }
    }

    /// `ibv_post_srq_recv` of one WR whose SGEs were already resolved.
    pub(crate) fn post_recv(&self, wr: &RecvWr<'_>, sges: &mut [ibv_sge]) -> Result<()> {
        let verb = Verb::PostSrqRecv;
        if sges.len() > self.max_sge as usize {
            return Err(TransportError::invalid(verb, "num_sge", sges.len() as u64, "exceeds the SRQ's max SGE count"));
        }
        let mut rwr = ibv_recv_wr {
            wr_id: wr.wr_id,
            next: std::ptr::null_mut(),
            sg_list: if sges.is_empty() { std::ptr::null_mut() } else { sges.as_mut_ptr() },
            num_sge: sges.len() as i32, // <= max_sge (a u32 the provider granted)
        };
        let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
        // `ibv_post_srq_recv` is static inline in verbs.h (the provider's
        // `ops.post_srq_recv`); rdma-sys 0.3 reimplements it the same way.
        // SAFETY: the SRQ is live; `rwr` and the SGE array it points to
        // live across the call (the provider copies them before returning).
        let rc = unsafe { ibv_post_srq_recv(self.as_ptr(), &mut rwr, &mut bad) };
        match rc_errno(rc) {
            0 => Ok(()),
            libc::ENOMEM => Err(TransportError::QueueFull { verb, what: "work requests", limit: self.max_wr }),
            libc::EINVAL => Err(TransportError::invalid(
                verb,
                "num_sge",
                sges.len() as u64,
                "refused by the provider (EINVAL): exceeds the SRQ's max SGE count",
            )),
            e => Err(os_error(verb, "ibv_post_srq_recv", e)),
        }
    }

    /// Destroys the SRQ now, reporting failure (the SRQ then stays).
    /// Callers hold the only reference, so no QP uses it.
    pub(crate) fn destroy(&mut self) -> Result<()> {
        let Some(srq) = self.srq else { return Ok(()) };
        // SAFETY: our live SRQ; no QP uses it (the caller owns the last
        // Arc); every async event read was acknowledged at once.
        let rc = unsafe { ibv_destroy_srq(srq.as_ptr()) };
        check_rc(rc, Verb::DestroySrq, "ibv_destroy_srq")?;
        self.srq = None;
        Ok(())
    }
}

// SAFETY: libibverbs SRQs may be used from any thread (posting and
// modifying are thread-safe in libibverbs and its providers), and `Srq`
// keeps no Rust-side state that `&self` mutates.
unsafe impl Send for Srq {}
// SAFETY: as above.
unsafe impl Sync for Srq {}

impl Drop for Srq {
    fn drop(&mut self) {
        if let Err(e) = self.destroy() {
            tracing::warn!(error = %e, "releasing an SRQ failed during drop");
        }
    }
}
