//! `VerbsTransport`: the [`Transport`] trait over one RDMA device.
//!
//! This module owns the handle tables (id -> verbs object) and the resource
//! and data-path helpers; `verbs.rs` implements the trait's verbs on them,
//! `cm.rs` holds the RDMA CM state machine and `wait.rs` the blocking wait
//! on completion and CM channels.

mod cm;
mod verbs;
mod wait;

use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};
use std::marker::PhantomData;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;

use rctb_core::time::Instant;
use rctb_core::transport::*;
use rdma_sys::{ibv_event_type, ibv_recv_wr, ibv_sge, ibv_wc};

use crate::cq::Cq;
use crate::device::Context;
use crate::gid::{GidDetectError, detect_gid_index};
use crate::mr::MemoryRegion;
use crate::pd::Pd;
use crate::qp::{QpParents, QueuePair, modify_attr};
use crate::srq::Srq;
use crate::summary::{DeviceSummary, SYSFS_ROOT};
use crate::sys::monotonic_nanos;
use crate::wc::completion;

pub use self::cm::CONNECT_SETTLE;
use self::cm::{CmOwner, Conn};

/// Completions fetched per `ibv_poll_cq` call.
const POLL_BATCH: usize = 32;

/// A CQ and the completions `wait` already took off it (so a completion
/// that `wait` saw is never lost before `poll_cq` returns it).
#[derive(Debug)]
struct CqEntry {
    cq: Arc<Cq>,
    polled: VecDeque<Completion>,
    /// `wait` armed the CQ and has not read the event since: the CQ is
    /// still armed or its event waits on the channel, so arming it again
    /// (a system call on some providers) would add nothing.
    armed: bool,
}

/// What `wait` and `cm_poll` know of the RDMA CM event channel without
/// reading it (a read is a system call: `rdma_get_cm_event` is a `write`
/// to the `rdma_cm` file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CmChannelState {
    /// Nothing known: `cm_poll` reads it.
    Unknown,
    /// A `ppoll` saw its fd readable: `wait` and `cm_poll` read it.
    Readable,
    /// The last `wait` was woken by a CQ and its `ppoll` saw the channel
    /// empty, and `cm_poll` has not looked since: the next `cm_poll`
    /// trusts that instead of reading.
    SeenEmpty,
}

/// Buffers the data path reuses, so posting, polling and waiting allocate
/// nothing once they have grown to the largest call seen.
#[derive(Default)]
struct Scratch {
    /// Resolved SGEs of the WR(s) being posted.
    sges: Vec<ibv_sge>,
    /// The chained WRs of `post_recv_many`.
    recv_chain: Vec<ibv_recv_wr>,
    /// `wait`'s poll set: the watched CQs' channels, then the CM channel.
    pollfds: Vec<libc::pollfd>,
}

impl std::fmt::Debug for Scratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scratch").finish_non_exhaustive()
    }
}

/// A QP handle: a real QP, or one RDMA CM will create once the route is
/// resolved (`cm_connect` hands out the id at once).
#[derive(Debug)]
enum QpSlot {
    Pending(PendingQp),
    Ready(QueuePair),
}

/// What `rdma_create_qp` will need; holding the parents keeps them (and so
/// `dealloc_pd`/`destroy_cq` say `Busy`) until the QP exists.
#[derive(Debug)]
struct PendingQp {
    /// The connection that will create it; `None` once that was destroyed.
    conn: Option<ConnId>,
    init: QpInit,
    parents: QpParents,
}

/// The verbs backend of [`Transport`], driving one RDMA device through
/// libibverbs and librdmacm. See the [crate docs](crate) for the contract.
///
/// | trait method | verbs / librdmacm |
/// | --- | --- |
/// | `device` | `ibv_query_device` (once, at `open`) |
/// | `port` | `ibv_query_port`, `ibv_query_gid` per index, GID type from sysfs |
/// | `alloc_pd` / `dealloc_pd` | `ibv_alloc_pd` / `ibv_dealloc_pd` |
/// | `reg_mr` / `dereg_mr` | page-aligned zeroed buffer + `ibv_reg_mr` / `ibv_dereg_mr`, then free |
/// | `mr_read` / `mr_write` / `mr_view` | bounds-checked copies / a borrowed slice |
/// | `create_cq` / `destroy_cq` | `ibv_create_comp_channel` (O_NONBLOCK) + `ibv_create_cq` / both destroyed |
/// | `create_qp` | `ibv_create_qp` (RC; `ibv_qp_init_attr.srq` from `QpInit::srq`) |
/// | `modify_qp` | `ibv_query_qp` (state check), `ibv_modify_qp` with the IBA-required mask |
/// | `query_qp` / `destroy_qp` | `ibv_query_qp` / `ibv_destroy_qp` |
/// | `post_send` / `post_recv` | `ibv_post_send` / `ibv_post_recv` (provider ops table) |
/// | `poll_cq` | `ibv_poll_cq` (provider ops table) |
/// | `create_srq` | `ibv_create_srq`, then `ibv_modify_srq` (`IBV_SRQ_LIMIT`) when a limit is given |
/// | `modify_srq` / `destroy_srq` | `ibv_modify_srq` with `IBV_SRQ_LIMIT` / `ibv_destroy_srq` |
/// | `post_srq_recv` | `ibv_post_srq_recv` (provider ops table) |
/// | `poll_async_event` | `ibv_get_async_event` (async fd made O_NONBLOCK at `open`) + `ibv_ack_async_event` |
/// | `wait` | `ibv_poll_cq`, `ibv_req_notify_cq` (once per event), `ppoll` on the CQ and CM channels, `ibv_get_cq_event` + `ibv_ack_cq_events`, `rdma_get_cm_event` when its fd was readable |
/// | `cm_listen` | `rdma_create_id` (TCP), `rdma_bind_addr` (device IPv4), `rdma_listen` |
/// | `cm_connect` | `rdma_create_id`, `rdma_resolve_addr`, then `rdma_resolve_route`, `rdma_create_qp`, `rdma_connect` |
/// | `cm_accept` / `cm_reject` | `rdma_create_qp` + `rdma_accept` / `rdma_reject` |
/// | `cm_disconnect` | `rdma_disconnect` |
/// | `cm_destroy` / `cm_close_listener` | `rdma_destroy_id` |
/// | `cm_poll` | `rdma_get_cm_event` (non-blocking) + `rdma_ack_cm_event`, skipped when the last `wait`'s `ppoll` saw the channel empty |
/// | `now` | `clock_gettime(CLOCK_MONOTONIC)` |
///
/// Asynchronous events come from the device context, which librdmacm
/// opens once per device and so every `VerbsTransport` on that device in
/// the process shares: each event goes to whichever transport polls first,
/// and one about another transport's CQ, QP or SRQ is reported as
/// [`AsyncEvent::Other`].
///
/// `Send`, not `Sync`:
///
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<rctb_hw::VerbsTransport>(); // not Sync
/// ```
#[derive(Debug)]
pub struct VerbsTransport {
    // Fields drop top to bottom. CM ids go first (rdma_cm stops touching
    // QPs), then QPs, SRQs, MRs, CQs, PDs, the CM event channel and finally
    // the device context. Every object also holds an Arc of its parents, so
    // a different order would still be sound; this one needs no EBUSY
    // retries.
    conns: BTreeMap<ConnId, Conn>,
    listeners: BTreeMap<ListenId, crate::cm::CmId>,
    qps: BTreeMap<QpId, QpSlot>,
    /// After the QPs that use them, before their PDs.
    srqs: BTreeMap<SrqId, Arc<Srq>>,
    mrs: BTreeMap<MrId, MemoryRegion>,
    cqs: BTreeMap<CqId, CqEntry>,
    pds: BTreeMap<PdId, Arc<Pd>>,
    /// Created on first CM use, so verbs-only use needs no rdma_ucm.
    channel: Option<Arc<crate::cm::EventChannel>>,
    ctx: Arc<Context>,
    /// QPN -> handle, for completions. Kept after a QP is destroyed (its
    /// completions may still sit in a CQ) until the QPN is reused.
    qpn_to_qp: BTreeMap<u32, QpId>,
    /// `rdma_cm_id` address -> owner, to route CM events.
    cm_owner: BTreeMap<usize, CmOwner>,
    cm_events: VecDeque<CmEvent>,
    cm_errors: VecDeque<TransportError>,
    /// See [`CmChannelState`].
    cm_channel: CmChannelState,
    next_id: u32,
    /// Reused buffers of the data path.
    scratch: Scratch,
    /// `!Sync`: `&self` methods read device state that `&mut self` methods
    /// change, with no locking. (Raw pointers already imply it; this says so.)
    _not_sync: PhantomData<Cell<()>>,
}

// SAFETY: libibverbs and librdmacm objects may be used from any thread (the
// libraries lock internally; verbs calls are documented thread-safe), and
// nothing here is tied to the creating thread: errno is read on the thread
// that made the call, right after it. Every Arc and raw pointer the
// transport holds is private and never handed out (the application sees
// only Copy ids and plain data), so moving the transport moves every owner
// of every object at once: no other thread can keep a reference. It stays
// `!Sync`.
unsafe impl Send for VerbsTransport {}

impl VerbsTransport {
    /// Opens RDMA device `name` (e.g. "rxe0", "mlx5_0").
    ///
    /// The context comes from librdmacm (`rdma_get_devices`), so RDMA CM ids
    /// bound to this device share it with every PD, MR, CQ and QP made here.
    /// Returns `NoDevice` (with a hint) when the machine has no RDMA device
    /// or none of that name.
    pub fn open(name: &str) -> Result<Self> {
        let ctx = Arc::new(Context::open(name)?);
        Ok(VerbsTransport {
            conns: BTreeMap::new(),
            listeners: BTreeMap::new(),
            qps: BTreeMap::new(),
            srqs: BTreeMap::new(),
            mrs: BTreeMap::new(),
            cqs: BTreeMap::new(),
            pds: BTreeMap::new(),
            channel: None,
            ctx,
            qpn_to_qp: BTreeMap::new(),
            cm_owner: BTreeMap::new(),
            cm_events: VecDeque::new(),
            cm_errors: VecDeque::new(),
            cm_channel: CmChannelState::Unknown,
            next_id: 1,
            scratch: Scratch::default(),
            _not_sync: PhantomData,
        })
    }

    /// Every RDMA device with its ports and GID tables (see
    /// [`list_devices`](crate::list_devices)).
    pub fn list_devices() -> Result<Vec<DeviceSummary>> {
        crate::device::list_devices()
    }

    /// The device name this transport drives.
    pub fn device_name(&self) -> &str {
        &self.ctx.name
    }

    /// The device's IPv4 address: the first RoCE v2 GID that is IPv4-mapped
    /// (`::ffff:a.b.c.d`), scanning ports in order. RDMA CM binds to it.
    pub fn device_ipv4(&self) -> Option<Ipv4Addr> {
        self.ctx.ipv4()
    }

    /// [`detect_gid_index`](crate::detect_gid_index) for this device, from
    /// the live `/sys`: the GID index to use towards `peer`.
    pub fn detect_gid_index(&self, port: u8, peer: Ipv4Addr) -> Result<u32, GidDetectError> {
        detect_gid_index(Path::new(SYSFS_ROOT), &self.ctx.name, port, peer)
    }

    /// The local port a listener is bound to (useful after `cm_listen(0)`).
    pub fn listen_port(&self, listener: ListenId) -> Option<u16> {
        self.listeners.get(&listener).map(|id| id.src_port())
    }

    /// The oldest error the RDMA CM state machine hit while driven from
    /// `cm_poll`/`wait` (which cannot return it: the connection concerned
    /// also got an `Unreachable` event). `None` when there is none.
    pub fn take_cm_error(&mut self) -> Option<TransportError> {
        self.cm_errors.pop_front()
    }

    fn alloc_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id = self.next_id.checked_add(1).expect("2^32 handles allocated");
        id
    }

    fn pd(&self, pd: PdId, verb: Verb) -> Result<&Arc<Pd>> {
        self.pds.get(&pd).ok_or_else(|| TransportError::handle(verb, pd))
    }

    /// `len` bytes of region `mr` at `offset`, shared without a copy: the
    /// handle keeps the memory allocated (also after `dereg_mr`), and sees
    /// what the NIC writes into it. For zero-copy views (the Python
    /// package's buffer protocol); bounds-checked like `mr_read`.
    pub fn mr_export(&self, mr: MrId, offset: u64, len: u64) -> Result<crate::MrExport> {
        self.mr(mr, Verb::MrAccess)?.export(offset, len)
    }

    fn mr(&self, mr: MrId, verb: Verb) -> Result<&MemoryRegion> {
        self.mrs.get(&mr).ok_or_else(|| TransportError::handle(verb, mr))
    }

    fn cq_arc(&self, cq: CqId, verb: Verb) -> Result<&Arc<Cq>> {
        self.cqs.get(&cq).map(|e| &e.cq).ok_or_else(|| TransportError::handle(verb, cq))
    }

    fn srq_arc(&self, srq: SrqId, verb: Verb) -> Result<&Arc<Srq>> {
        self.srqs.get(&srq).ok_or_else(|| TransportError::handle(verb, srq))
    }

    /// Checks a `QpInit` and collects the QP's parents (the SRQ too, so
    /// `ibv_create_qp` and `rdma_create_qp` both get it in their init attr).
    fn qp_parents(&self, init: &QpInit, verb: Verb) -> Result<QpParents> {
        let parents = QpParents {
            pd: Arc::clone(self.pd(init.pd, verb)?),
            send_cq: Arc::clone(self.cq_arc(init.send_cq, verb)?),
            recv_cq: Arc::clone(self.cq_arc(init.recv_cq, verb)?),
            srq: init.srq.map(|s| self.srq_arc(s, verb).map(Arc::clone)).transpose()?,
        };
        let dev = &self.ctx.info;
        let c = &init.caps;
        // With an SRQ the receive capacities are ignored (not passed on).
        let own_rq = init.srq.is_none();
        for (field, v, max, checked) in [
            ("max_send_wr", c.max_send_wr, dev.max_qp_wr, true),
            ("max_recv_wr", c.max_recv_wr, dev.max_qp_wr, own_rq),
            ("max_send_sge", c.max_send_sge, dev.max_sge, true),
            ("max_recv_sge", c.max_recv_sge, dev.max_sge, own_rq),
        ] {
            if checked && v > max {
                return Err(TransportError::invalid(verb, field, v.into(), "exceeds the device limit"));
            }
        }
        Ok(parents)
    }

    fn qp_mut(&mut self, qp: QpId, verb: Verb) -> Result<&mut QueuePair> {
        match self.qps.get_mut(&qp) {
            Some(QpSlot::Ready(q)) => Ok(q),
            Some(QpSlot::Pending(_)) => Err(not_created(verb)),
            None => Err(TransportError::handle(verb, qp)),
        }
    }

    /// Appends the SGEs of a WR, resolved against our regions, to `out`.
    fn resolve_sges(&self, sges: &[Sge], verb: Verb, out: &mut Vec<ibv_sge>) -> Result<()> {
        for s in sges {
            out.push(self.mr(s.mr, verb)?.sge(s.offset, s.len, verb)?);
        }
        Ok(())
    }

    /// Runs `f` with the SGEs of `sges` resolved into the reused buffer.
    fn with_sges<R>(
        &mut self,
        sges: &[Sge],
        verb: Verb,
        f: impl FnOnce(&mut Self, &mut [ibv_sge]) -> Result<R>,
    ) -> Result<R> {
        let mut buf = std::mem::take(&mut self.scratch.sges);
        buf.clear();
        let r = self.resolve_sges(sges, verb, &mut buf).and_then(|()| f(self, &mut buf));
        self.scratch.sges = buf;
        r
    }

    fn insert_qp(&mut self, q: QueuePair) -> QpInfo {
        let info = QpInfo { id: q.id, qpn: q.qpn, state: q.state };
        self.qpn_to_qp.insert(q.qpn, q.id);
        self.qps.insert(q.id, QpSlot::Ready(q));
        info
    }

    /// The QP whose `ibv_qp` is `ptr` (an async event's element).
    fn qp_by_ptr(&self, ptr: *mut libc::c_void) -> Option<QpId> {
        self.qps.iter().find_map(|(&id, s)| match s {
            QpSlot::Ready(q) if q.as_ptr().cast() == ptr => Some(id),
            _ => None,
        })
    }

    /// The trait's view of an async event: the handle its element is, when
    /// that is one of ours (pointers are compared, never dereferenced).
    fn async_event(&self, raw: &crate::device::AsyncEventRaw) -> AsyncEvent {
        use ibv_event_type as E;
        let (t, ptr) = (raw.event_type, raw.element);
        let known = if ptr.is_null() {
            None
        } else if t == E::IBV_EVENT_CQ_ERR as u32 {
            self.cqs.iter().find(|(_, e)| e.cq.as_ptr().cast() == ptr).map(|(&cq, _)| AsyncEvent::CqErr { cq })
        } else if t == E::IBV_EVENT_QP_FATAL as u32 {
            self.qp_by_ptr(ptr).map(|qp| AsyncEvent::QpFatal { qp })
        } else if t == E::IBV_EVENT_QP_LAST_WQE_REACHED as u32 {
            self.qp_by_ptr(ptr).map(|qp| AsyncEvent::QpLastWqeReached { qp })
        } else if t == E::IBV_EVENT_SRQ_LIMIT_REACHED as u32 {
            self.srqs
                .iter()
                .find(|(_, s)| s.as_ptr().cast() == ptr)
                .map(|(&srq, _)| AsyncEvent::SrqLimitReached { srq })
        } else {
            None
        };
        known.unwrap_or(AsyncEvent::Other { event_type: t })
    }

    /// Moves completions from the hardware CQ into `polled` (at most `max`).
    fn fetch(&mut self, cq: CqId, max: usize, verb: Verb) -> Result<usize> {
        let entry = self.cqs.get_mut(&cq).ok_or_else(|| TransportError::handle(verb, cq))?;
        fetch_completions(entry, &mut self.qps, &self.qpn_to_qp, max)
    }

    /// Whether a watched CQ has a completion or a CM event is pending,
    /// polling the CQs (without blocking, and without a system call on
    /// providers that poll in user space) to find out. The CM channel is
    /// read only when the last `ppoll` saw it readable: `wait` sleeps on its
    /// fd too, so an event there still wakes it, without a read per wait.
    fn ready_now(&mut self, cqs: &[CqId]) -> Result<bool> {
        if self.cm_channel == CmChannelState::Readable {
            self.pump_cm();
        }
        if !self.cm_events.is_empty() {
            return Ok(true);
        }
        for &cq in cqs {
            let has = self.cqs.get(&cq).is_some_and(|e| !e.polled.is_empty());
            if has || self.fetch(cq, POLL_BATCH, Verb::Wait)? > 0 {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// The error for using a CM QP before `rdma_create_qp` made it.
fn not_created(verb: Verb) -> TransportError {
    TransportError::InvalidState {
        verb,
        state: QpState::Reset,
        what: "using a CM QP before route resolution created it",
    }
}

fn fetch_completions(
    entry: &mut CqEntry,
    qps: &mut BTreeMap<QpId, QpSlot>,
    qpn_to_qp: &BTreeMap<u32, QpId>,
    max: usize,
) -> Result<usize> {
    // SAFETY: ibv_wc is plain data; all-zero is valid. Zeroing also gives
    // a defined opcode for providers that leave it unset on errors.
    let mut wcs: [ibv_wc; POLL_BATCH] = unsafe { std::mem::zeroed() };
    let mut total = 0;
    while total < max {
        let want = (max - total).min(POLL_BATCH);
        let n = entry.cq.poll(&mut wcs[..want])?;
        for wc in &wcs[..n] {
            // QpId(0) is never handed out: it marks a QPN we never knew.
            let qp = qpn_to_qp.get(&wc.qp_num).copied().unwrap_or(QpId(0));
            let tracker = match qps.get_mut(&qp) {
                Some(QpSlot::Ready(q)) if q.qpn == wc.qp_num => Some(&mut q.tracker),
                _ => None,
            };
            entry.polled.push_back(completion(wc, qp, tracker));
        }
        total += n;
        if n < want {
            break;
        }
    }
    Ok(total)
}

/// Every RDMA device of this machine with its ports and GID tables.
///
/// Returns `NoDevice` (with a hint) when there is none: the kernel has no
/// RDMA support, or no device (and no soft-RoCE link) exists.
pub fn list_devices() -> Result<Vec<DeviceSummary>> {
    crate::device::list_devices()
}
