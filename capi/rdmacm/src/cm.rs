//! The connection manager's calls: ids, address and route resolution, QPs
//! and SRQs on an id, connect, listen, accept, reject, disconnect,
//! `rdma_getaddrinfo`, options, multicast and ECE.
//!
//! Not implemented yet, except what needs no connection manager
//! (`rdma_event_str`, and the ports of an id's addresses): each call fails
//! as rdma-core documents a failure, -1 (or NULL) with errno ENOSYS; the
//! calls that return nothing do nothing. Multicast and ECE fail with
//! EOPNOTSUPP instead, for good: rctb's device is RC only, and its
//! libibverbs answers the same for address handles, multicast and ECE.
//! The signatures are declared in full, for the implementation to come.

use std::ffi::{c_char, c_int, c_void};
use std::ptr::null_mut;

use crate::abi::set_errno;
use crate::sys::*;

/// `ibv_context` pointers, as `rdma_get_devices` returns them.
type Devices = *mut *mut ibv_context;

/// Defines entries that fail with -1 and `errno`, with their C signatures.
macro_rules! fails {
    ($ver:literal, $errno:expr => $(fn $name:ident($($arg:ident: $ty:ty),* $(,)?);)*) => {
        $( export!($ver, -1, fn $name($($arg: $ty),*) -> c_int { set_errno($errno); -1 }); )*
    };
}

/// Defines entries that return nothing, and do nothing yet: what they
/// would release was never handed out.
macro_rules! nothing {
    ($ver:literal => $(fn $name:ident($($arg:ident: $ty:ty),* $(,)?);)*) => {
        $( export!($ver, (), fn $name($($arg: $ty),*) {}); )*
    };
}

const NOT_YET: c_int = libc::ENOSYS;
const NEVER: c_int = libc::EOPNOTSUPP;

fails!("RDMACM_1.0", NOT_YET =>
    fn rdma_create_id(channel: *mut rdma_event_channel, id: *mut *mut rdma_cm_id, context: *mut c_void, ps: rdma_port_space);
    fn rdma_create_ep(id: *mut *mut rdma_cm_id, res: *mut rdma_addrinfo, pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr);
    fn rdma_destroy_id(id: *mut rdma_cm_id);
    fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr);
    fn rdma_resolve_addr(id: *mut rdma_cm_id, src_addr: *mut sockaddr, dst_addr: *mut sockaddr, timeout_ms: c_int);
    fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int);
    fn rdma_create_qp(id: *mut rdma_cm_id, pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr);
    fn rdma_create_qp_ex(id: *mut rdma_cm_id, qp_init_attr: *mut ibv_qp_init_attr_ex);
    fn rdma_create_srq(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr);
    fn rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut ibv_srq_init_attr_ex);
    fn rdma_connect(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param);
    fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int);
    fn rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id);
    fn rdma_accept(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param);
    fn rdma_reject(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8);
    fn rdma_notify(id: *mut rdma_cm_id, event: c_int);
    fn rdma_disconnect(id: *mut rdma_cm_id);
    fn rdma_set_option(id: *mut rdma_cm_id, level: c_int, optname: c_int, optval: *mut c_void, optlen: usize);
    fn rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel);
    fn rdma_getaddrinfo(node: *const c_char, service: *const c_char, hints: *const rdma_addrinfo,
        res: *mut *mut rdma_addrinfo);
);
fails!("RDMACM_1.2", NOT_YET =>
    fn rdma_establish(id: *mut rdma_cm_id);
    fn rdma_init_qp_attr(id: *mut rdma_cm_id, qp_attr: *mut ibv_qp_attr, qp_attr_mask: *mut c_int);
);
fails!("RDMACM_1.4", NOT_YET =>
    fn rdma_query_addrinfo(id: *mut rdma_cm_id, info: *mut *mut rdma_addrinfo);
    fn rdma_resolve_addrinfo(id: *mut rdma_cm_id, node: *const c_char, service: *const c_char,
        hints: *const rdma_addrinfo);
    fn rdma_write_cm_event(id: *mut rdma_cm_id, event: rdma_cm_event_type, status: c_int, data: u64);
);
fails!("RDMACM_1.0", NEVER =>
    fn rdma_join_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr, context: *mut c_void);
    fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr);
);
fails!("RDMACM_1.1", NEVER =>
    fn rdma_join_multicast_ex(id: *mut rdma_cm_id, mc_join_attr: *mut rdma_cm_join_mc_attr_ex, context: *mut c_void);
);
// ECE (`struct ibv_ece`, by pointer).
fails!("RDMACM_1.3", NEVER =>
    fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut c_void);
    fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut c_void);
    fn rdma_reject_ece(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8);
);

nothing!("RDMACM_1.0" =>
    fn rdma_destroy_ep(id: *mut rdma_cm_id);
    fn rdma_destroy_qp(id: *mut rdma_cm_id);
    fn rdma_destroy_srq(id: *mut rdma_cm_id);
    fn rdma_free_devices(list: Devices);
    fn rdma_freeaddrinfo(res: *mut rdma_addrinfo);
);

export!(
    "RDMACM_1.0",
    null_mut(),
    fn rdma_get_devices(num_devices: *mut c_int) -> Devices {
        if !num_devices.is_null() {
            // SAFETY: a non-NULL `num_devices` points at the caller's int.
            unsafe { num_devices.write(0) };
        }
        set_errno(NOT_YET);
        null_mut()
    }
);

/// The names `rdma_event_str` gives each `enum rdma_cm_event_type`, in order.
const EVENT_NAMES: [&std::ffi::CStr; 16] = [
    c"RDMA_CM_EVENT_ADDR_RESOLVED",
    c"RDMA_CM_EVENT_ADDR_ERROR",
    c"RDMA_CM_EVENT_ROUTE_RESOLVED",
    c"RDMA_CM_EVENT_ROUTE_ERROR",
    c"RDMA_CM_EVENT_CONNECT_REQUEST",
    c"RDMA_CM_EVENT_CONNECT_RESPONSE",
    c"RDMA_CM_EVENT_CONNECT_ERROR",
    c"RDMA_CM_EVENT_UNREACHABLE",
    c"RDMA_CM_EVENT_REJECTED",
    c"RDMA_CM_EVENT_ESTABLISHED",
    c"RDMA_CM_EVENT_DISCONNECTED",
    c"RDMA_CM_EVENT_DEVICE_REMOVAL",
    c"RDMA_CM_EVENT_MULTICAST_JOIN",
    c"RDMA_CM_EVENT_MULTICAST_ERROR",
    c"RDMA_CM_EVENT_ADDR_CHANGE",
    c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
];

export!(
    "RDMACM_1.0",
    c"UNKNOWN EVENT".as_ptr(),
    fn rdma_event_str(event: rdma_cm_event_type) -> *const c_char {
        EVENT_NAMES.get(event as usize).copied().unwrap_or(c"UNKNOWN EVENT").as_ptr()
    }
);

/// The port (network order) of an IPv4 or IPv6 address; 0 for another
/// family, or none.
///
/// # Safety
/// `addr` points at a sockaddr large enough for its family, as the address
/// unions of `struct rdma_addr` are.
unsafe fn port_of(addr: *const sockaddr) -> u16 {
    // SAFETY: the caller's promise: `addr` is readable for its family's size.
    unsafe {
        match c_int::from((*addr).sa_family) {
            libc::AF_INET => (*addr.cast::<sockaddr_in>()).sin_port,
            libc::AF_INET6 => (*addr.cast::<sockaddr_in6>()).sin6_port,
            _ => 0,
        }
    }
}

export!(
    "RDMACM_1.0",
    0,
    fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
        if id.is_null() {
            return 0;
        }
        // SAFETY: a non-NULL id is an rdma_cm_id the program holds; its
        // source address union is as large as a sockaddr_storage.
        unsafe { port_of(&raw const (*id).route.addr.__bindgen_anon_1.src_addr) }
    }
);

export!(
    "RDMACM_1.0",
    0,
    fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
        if id.is_null() {
            return 0;
        }
        // SAFETY: as in rdma_get_src_port, for the destination address.
        unsafe { port_of(&raw const (*id).route.addr.__bindgen_anon_2.dst_addr) }
    }
);
