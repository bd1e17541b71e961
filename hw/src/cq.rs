//! Completion queues, each with its own completion channel.
//!
//! The channel's fd is non-blocking, so `wait` can `ppoll` it together with
//! the other CQs' channels and the RDMA CM event channel, and read events
//! without blocking. Every event read is acknowledged at once, so
//! `ibv_destroy_cq` (which waits for acknowledgements) never blocks.

use std::ptr::NonNull;
use std::sync::Arc;

use rctb_core::transport::{Result, TransportError, Verb};
use rdma_sys::{
    ibv_ack_cq_events, ibv_comp_channel, ibv_cq, ibv_create_comp_channel, ibv_create_cq, ibv_destroy_comp_channel,
    ibv_destroy_cq, ibv_get_cq_event, ibv_poll_cq, ibv_req_notify_cq, ibv_wc,
};

use crate::device::Context;
use crate::sys::{check_rc, errno, last_os_error, os_error, rc_errno, set_nonblocking};

/// An `ibv_cq` and its `ibv_comp_channel`. QPs hold an `Arc` of it.
#[derive(Debug)]
pub(crate) struct Cq {
    cq: Option<NonNull<ibv_cq>>,
    channel: Option<NonNull<ibv_comp_channel>>,
    /// Keeps the device context open while the CQ exists.
    _ctx: Arc<Context>,
}

impl Cq {
    pub(crate) fn create(ctx: &Arc<Context>, depth: u32) -> Result<Self> {
        let cqe = i32::try_from(depth)
            .map_err(|_| TransportError::invalid(Verb::CreateCq, "depth", depth.into(), "exceeds the C int range"))?;
        // SAFETY: the context is open while `ctx` lives.
        let channel = unsafe { ibv_create_comp_channel(ctx.as_ptr()) };
        let channel = NonNull::new(channel).ok_or_else(|| last_os_error(Verb::CreateCq, "ibv_create_comp_channel"))?;
        // From here on `Drop` releases whatever was created.
        let mut me = Cq { cq: None, channel: Some(channel), _ctx: Arc::clone(ctx) };
        // SAFETY: `channel` was just created and is live.
        set_nonblocking(unsafe { (*channel.as_ptr()).fd }, Verb::CreateCq)?;
        // SAFETY: context and channel are live; no cq_context is used.
        let cq = unsafe { ibv_create_cq(ctx.as_ptr(), cqe, std::ptr::null_mut(), channel.as_ptr(), 0) };
        me.cq = Some(NonNull::new(cq).ok_or_else(|| last_os_error(Verb::CreateCq, "ibv_create_cq"))?);
        Ok(me)
    }

    /// The raw CQ; valid while `self` lives.
    pub(crate) fn as_ptr(&self) -> *mut ibv_cq {
        self.cq.map_or(std::ptr::null_mut(), NonNull::as_ptr)
    }

    /// The completion channel's (non-blocking) fd.
    pub(crate) fn fd(&self) -> i32 {
        // SAFETY: the channel lives as long as `self` (released in Drop).
        self.channel.map_or(-1, |c| unsafe { (*c.as_ptr()).fd })
    }

    /// Polls up to `wcs.len()` completions; returns how many were written.
    pub(crate) fn poll(&self, wcs: &mut [ibv_wc]) -> Result<usize> {
        let n = i32::try_from(wcs.len()).unwrap_or(i32::MAX);
        // `ibv_poll_cq` is static inline in verbs.h (a jump through the
        // provider's ops table); rdma-sys 0.3 reimplements it in Rust the
        // same way, `(*(*cq).context).ops.poll_cq`.
        // SAFETY: the CQ is live; `wcs` has room for `n` entries.
        let rc = unsafe { ibv_poll_cq(self.as_ptr(), n, wcs.as_mut_ptr()) };
        usize::try_from(rc).map_err(|_| os_error(Verb::PollCq, "ibv_poll_cq", rc_errno(rc)))
    }

    /// Arms the CQ: the next completion raises an event on the channel.
    pub(crate) fn arm(&self) -> Result<()> {
        // Static inline in C, through the ops table (as `poll`).
        // SAFETY: the CQ is live.
        let rc = unsafe { ibv_req_notify_cq(self.as_ptr(), 0) };
        check_rc(rc, Verb::Wait, "ibv_req_notify_cq")
    }

    /// Reads and acknowledges one channel event, if one is pending; returns
    /// whether there was one. `wait` arms a CQ again only after its event
    /// was read, so at most one is pending, and reading stops there
    /// instead of paying a read that fails with EAGAIN.
    pub(crate) fn take_event(&self) -> Result<bool> {
        let Some(channel) = self.channel else { return Ok(false) };
        let mut cq: *mut ibv_cq = std::ptr::null_mut();
        let mut cq_ctx: *mut libc::c_void = std::ptr::null_mut();
        // SAFETY: the channel is live; the out-pointers are valid. The fd
        // is non-blocking, so an empty channel fails with EAGAIN.
        let rc = unsafe { ibv_get_cq_event(channel.as_ptr(), &mut cq, &mut cq_ctx) };
        if rc != 0 {
            return match errno() {
                libc::EAGAIN | libc::EINTR => Ok(false),
                e => Err(os_error(Verb::Wait, "ibv_get_cq_event", e)),
            };
        }
        // Acknowledging is bookkeeping in libibverbs (a counter under a
        // mutex, no system call), so it is done per event: nothing to win
        // by batching, and `ibv_destroy_cq` never waits on an unacked one.
        // SAFETY: `cq` is the CQ the event is for (ours: this channel
        // serves one CQ); acknowledging exactly the one event read.
        unsafe { ibv_ack_cq_events(cq, 1) };
        Ok(true)
    }

    /// Destroys the CQ and its channel now, reporting failure (what was
    /// not destroyed stays). Callers hold the only reference, so no QP
    /// uses the CQ.
    pub(crate) fn destroy(&mut self) -> Result<()> {
        if let Some(cq) = self.cq {
            // SAFETY: our live CQ; no QP uses it (the caller owns the last
            // Arc); every event read was acknowledged.
            let rc = unsafe { ibv_destroy_cq(cq.as_ptr()) };
            check_rc(rc, Verb::DestroyCq, "ibv_destroy_cq")?;
            self.cq = None;
        }
        if let Some(channel) = self.channel {
            // SAFETY: our live channel; its only CQ is gone.
            let rc = unsafe { ibv_destroy_comp_channel(channel.as_ptr()) };
            check_rc(rc, Verb::DestroyCq, "ibv_destroy_comp_channel")?;
            self.channel = None;
        }
        Ok(())
    }
}

// SAFETY: libibverbs CQs and completion channels may be used from any
// thread (polling, arming and event calls are thread-safe in libibverbs and
// its providers), and `Cq` keeps no Rust-side state that `&self` mutates.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Drop for Cq {
    fn drop(&mut self) {
        if let Err(e) = self.destroy() {
            tracing::warn!(error = %e, "releasing a CQ failed during drop");
        }
    }
}
