//! The calls not (yet) offered: the 1.4 address-info calls (ENOSYS),
//! multicast and ECE (EOPNOTSUPP).

use std::ffi::{c_char, c_int, c_void};

use crate::abi::set_errno;
use crate::sys::*;

/// Defines entries that fail with -1 and `errno`, with their C signatures.
macro_rules! fails {
    ($ver:literal, $errno:expr => $(fn $name:ident($($arg:ident: $ty:ty),* $(,)?);)*) => {
        $( export!($ver, -1, fn $name($($arg: $ty),*) -> c_int { set_errno($errno); -1 }); )*
    };
}

const NOT_YET: c_int = libc::ENOSYS;
const NEVER: c_int = libc::EOPNOTSUPP;

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
