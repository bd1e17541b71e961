//! Ids (`struct rdma_cm_id` and what the library keeps beside it), the
//! events queued for them, and the sink that turns the engine's CM events
//! into events on the ids' channels.
//!
//! Locks: the sink runs with a device's engine locked and takes an id's
//! lock and a channel's queue under it. So a call of this library never
//! holds either across a call of the CM port: it reads what it needs,
//! lets go, then calls.

use std::cell::UnsafeCell;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::ptr::null_mut;
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::cmport::kind;

use crate::channel::EventChannel;
use crate::sys::*;
use crate::verbs::Record;

/// Where an id is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Idle,
    Bound,
    AddrResolved,
    RouteResolved,
    Listening,
    /// Active side: the REQ is out.
    Connecting,
    /// Passive side: a request not yet answered.
    Requested,
    /// Passive side: accepted, waiting for the RTU.
    Accepting,
    Connected,
    Disconnected,
    /// Rejected, unreachable, timed out.
    Failed,
}

/// What the library keeps of an id, under its lock.
pub(crate) struct IdState {
    pub phase: Phase,
    /// The device, once bound to an address or resolved; `None` bound to
    /// the wildcard address.
    pub dev: Option<usize>,
    /// The engine's connection and its device.
    pub conn: Option<u32>,
    /// The engine's listeners: (device, handle).
    pub listeners: Vec<(usize, u32)>,
    /// The request's read depths (passive side): an accept with no
    /// parameters answers with these.
    pub req_depths: (u8, u8),
    /// The channel is the id's own (synchronous mode).
    pub own_channel: bool,
    /// `rdma_create_ep` on a passive id: how `rdma_get_request` makes the
    /// new ids' QPs.
    pub ep_qp: Option<(usize, ibv_qp_init_attr)>,
    /// CQs and channels `rdma_create_qp` made for the id.
    pub own_cqs: bool,
    /// Events handed out and not yet acknowledged.
    pub events_out: u32,
}

/// An id: the C struct first, so a pointer to one is a pointer to the
/// other. The C struct is shared with the program, which reads and writes
/// it (`id->context`, `id->qp`, ...) while the library holds references
/// to the id: it lives in an `UnsafeCell`, reached through `c()`.
#[repr(C)]
pub(crate) struct Id {
    c: UnsafeCell<rdma_cm_id>,
    pub state: Mutex<IdState>,
    /// Signalled when an event of the id is acknowledged.
    pub acked: Condvar,
    /// The one path record (`route.path_rec` points at it).
    path: Box<UnsafeCell<ibv_sa_path_rec>>,
}

// SAFETY: the C struct is written only in calls on the id (the program's
// rule for rdma_cm_ids) or before the id is shared; what the sink thread
// reads of it (channel, context, port space) is written under the id's
// lock or before the id is shared.
unsafe impl Sync for Id {}
// SAFETY: as for Sync.
unsafe impl Send for Id {}

impl Id {
    /// A new id on `channel`, boxed and leaked.
    pub fn create(
        channel: *mut rdma_event_channel,
        own: bool,
        context: *mut std::ffi::c_void,
        ps: rdma_port_space,
    ) -> *mut Id {
        let path = Box::new(UnsafeCell::new(ibv_sa_path_rec::default()));
        let c = UnsafeCell::new(rdma_cm_id {
            channel,
            context,
            ps,
            qp_type: IBV_QPT_RC,
            route: rdma_route { path_rec: path.get(), num_paths: 0, ..Default::default() },
            ..Default::default()
        });
        let state = IdState {
            phase: Phase::Idle,
            dev: None,
            conn: None,
            listeners: Vec::new(),
            req_depths: (0, 0),
            own_channel: own,
            ep_qp: None,
            own_cqs: false,
            events_out: 0,
        };
        Box::into_raw(Box::new(Id { c, state: Mutex::new(state), acked: Condvar::new(), path }))
    }

    /// The id behind a program's pointer.
    ///
    /// # Safety
    /// `id` must be a live id of this library.
    pub unsafe fn of<'a>(id: *mut rdma_cm_id) -> &'a Id {
        // SAFETY: the caller's promise; the C struct is the first field.
        unsafe { &*id.cast::<Id>() }
    }

    /// The C struct the program sees.
    pub fn c(&self) -> *mut rdma_cm_id {
        self.c.get()
    }

    pub fn lock(&self) -> MutexGuard<'_, IdState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The id's channel.
    pub fn channel(&self) -> &EventChannel {
        // SAFETY: an id's channel outlives it (the program destroys its
        // ids before their channel; an own channel goes with the id).
        unsafe { EventChannel::of((*self.c()).channel) }
    }

    /// Sets the source address (and the port's GID when a device is known).
    pub fn set_src(&self, addr: SocketAddrV4) {
        let c = self.c();
        // SAFETY: the id's own address fields; the program reads them only
        // between calls on the id, as with rdma-core.
        unsafe {
            (*c).route.addr.__bindgen_anon_1.src_sin = sockaddr_in_of(addr);
            (*c).route.addr.addr.ibaddr.sgid.raw = gid_of(*addr.ip());
            (*c).route.addr.addr.ibaddr.pkey = 0xffff_u16.to_be();
        }
    }

    /// Sets the destination address and its GID.
    pub fn set_dst(&self, addr: SocketAddrV4) {
        let c = self.c();
        // SAFETY: as in set_src.
        unsafe {
            (*c).route.addr.__bindgen_anon_2.dst_sin = sockaddr_in_of(addr);
            (*c).route.addr.addr.ibaddr.dgid.raw = gid_of(*addr.ip());
        }
    }

    /// The source address, when it is IPv4.
    pub fn src(&self) -> Option<SocketAddrV4> {
        // SAFETY: the union is as large as a sockaddr_storage.
        unsafe { v4_of(&raw const (*self.c()).route.addr.__bindgen_anon_1.src_addr) }
    }

    /// The destination address, when it is IPv4.
    pub fn dst(&self) -> Option<SocketAddrV4> {
        // SAFETY: as in src.
        unsafe { v4_of(&raw const (*self.c()).route.addr.__bindgen_anon_2.dst_addr) }
    }

    /// Fills the path record (both GIDs) and says the route is known.
    pub fn set_route(&self) {
        let c = self.c();
        // SAFETY: the id's own path record (64 bytes: DGID at 0, SGID at
        // 16, the layout of `struct ibv_sa_path_rec`) and route count.
        unsafe {
            let raw = self.path.get().cast::<u8>();
            let ib = (*c).route.addr.addr.ibaddr;
            std::ptr::copy_nonoverlapping(ib.dgid.raw.as_ptr(), raw, 16);
            std::ptr::copy_nonoverlapping(ib.sgid.raw.as_ptr(), raw.add(16), 16);
            (*c).route.num_paths = 1;
        }
    }

    /// Queues an event for this id on its channel.
    pub fn post(&self, event: rdma_cm_event_type, status: i32, listen: *mut Id, rec: Option<&Record>) {
        let mut ev = Box::new(Event {
            c: rdma_cm_event {
                id: self as *const Id as *mut rdma_cm_id,
                listen_id: listen.cast(),
                event,
                status,
                ..Default::default()
            },
            data: [0; crate::cmport::MAX_PRIVATE_DATA],
        });
        if let Some(r) = rec {
            let data = r.private_data();
            ev.data[..data.len()].copy_from_slice(data);
            // As rdma_cm reports them, from this side: the peer's
            // initiator depth is the responder resources this side needs,
            // and the other way round.
            ev.c.param.conn = rdma_conn_param {
                private_data_len: data.len() as u8,
                responder_resources: r.initiator_depth,
                initiator_depth: r.responder_resources,
                ..Default::default()
            };
        }
        // Under the id's lock: rdma_migrate_id changes the channel under it.
        let _g = self.lock();
        self.channel().push(ev);
    }
}

/// A queued or handed-out event: the C struct first, and its private data.
#[repr(C)]
pub(crate) struct Event {
    pub c: rdma_cm_event,
    data: [u8; crate::cmport::MAX_PRIVATE_DATA],
}

impl Event {
    /// Hands an event to the program: its private data pointer set, and
    /// counted against its id until acknowledged.
    pub fn hand_out(ev: Box<Event>) -> *mut rdma_cm_event {
        let p = Box::into_raw(ev);
        // SAFETY: just leaked; its id is alive (events leave the queue
        // with their id).
        unsafe {
            let conn = &mut (*p).c.param.conn;
            conn.private_data = if conn.private_data_len > 0 { (*p).data.as_ptr().cast() } else { null_mut() };
            Id::of((*p).c.id).lock().events_out += 1;
        }
        p.cast()
    }

    /// Takes back an event the program acknowledged.
    ///
    /// # Safety
    /// `ev` must come from `hand_out`, taken back once.
    pub unsafe fn take_back(ev: *mut rdma_cm_event) {
        // SAFETY: the caller's promise.
        let ev = unsafe { Box::from_raw(ev.cast::<Event>()) };
        // SAFETY: an id outlives its events: destroy waits for them.
        let id = unsafe { Id::of(ev.c.id) };
        let mut st = id.lock();
        st.events_out = st.events_out.saturating_sub(1);
        id.acked.notify_all();
    }
}

pub(crate) fn sockaddr_in_of(a: SocketAddrV4) -> sockaddr_in {
    sockaddr_in {
        sin_family: libc::AF_INET as sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: in_addr { s_addr: u32::from(*a.ip()).to_be() },
        sin_zero: [0; 8],
    }
}

/// The IPv4-mapped GID of `ip` (RoCE v2).
pub(crate) fn gid_of(ip: Ipv4Addr) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&ip.octets());
    g
}

/// An IPv4 address and port from a sockaddr (None for another family).
///
/// # Safety
/// `a` is NULL or readable for its family's size.
pub(crate) unsafe fn v4_of(a: *const sockaddr) -> Option<SocketAddrV4> {
    if a.is_null() {
        return None;
    }
    // SAFETY: the caller's promise.
    unsafe {
        if c_int_of((*a).sa_family) != libc::AF_INET {
            return None;
        }
        let sin = &*a.cast::<sockaddr_in>();
        Some(SocketAddrV4::new(u32::from_be(sin.sin_addr.s_addr).into(), u16::from_be(sin.sin_port)))
    }
}

fn c_int_of(f: sa_family_t) -> i32 {
    i32::from(f)
}

/// Where every device's CM events arrive (see `crate::cmport::Sink`): `user`
/// is the device's index, the record's cookie an id of this library.
pub(crate) unsafe extern "C" fn sink(user: *mut std::ffi::c_void, rec: *const Record) -> u64 {
    crate::abi::guard("the CM event sink", 0, || {
        if rec.is_null() {
            return 0;
        }
        // SAFETY: the port passes a record for the call.
        let r = unsafe { &*rec };
        let id = r.cookie as *mut Id;
        if id.is_null() {
            return 0;
        }
        // SAFETY: cookies are live ids: an id's cookie leaves the engine
        // (port destroy, close_listener) before the id is freed, and the
        // sink runs under the same lock.
        let owner = unsafe { &*id };
        if r.kind == kind::CONNECT_REQUEST {
            return request(owner, user as usize, r) as u64;
        }
        let (event, phase) = match r.kind {
            kind::CONNECT_RESPONSE => (RDMA_CM_EVENT_CONNECT_RESPONSE, None),
            kind::ESTABLISHED => (RDMA_CM_EVENT_ESTABLISHED, Some(Phase::Connected)),
            kind::REJECTED => (RDMA_CM_EVENT_REJECTED, Some(Phase::Failed)),
            kind::UNREACHABLE => (RDMA_CM_EVENT_UNREACHABLE, Some(Phase::Failed)),
            kind::DISCONNECTED => (RDMA_CM_EVENT_DISCONNECTED, Some(Phase::Disconnected)),
            _ => return 0,
        };
        if let Some(p) = phase {
            owner.lock().phase = p;
        }
        owner.post(event, r.status, null_mut(), Some(r));
        0
    })
}

/// A connect request at `listener` on device `dev`: a new id on the
/// listener's channel, and the CONNECT_REQUEST event for it.
fn request(listener: &Id, dev: usize, r: &Record) -> *mut Id {
    let Ok(cm) = crate::verbs::loaded() else { return null_mut() };
    // SAFETY: the listener's C struct; its channel is read under its lock.
    let (channel, context, ps) = unsafe {
        let _g = listener.lock();
        let l = listener.c();
        ((*l).channel, (*l).context, (*l).ps)
    };
    let child = Id::create(channel, false, context, ps);
    // SAFETY: just created, not yet shared.
    let c = unsafe { &*child };
    // SAFETY: as above.
    unsafe {
        (*c.c()).verbs = cm.devs[dev].ctx;
        (*c.c()).port_num = 1;
    }
    let port = listener.src().map_or(0, |a| a.port());
    c.set_src(SocketAddrV4::new(cm.devs[dev].ip, port));
    c.set_dst(SocketAddrV4::new(r.remote_ip.into(), r.remote_port));
    c.set_route();
    {
        let mut st = c.lock();
        st.phase = Phase::Requested;
        st.dev = Some(dev);
        st.conn = Some(r.conn);
        st.req_depths = (r.responder_resources, r.initiator_depth);
    }
    c.post(RDMA_CM_EVENT_CONNECT_REQUEST, 0, listener as *const Id as *mut Id, Some(r));
    child
}
