//! What the library tells about itself: the device list, the names of
//! events, and the ports of an id's addresses.

use std::ffi::{c_char, c_int};
use std::ptr::null_mut;

use crate::sys::*;
use crate::verbs;

/// `ibv_context` pointers, as `rdma_get_devices` returns them.
type Devices = *mut *mut ibv_context;

// ---- devices ----

export!(
    "RDMACM_1.0",
    null_mut(),
    fn rdma_get_devices(num_devices: *mut c_int) -> Devices {
        let list: Vec<*mut ibv_context> = match verbs::get() {
            Ok(cm) => cm.devs.iter().map(|d| d.ctx).collect(),
            Err(_) => Vec::new(),
        };
        if !num_devices.is_null() {
            // SAFETY: a non-NULL `num_devices` points at the caller's int.
            unsafe { num_devices.write(list.len() as c_int) };
        }
        let list: Box<[*mut ibv_context]> = list.into_iter().chain(std::iter::once(null_mut())).collect();
        Box::into_raw(list).cast()
    }
);

export!(
    "RDMACM_1.0",
    (),
    fn rdma_free_devices(list: Devices) {
        if list.is_null() {
            return;
        }
        let mut n = 0;
        // SAFETY: a list from rdma_get_devices: contexts, then NULL.
        while !unsafe { *list.add(n) }.is_null() {
            n += 1;
        }
        // SAFETY: the boxed slice of n + 1 pointers rdma_get_devices leaked.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(list, n + 1)) });
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
