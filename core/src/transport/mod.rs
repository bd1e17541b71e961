//! The `Transport` trait: the one verbs-shaped interface every rctb
//! application is written against.
//!
//! Backends: the deterministic simulator (`rctb-sim`), libibverbs/librdmacm
//! (`rctb-hw`) and, later, a UDP RoCEv2 peer. Handles are small `Copy` ids, not
//! references, so the trait is easy to implement and to mock, and so several
//! actors can share one transport on one thread.
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

mod cm;
mod error;
mod qp;
mod types;
mod work;

pub use cm::*;
pub use error::*;
pub use qp::*;
pub use types::*;
pub use work::*;

use crate::time::Instant;

/// Receives a borrowed view of registered memory (see [`Transport::mr_view`]).
/// Any `FnMut(&[u8])` closure is one.
pub trait MrVisitor {
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

    fn alloc_pd(&mut self) -> Result<PdId>;
    fn dealloc_pd(&mut self, pd: PdId) -> Result<()>;

    /// Registers a new zeroed, page-aligned region of `len` bytes owned by the
    /// transport.
    fn reg_mr(&mut self, pd: PdId, len: u64, access: Access) -> Result<MrInfo>;
    fn dereg_mr(&mut self, mr: MrId) -> Result<()>;
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
    fn destroy_cq(&mut self, cq: CqId) -> Result<()>;

    /// Creates an RC QP in RESET.
    fn create_qp(&mut self, init: &QpInit) -> Result<QpInfo>;
    /// Moves a QP through its state machine with the attributes verbs takes.
    fn modify_qp(&mut self, qp: QpId, transition: &QpTransition) -> Result<()>;
    fn query_qp(&self, qp: QpId) -> Result<QpInfo>;
    fn destroy_qp(&mut self, qp: QpId) -> Result<()>;

    // ---- data path ----

    fn post_send<'a>(&mut self, qp: QpId, wr: &SendWr<'a>) -> Result<()>;
    fn post_recv<'a>(&mut self, qp: QpId, wr: &RecvWr<'a>) -> Result<()>;
    /// Appends up to `max` completions of `cq` to `out`; returns how many.
    fn poll_cq(&mut self, cq: CqId, max: usize, out: &mut Vec<Completion>) -> Result<usize>;

    // ---- connection management (RDMA CM semantics) ----

    /// Listens for connect requests on `port` of this node's address.
    fn cm_listen(&mut self, port: u16) -> Result<ListenId>;
    /// Creates a QP and starts connecting it to `params.remote`.
    fn cm_connect(&mut self, params: &ConnectParams) -> Result<(ConnId, QpId)>;
    /// Accepts a connect request: creates the QP and brings it to RTS.
    fn cm_accept(&mut self, conn: ConnId, params: &AcceptParams) -> Result<QpId>;
    fn cm_reject(&mut self, conn: ConnId, private_data: &[u8]) -> Result<()>;
    fn cm_disconnect(&mut self, conn: ConnId) -> Result<()>;
    /// Releases a connection id (and a listener's, via its `ListenId`).
    fn cm_destroy(&mut self, conn: ConnId) -> Result<()>;
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
