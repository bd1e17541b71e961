//! `rctb-hw`: the [`Transport`](rctb_core::transport::Transport) trait over
//! real RDMA hardware, through libibverbs and librdmacm (rdma-core): soft-RoCE
//! (`rdma_rxe`) or a ConnectX NIC. The only rctb crate with `unsafe` code;
//! every `unsafe` block says why it is sound.
//!
//! # Cargo features
//!
//! - **`verbs`** (off by default): the verbs backend itself,
//!   `VerbsTransport` and `list_devices`, linked to libibverbs and
//!   librdmacm through `rdma-sys`. Building it needs rdma-core's headers
//!   and libclang (Debian: `apt-get install libibverbs-dev librdmacm-dev
//!   libclang-dev`); running it needs an RDMA device.
//! - Without it the crate builds on any machine and holds what needs no
//!   libibverbs: GID table facts from sysfs and [`detect_gid_index`]
//!   (docs/protocols.md §1.8), [`DeviceSummary`] and the `NoDevice` hints. There
//!   is no stand-in transport: a program that wants a device is built with
//!   `verbs`, or says it was not (`rctb` does).
//!
//! # Quick start
//!
//! ```no_run
//! use rctb_core::transport::*;
//!
//! # #[cfg(not(feature = "verbs"))] fn main() {}
//! # #[cfg(feature = "verbs")]
//! # fn main() -> Result<(), TransportError> {
//! use rctb_hw::VerbsTransport;
//!
//! for dev in rctb_hw::list_devices()? {
//!     println!("{} {:?}", dev.name, dev.ipv4());
//! }
//! let mut t = VerbsTransport::open("rxe0")?;
//! let pd = t.alloc_pd()?;
//! let mr = t.reg_mr(pd, 4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
//! let cq = t.create_cq(64)?;
//! let qp = t.create_qp(&QpInit { pd, send_cq: cq, recv_cq: cq, caps: QpCaps::default(), sq_sig_all: false, srq: None })?;
//! t.modify_qp(qp.id, &QpTransition::Init(InitAttr { pkey_index: 0, port: 1, access: Access::LOCAL_WRITE }))?;
//! t.post_recv(qp.id, &RecvWr::new(1, &[Sge::new(mr.id, 0, 4096)]))?;
//! // ... RTR/RTS towards the peer (GID index from `detect_gid_index`), then
//! // post, `wait`, `poll_cq` as with any Transport.
//! # Ok(()) }
//! ```
//!
//! On a machine without RDMA every entry point returns
//! `TransportError::NoDevice` with a hint ([`NO_DEVICE_HINT`]), never panics.
//!
//! # Features
//!
//! - Devices come from librdmacm's list (`rdma_get_devices`), so PDs, CQs
//!   and MRs live on the same `ibv_context` as the RDMA CM ids bound to the
//!   device; an id that binds to another device is an error.
//! - Memory regions own zeroed, page-aligned buffers, reached through
//!   bounds-checked `mr_write`/`mr_read`/`mr_view`.
//! - RC QPs with the exact verbs attribute masks per transition; SEND, SEND
//!   with immediate, RDMA WRITE (with immediate) and RDMA READ.
//! - Shared receive queues (`create_srq`, `modify_srq` arming the limit,
//!   `post_srq_recv`, `destroy_srq`; QPs take one through `QpInit::srq`,
//!   with `ibv_create_qp` and RDMA CM alike).
//! - Asynchronous events (`poll_async_event`): `ibv_get_async_event` on the
//!   context's async fd, made non-blocking at `open`, each event
//!   acknowledged at once; CQ_ERR, QP_FATAL, SRQ_LIMIT_REACHED and
//!   QP_LAST_WQE_REACHED name our handle, anything else is `Other`.
//! - Completion channels per CQ and a non-blocking RDMA CM state machine;
//!   `wait` blocks in `ppoll` on both until a deadline.
//! - `now()` is `CLOCK_MONOTONIC`: every transport in the process shares it.
//! - GID tables with their RoCE types (sysfs), and [`detect_gid_index`]
//!   (docs/protocols.md §1.8), a pure function tested on fixture trees.
//!
//! # Thread safety
//!
//! `VerbsTransport` is `Send` but not `Sync`: move it to the thread that
//! drives it, do not share it. Many transports (even on one device) may run
//! in one process, each on its own thread or all on one. Handles are plain
//! `Copy` ids scoped to the transport that made them.
//!
//! (The `compile_fail` proof of this is on `VerbsTransport`'s own docs.)
//!
//! # Resource cleanup
//!
//! Each verbs object holds an `Arc` of its parent (QP -> PD, CQs and SRQ,
//! SRQ -> PD, MR -> PD, everything -> device context), so a parent is never
//! freed before its children. Destroying a parent that still has children
//! returns `TransportError::Busy`, as verbs returns EBUSY. Dropping the
//! transport releases everything, children first: CM ids, QPs, SRQs, MRs,
//! CQs, PDs, the CM event channel, the device list. A region's buffer is freed only after
//! `ibv_dereg_mr` succeeded; if it fails, `dereg_mr` returns the error and
//! keeps the region, and a drop leaks the buffer rather than free memory
//! the NIC might still write.
//!
//! # Differences from the simulator
//!
//! - RDMA CM private data arrives as the IB CM carries it: zero-padded to
//!   the field size (56 bytes in a REQ, 196 in a REP, 148 in a REJ); the
//!   sender's length is not on the wire.
//! - A connect to a port nobody listens on is `Unreachable { NoListener }`
//!   when the peer's CM rejects with reason 8 (invalid service ID); every
//!   other REJ, including reason 28 (consumer defined), is `Rejected`.
//! - `cm_connect` resolves the address and route itself (local work on
//!   RoCE) for up to `CONNECT_SETTLE`, so its REQ is normally sent when it
//!   returns; if resolution takes longer, the rest happens in `cm_poll` and
//!   `wait`, and until then the QP it returned does not exist yet: verbs on
//!   it return `InvalidState`.
//! - `cm_disconnect` reports `Disconnected` for its own side at once (the
//!   QP is in ERR); the peer sees `Disconnected` when its transport reads
//!   the DREQ, and only then answers it (so drive the peer too).
//! - Asynchronous events belong to the device context, which every
//!   `VerbsTransport` on one device in a process shares (librdmacm opens
//!   each device once): an event goes to the transport that polls first,
//!   as `Other` when the object is another transport's. A CQ overflow may
//!   also raise QP_FATAL for the QPs on it, as the device decides.
//! - A receive buffer too small for a SEND completes with `LOC_QP_OP_ERR` on
//!   rxe (Linux 6.1) where ConnectX reports `LOC_LEN_ERR`: the provider's
//!   status is passed through unchanged.

#![warn(missing_docs)]

// Always built: plain data and sysfs parsing, no libibverbs.
mod gid;
mod summary;

// The verbs backend: FFI to libibverbs and librdmacm (feature `verbs`).
#[cfg(feature = "verbs")]
mod cm;
#[cfg(feature = "verbs")]
mod cq;
#[cfg(feature = "verbs")]
mod device;
#[cfg(feature = "verbs")]
mod mr;
#[cfg(feature = "verbs")]
mod pd;
#[cfg(feature = "verbs")]
mod qp;
#[cfg(feature = "verbs")]
mod srq;
#[cfg(feature = "verbs")]
mod sys;
#[cfg(feature = "verbs")]
mod transport;
#[cfg(feature = "verbs")]
mod wc;

#[cfg(test)]
mod testutil;

pub use gid::{GidDetectError, SeenGid, detect_gid_index, parse_gid, parse_gid_type, read_gid_type};
pub use summary::{DeviceSummary, NO_DEVICE_HINT, UNKNOWN_DEVICE_HINT};

#[cfg(feature = "verbs")]
pub use cm::{REJ_CONSUMER_DEFINED, REJ_INVALID_SERVICE_ID};
#[cfg(feature = "verbs")]
pub use mr::MrExport;
#[cfg(feature = "verbs")]
pub use transport::{CONNECT_SETTLE, VerbsTransport, list_devices};

/// The CPython buffer protocol over registered memory (feature `python`).
#[cfg(feature = "python")]
pub mod pybuffer;

/// Whether this build of rctb-hw has the verbs backend (feature `verbs`).
pub const VERBS: bool = cfg!(feature = "verbs");
