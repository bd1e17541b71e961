//! rctb-transport: the [`Transport`] trait, the one verbs-shaped interface
//! every rctb application is written against, its value types (queue
//! pairs, work requests, completions, errors), and the time type
//! ([`time`]) it speaks in. It does no I/O.
//!
//! Backends: the deterministic simulator (`rctb-sim`), the RC engine on
//! UDP (`rctb-udp`) and libibverbs/librdmacm (`rctb-hw`). Handles are small
//! `Copy` ids, not references, so the trait is easy to implement and to
//! mock, and so several actors can share one transport on one thread.
//!
//! # Contract
//! - Posting copies the work request (SGE list included); the memory it
//!   names must stay registered and unmodified until the WR completes, as in
//!   verbs.
//! - `poll_cq` never blocks. `wait` blocks (really, or in virtual time) until a
//!   watched CQ has a completion, a CM event is pending, or the deadline passes.
//! - Peer-caused failures arrive as completion statuses; `TransportError` is
//!   only for local misuse or OS failure, and always names the verb.
//! - Destroying a parent with live children is refused (`Busy`), as verbs
//!   returns EBUSY.
//!
//! Randomness is passed as a `u64` seed, each part of a run getting the
//! seed derived from its owner's and a stable label ([`seed`], which holds
//! the one copy of the derivation and, with the `rng` feature, the seeded
//! ChaCha8 generator every backend and model draws from).

#![warn(missing_docs)]

pub mod seed;
pub mod time;

mod cm;
mod error;
mod poll;
mod qp;
mod types;
mod work;

pub use cm::*;
pub use error::*;
pub use poll::*;
pub use qp::*;
pub use types::*;
pub use work::*;

use crate::time::Instant;

/// Receives a borrowed view of registered memory (see [`Transport::mr_view`]).
/// Any `FnMut(&[u8])` closure is one.
pub trait MrVisitor {
    /// Called once with the requested bytes, borrowed from the region for the
    /// duration of the call.
    fn visit(&mut self, bytes: &[u8]);
}

impl<F: FnMut(&[u8])> MrVisitor for F {
    fn visit(&mut self, bytes: &[u8]) {
        self(bytes)
    }
}

/// A verbs-shaped RDMA transport for RC queue pairs.
///
/// Methods come in groups: device facts; resource creation and destruction;
/// data-path posts and polls; connection management; time.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
pub trait Transport {
    // ---- device and port facts ----

    /// Facts about the device this transport drives.
    fn device(&self) -> Result<DeviceInfo>;

    /// Facts about `port` (1-based), including its GID table with types.
    fn port(&self, port: u8) -> Result<PortInfo>;

    // ---- resources ----

    /// Allocates a protection domain (`ibv_alloc_pd`).
    fn alloc_pd(&mut self) -> Result<PdId>;
    /// Frees a protection domain (`ibv_dealloc_pd`). `Busy` while memory
    /// regions or QPs still belong to it.
    fn dealloc_pd(&mut self, pd: PdId) -> Result<()>;

    /// Registers a new zeroed, page-aligned region of `len` bytes owned by the
    /// transport.
    fn reg_mr(&mut self, pd: PdId, len: u64, access: Access) -> Result<MrInfo>;
    /// Deregisters a region and frees its memory (`ibv_dereg_mr`). The caller
    /// must make sure no posted WR still names it.
    fn dereg_mr(&mut self, mr: MrId) -> Result<()>;
    /// A region's address, length, keys and access, as `reg_mr` returned them.
    fn mr_info(&self, mr: MrId) -> Result<MrInfo>;

    /// Copies `data` into the region at `offset` (bounds-checked).
    fn mr_write(&mut self, mr: MrId, offset: u64, data: &[u8]) -> Result<()>;
    /// Copies from the region at `offset` into `buf` (bounds-checked).
    fn mr_read(&self, mr: MrId, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// Calls `f` with `len` bytes of the region at `offset`, without copying.
    /// `f` must not call back into the transport.
    fn mr_view(&self, mr: MrId, offset: u64, len: u64, f: &mut dyn MrVisitor) -> Result<()>;

    /// Creates a completion queue of at least `depth` entries.
    fn create_cq(&mut self, depth: u32) -> Result<CqId>;
    /// Destroys a completion queue (`ibv_destroy_cq`). `Busy` while a QP uses
    /// it as its send or receive CQ.
    fn destroy_cq(&mut self, cq: CqId) -> Result<()>;

    /// Creates an RC QP in RESET.
    fn create_qp(&mut self, init: &QpInit) -> Result<QpInfo>;
    /// Moves a QP through its state machine with the attributes verbs takes.
    fn modify_qp(&mut self, qp: QpId, transition: &QpTransition) -> Result<()>;
    /// A QP's number and current state (`ibv_query_qp`); the state may have
    /// moved to ERR on its own after a fatal completion error.
    fn query_qp(&self, qp: QpId) -> Result<QpInfo>;
    /// Destroys a QP (`ibv_destroy_qp`); its outstanding work is dropped without
    /// completions. To see that work flushed, move it to ERR and drain the CQ
    /// first.
    fn destroy_qp(&mut self, qp: QpId) -> Result<()>;

    // ---- data path ----

    /// Posts one work request to the send queue (`ibv_post_send`). Needs RTS
    /// (`InvalidState` in RESET, INIT or RTR; in ERR the WR completes at once
    /// with WR_FLUSH_ERR); `QueueFull` with `max_send_wr` WRs outstanding;
    /// `InvalidArgument` with more SGEs than `max_send_sge`. An SGE naming an
    /// unknown region or bytes outside it is refused here by the verbs
    /// backend (`InvalidHandle`, `InvalidArgument`); the simulator completes
    /// the WR with LOC_PROT_ERR or LOC_LEN_ERR instead, as a NIC would.
    fn post_send<'a>(&mut self, qp: QpId, wr: &SendWr<'a>) -> Result<()>;
    /// Posts one receive to the receive queue (`ibv_post_recv`). Allowed from
    /// INIT on (`InvalidState` in RESET; in ERR it completes at once with
    /// WR_FLUSH_ERR); `QueueFull` with `max_recv_wr` receives posted;
    /// `InvalidArgument` with more SGEs than `max_recv_sge`.
    fn post_recv<'a>(&mut self, qp: QpId, wr: &RecvWr<'a>) -> Result<()>;
    /// Posts several receives to the receive queue in order, as one chained
    /// `ibv_post_recv` list where the backend can (the verbs backend does).
    /// The rules of [`post_recv`](Self::post_recv) hold for each WR. The
    /// default posts them one by one. On an error, the WRs before the failing
    /// one may have been posted (as `ibv_post_recv`'s `bad_wr` says); the
    /// verbs backend checks every WR before posting any, so a WR it refuses
    /// leaves none posted.
    fn post_recv_many<'a>(&mut self, qp: QpId, wrs: &[RecvWr<'a>]) -> Result<()> {
        for wr in wrs {
            self.post_recv(qp, wr)?;
        }
        Ok(())
    }
    /// Appends up to `max` completions of `cq` to `out`; returns how many.
    /// A completion that found the CQ full was lost; that is reported as
    /// [`AsyncEvent::CqErr`], not here.
    fn poll_cq(&mut self, cq: CqId, max: usize, out: &mut Vec<Completion>) -> Result<usize>;

    // ---- shared receive queues and asynchronous events ----

    /// Creates a shared receive queue (`ibv_create_srq`). QPs take from it
    /// when created with [`QpInit::srq`].
    fn create_srq(&mut self, init: &SrqInit) -> Result<SrqId>;
    /// Arms the SRQ limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): once a
    /// receive taken leaves fewer than `limit` posted, one
    /// [`AsyncEvent::SrqLimitReached`] is raised and the limit disarms.
    /// `InvalidArgument` when `limit` exceeds the SRQ's `max_wr`.
    fn modify_srq(&mut self, srq: SrqId, limit: u32) -> Result<()>;
    /// Destroys a shared receive queue (`ibv_destroy_srq`); its posted
    /// receives are dropped. `Busy` while a QP uses it.
    fn destroy_srq(&mut self, srq: SrqId) -> Result<()>;
    /// Posts one receive to a shared receive queue (`ibv_post_srq_recv`).
    /// `QueueFull` with `max_wr` posted; `InvalidArgument` with more SGEs
    /// than `max_sge`. A SEND arriving on a QP whose SRQ is empty is
    /// answered with an RNR NAK, as with a QP's own receive queue.
    fn post_srq_recv<'a>(&mut self, srq: SrqId, wr: &RecvWr<'a>) -> Result<()>;
    /// The next asynchronous event, if any (`ibv_get_async_event` and
    /// `ibv_ack_async_event`). Never blocks.
    fn poll_async_event(&mut self) -> Result<Option<AsyncEvent>>;

    // ---- connection management (RDMA CM semantics) ----

    /// Listens for connect requests on `port` of this node's address.
    /// `Busy` when the port already has a listener.
    fn cm_listen(&mut self, port: u16) -> Result<ListenId>;
    /// Creates a QP and starts connecting it to `params.remote`; the outcome
    /// arrives as a [`CmEvent`] for the returned `ConnId`.
    fn cm_connect(&mut self, params: &ConnectParams) -> Result<(ConnId, QpId)>;
    /// Accepts a connect request: creates the QP and brings it to RTS.
    /// `Busy` when `conn` is not a pending request.
    fn cm_accept(&mut self, conn: ConnId, params: &AcceptParams) -> Result<QpId>;
    /// Rejects a connect request (`rdma_reject`) with at most
    /// [`MAX_REJ_PRIVATE_DATA`] bytes of private data; the peer sees
    /// [`CmEvent::Rejected`]. `Busy` once the request was accepted or rejected.
    fn cm_reject(&mut self, conn: ConnId, private_data: &[u8]) -> Result<()>;
    /// Disconnects an established connection (`rdma_disconnect`): sends a
    /// DREQ and moves the QP to ERR; both sides then see
    /// [`CmEvent::Disconnected`].
    fn cm_disconnect(&mut self, conn: ConnId) -> Result<()>;
    /// Releases a connection id (`rdma_destroy_id`). Its QP outlives it and
    /// is freed by `destroy_qp`; a listener is released by `cm_close_listener`.
    fn cm_destroy(&mut self, conn: ConnId) -> Result<()>;
    /// Stops listening and frees the port (`rdma_destroy_id` on the listening
    /// id); errors name [`Verb::CmDestroy`].
    fn cm_close_listener(&mut self, listener: ListenId) -> Result<()>;
    /// The next pending CM event, if any. Never blocks.
    fn cm_poll(&mut self) -> Option<CmEvent>;

    // ---- time ----

    /// The transport's clock (virtual in the simulator).
    fn now(&self) -> Instant;

    /// Waits until a completion is ready on one of `cqs`, a CM event is
    /// pending, or `deadline` passes. In the simulator this advances virtual
    /// time (running every other node's traffic meanwhile).
    fn wait(&mut self, cqs: &[CqId], deadline: Instant) -> Result<Readiness>;
}
