//! Protection domains.

use std::ptr::NonNull;
use std::sync::Arc;

use rctb_core::transport::{Result, Verb};
use rdma_sys::{ibv_alloc_pd, ibv_dealloc_pd, ibv_pd};

use crate::device::Context;
use crate::sys::{last_os_error, os_error, rc_errno};

/// An `ibv_pd`. Memory regions and queue pairs hold an `Arc` of it, so it
/// outlives them; `dealloc` refuses while they exist.
#[derive(Debug)]
pub(crate) struct Pd {
    pd: Option<NonNull<ibv_pd>>,
    /// Keeps the device context open while the PD exists.
    _ctx: Arc<Context>,
}

impl Pd {
    pub(crate) fn alloc(ctx: &Arc<Context>) -> Result<Self> {
        // SAFETY: the context is open for as long as `ctx` lives.
        let pd = unsafe { ibv_alloc_pd(ctx.as_ptr()) };
        let pd = NonNull::new(pd).ok_or_else(|| last_os_error(Verb::AllocPd, "ibv_alloc_pd"))?;
        Ok(Pd { pd: Some(pd), _ctx: Arc::clone(ctx) })
    }

    /// The raw PD; valid while `self` lives.
    pub(crate) fn as_ptr(&self) -> *mut ibv_pd {
        self.pd.map_or(std::ptr::null_mut(), NonNull::as_ptr)
    }

    /// Deallocates now, reporting failure (the PD then stays usable).
    /// Callers hold the only reference (`Arc::get_mut`), so no child
    /// (MR, QP) is left.
    pub(crate) fn dealloc(&mut self) -> Result<()> {
        let Some(pd) = self.pd else { return Ok(()) };
        // SAFETY: `pd` is a live PD of ours with no children (see above).
        let rc = unsafe { ibv_dealloc_pd(pd.as_ptr()) };
        if rc != 0 {
            return Err(os_error(Verb::DeallocPd, "ibv_dealloc_pd", rc_errno(rc)));
        }
        self.pd = None;
        Ok(())
    }
}

// SAFETY: libibverbs objects may be used from any thread (verbs calls are
// thread-safe; the library locks where it must), and `Pd` has no Rust-side
// state that `&self` could race on: it only hands out the pointer.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Drop for Pd {
    fn drop(&mut self) {
        if let Some(pd) = self.pd.take() {
            // SAFETY: as in `dealloc`: the last owner is going away.
            let rc = unsafe { ibv_dealloc_pd(pd.as_ptr()) };
            if rc != 0 {
                tracing::warn!(errno = rc_errno(rc), "ibv_dealloc_pd failed while dropping a PD");
            }
        }
    }
}
