//! The C objects handed to programs. Each is a `#[repr(C)]` struct whose
//! first field is the C struct the program reads (so the program's pointer
//! is the object's), followed by what the library keeps of it. They are
//! boxed when created and freed by the matching destroy call.

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};

use rctb_core::transport::{CqId, MrId, PdId, QpId, SrqId};

use crate::device::Runtime;
use crate::sys;

/// An opened device. The `ibv_context` is the last field of the
/// `verbs_context`, as the inline verbs of `verbs.h` require: they reach
/// the extended operations at negative offsets from it.
#[repr(C)]
pub(crate) struct Context {
    pub vctx: sys::verbs_context,
    pub rt: Arc<Runtime>,
    /// Asynchronous events: the program reads `async_fd`, the engine's
    /// owner writes here.
    pub async_rx: OwnedFd,
    pub async_tx: Arc<OwnedFd>,
    /// `cmd_fd`: no commands travel on it; a descriptor so that a program
    /// that polls or closes it meets a real one.
    pub cmd: OwnedFd,
}

impl Context {
    /// The context a program's `ibv_context` pointer belongs to.
    ///
    /// # Safety
    /// `ctx` must be a context this library returned and not yet closed.
    pub unsafe fn from_ibv<'a>(ctx: *mut sys::ibv_context) -> &'a Context {
        let off = std::mem::offset_of!(Context, vctx) + std::mem::offset_of!(sys::verbs_context, context);
        // SAFETY: the caller promises `ctx` is the `context` field of a
        // live `Context`; stepping back by its offset gives the Context.
        unsafe { &*((ctx as *mut u8).sub(off) as *const Context) }
    }

    pub fn ibv(&self) -> *mut sys::ibv_context {
        &self.vctx.context as *const _ as *mut _
    }
}

#[repr(C)]
pub(crate) struct Pd {
    pub pd: sys::ibv_pd,
    pub id: PdId,
}

#[repr(C)]
pub(crate) struct Mr {
    pub mr: sys::ibv_mr,
    pub id: MrId,
}

#[repr(C)]
pub(crate) struct Cq {
    pub cq: sys::ibv_cq,
    pub id: CqId,
    /// Completion events delivered by `ibv_get_cq_event` and acknowledged
    /// by `ibv_ack_cq_events`: destroy waits until the two meet.
    pub events: Mutex<(u32, u32)>,
    pub acked: std::sync::Condvar,
    /// Whether the program ever armed this CQ (`ibv_req_notify_cq`). A CQ
    /// used with events is never polled with the lock untaken: a poll that
    /// reported it empty while it held completions older than the arming
    /// would leave them there with no event to come.
    pub armed_ever: std::sync::atomic::AtomicBool,
}

#[repr(C)]
pub(crate) struct Srq {
    pub srq: sys::ibv_srq,
    pub id: SrqId,
    pub max_wr: u32,
    pub max_sge: u32,
    pub limit: u32,
}

/// The inline-data bounce region of a QP: `slots` slots of `slot` bytes in
/// an engine-owned region of the QP's PD. Slot `n % slots` holds the data
/// of the `n`th inline send; with as many slots as send WRs, a slot is
/// reused only after the WR that used it retired (the queue had room).
#[derive(Clone, Copy)]
pub(crate) struct Bounce {
    pub mr: MrId,
    pub slot: u32,
    pub slots: u32,
    pub next: u64,
}

#[repr(C)]
pub(crate) struct Qp {
    pub qp: sys::ibv_qp,
    pub id: QpId,
    /// Everything `ibv_modify_qp` set, for `ibv_query_qp`.
    pub attr: Mutex<sys::ibv_qp_attr>,
    pub init: sys::ibv_qp_init_attr,
    pub bounce: Mutex<Option<Bounce>>,
}

/// A completion channel's events: a queue of CQ pointers, and a pipe that
/// carries one byte per queued event so that the descriptor the program
/// holds is readable exactly while one waits (blocking reads, O_NONBLOCK,
/// poll and epoll all work on it). A destroyed CQ's events leave the queue;
/// their bytes stay in the pipe, and a read that finds no event behind its
/// byte reads again.
pub(crate) struct Channel {
    pub queue: Mutex<VecDeque<usize>>,
    pub rx: OwnedFd,
    pub tx: OwnedFd,
}

impl Channel {
    /// Queues an event for the CQ at `cq` and makes the descriptor readable.
    pub fn push(&self, cq: usize) {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).push_back(cq);
        // A full pipe (64 Ki events unread) still leaves the descriptor readable.
        let _ = rustix::io::write(self.tx.as_fd(), &[1]);
    }

    /// Forgets the events of a CQ about to be destroyed.
    pub fn forget(&self, cq: usize) {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).retain(|c| *c != cq);
    }
}

#[repr(C)]
pub(crate) struct CompChannel {
    pub ch: sys::ibv_comp_channel,
    pub inner: Arc<Channel>,
}
