//! `rdma_getaddrinfo` and `rdma_freeaddrinfo`: a node and service become
//! one `struct rdma_addrinfo` for an RC connection over IPv4 (the port
//! space TCP), a destination for an active side, a source for a passive
//! one (`RAI_PASSIVE`). Names are resolved with the C library's
//! `getaddrinfo`; its error code (`EAI_*`) is the call's return value, as
//! rdma-core returns it, and errno is set as well.

use std::ffi::{c_char, c_int};
use std::net::SocketAddrV4;
use std::ptr::null_mut;

use crate::abi::set_errno;
use crate::id::{sockaddr_in_of, v4_of};
use crate::sys::*;

/// What `rdma_getaddrinfo` hands out: the C struct first, and the
/// addresses it points at.
#[repr(C)]
struct AddrInfo {
    c: rdma_addrinfo,
    src: sockaddr_in,
    dst: sockaddr_in,
}

/// The IPv4 address and port `getaddrinfo` gives for `node` and `service`.
///
/// # Safety
/// `node` and `service` are NULL or NUL-terminated strings.
unsafe fn lookup(node: *const c_char, service: *const c_char, flags: c_int) -> Result<SocketAddrV4, c_int> {
    // SAFETY: an all-zero addrinfo is a valid set of hints.
    let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    hints.ai_family = libc::AF_INET;
    hints.ai_socktype = libc::SOCK_STREAM;
    hints.ai_flags = flags;
    let mut res = null_mut();
    // SAFETY: the caller's strings; `res` is freed below.
    let e = unsafe { libc::getaddrinfo(node, service, &hints, &mut res) };
    if e != 0 {
        return Err(e);
    }
    // SAFETY: a successful getaddrinfo gives at least one AF_INET entry.
    let a = unsafe { v4_of((*res).ai_addr.cast()) };
    // SAFETY: the list getaddrinfo made, freed once.
    unsafe { libc::freeaddrinfo(res) };
    a.ok_or(libc::EAI_FAMILY)
}

export!(
    "RDMACM_1.0",
    libc::EAI_SYSTEM,
    fn rdma_getaddrinfo(
        node: *const c_char,
        service: *const c_char,
        hints: *const rdma_addrinfo,
        res: *mut *mut rdma_addrinfo,
    ) -> c_int {
        let fail = |e: c_int, errno: c_int| {
            set_errno(errno);
            e
        };
        if res.is_null() || (node.is_null() && service.is_null()) {
            return fail(libc::EAI_NONAME, libc::EINVAL);
        }
        // SAFETY: NULL or the caller's hints.
        let h = unsafe { hints.as_ref() };
        let flags = h.map_or(0, |h| h.ai_flags);
        if h.is_some_and(|h| h.ai_family != 0 && h.ai_family != libc::AF_INET) {
            return fail(libc::EAI_FAMILY, libc::EAFNOSUPPORT);
        }
        if h.is_some_and(|h| h.ai_qp_type != 0 && h.ai_qp_type != IBV_QPT_RC as c_int) {
            // UD and the rest: this device is RC only.
            return fail(libc::EAI_SERVICE, libc::EOPNOTSUPP);
        }
        let ps = h.map_or(0, |h| h.ai_port_space);
        if ps != 0 && ps != RDMA_PS_TCP as c_int && ps != RDMA_PS_IB as c_int {
            return fail(libc::EAI_SERVICE, libc::EOPNOTSUPP);
        }
        let passive = flags as u32 & RAI_PASSIVE != 0;
        let mut gai = 0;
        if passive {
            gai |= libc::AI_PASSIVE;
        }
        if flags as u32 & RAI_NUMERICHOST != 0 {
            gai |= libc::AI_NUMERICHOST;
        }
        // SAFETY: the caller's strings.
        let addr = match unsafe { lookup(node, service, gai) } {
            Ok(a) => a,
            Err(e) => return fail(e, libc::EADDRNOTAVAIL),
        };
        let mut info = Box::new(AddrInfo {
            c: rdma_addrinfo {
                ai_flags: flags,
                ai_family: libc::AF_INET,
                ai_qp_type: IBV_QPT_RC as c_int,
                ai_port_space: if ps == 0 { RDMA_PS_TCP as c_int } else { ps },
                ..Default::default()
            },
            src: sockaddr_in_of(SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0)),
            dst: sockaddr_in_of(addr),
        });
        let len = std::mem::size_of::<sockaddr_in>() as socklen_t;
        if passive {
            info.src = sockaddr_in_of(addr);
            info.c.ai_src_addr = (&raw mut info.src).cast();
            info.c.ai_src_len = len;
        } else {
            info.c.ai_dst_addr = (&raw mut info.dst).cast();
            info.c.ai_dst_len = len;
            // SAFETY: the hints' source address, NULL or an address.
            if let Some(src) = h.and_then(|h| unsafe { v4_of(h.ai_src_addr) }) {
                info.src = sockaddr_in_of(src);
                info.c.ai_src_addr = (&raw mut info.src).cast();
                info.c.ai_src_len = len;
            }
        }
        // SAFETY: the caller's out pointer.
        unsafe { *res = Box::into_raw(info).cast() };
        0
    }
);

export!(
    "RDMACM_1.0",
    (),
    fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
        let mut cur = res;
        while !cur.is_null() {
            // SAFETY: an entry rdma_getaddrinfo made (it makes one, whose
            // next is NULL), freed once.
            let info = unsafe { Box::from_raw(cur.cast::<AddrInfo>()) };
            cur = info.c.ai_next;
        }
    }
);
