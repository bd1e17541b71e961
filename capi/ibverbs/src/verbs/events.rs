//! Asynchronous events, and the strings the library names its enums with.

use super::*;

// ---- asynchronous events ----

export!(
    "IBVERBS_1.1",
    -1,
    fn ibv_get_async_event(context: *mut sys::ibv_context, event: *mut sys::ibv_async_event) -> c_int {
        if context.is_null() || event.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: a live context.
        let ctx = unsafe { Context::from_ibv(context) };
        let mut rec = [0u8; ASYNC_RECORD];
        match rustix::io::read(&ctx.async_rx, &mut rec) {
            Ok(n) if n == ASYNC_RECORD => {}
            Ok(_) => {
                set_errno(libc::EIO);
                return -1;
            }
            Err(e) => {
                set_errno(e.raw_os_error());
                return -1;
            }
        }
        let element = u64::from_ne_bytes(rec[..8].try_into().unwrap_or_default()) as usize;
        let kind = u32::from_ne_bytes(rec[8..12].try_into().unwrap_or_default());
        // SAFETY: the caller's out struct; the element is the object the
        // event names (a CQ, QP or SRQ pointer, alive until it is acked).
        unsafe {
            (*event).event_type = kind;
            match kind {
                sys::IBV_EVENT_CQ_ERR => (*event).element.cq = element as *mut sys::ibv_cq,
                sys::IBV_EVENT_SRQ_LIMIT_REACHED | sys::IBV_EVENT_SRQ_ERR => {
                    (*event).element.srq = element as *mut sys::ibv_srq
                }
                _ => (*event).element.qp = element as *mut sys::ibv_qp,
            }
        }
        0
    }
);

export!(
    "IBVERBS_1.1",
    (),
    fn ibv_ack_async_event(event: *mut sys::ibv_async_event) {
        // Events carry no resources here: nothing to release.
    }
);

// ---- strings ----

export!(
    "IBVERBS_1.1",
    null_mut::<c_char>(),
    fn ibv_wc_status_str(status: c_uint) -> *const c_char {
        c_str(match status {
            0 => "success\0",
            1 => "local length error\0",
            2 => "local QP operation error\0",
            3 => "local EE context operation error\0",
            4 => "local protection error\0",
            5 => "Work Request Flushed Error\0",
            6 => "memory management operation error\0",
            7 => "bad response error\0",
            8 => "local access error\0",
            9 => "remote invalid request error\0",
            10 => "remote access error\0",
            11 => "remote operation error\0",
            12 => "transport retry counter exceeded\0",
            13 => "RNR retry counter exceeded\0",
            14 => "local RDD violation error\0",
            15 => "remote invalid RD request\0",
            16 => "aborted error\0",
            17 => "invalid EE context number\0",
            18 => "invalid EE context state\0",
            19 => "fatal error\0",
            20 => "response timeout error\0",
            21 => "general error\0",
            _ => "unknown\0",
        })
    }
);

export!(
    "IBVERBS_1.1",
    null_mut::<c_char>(),
    fn ibv_node_type_str(node_type: c_int) -> *const c_char {
        c_str(match node_type {
            1 => "InfiniBand channel adapter\0",
            2 => "InfiniBand switch\0",
            3 => "InfiniBand router\0",
            4 => "iWARP NIC\0",
            5 => "usNIC\0",
            6 => "usNIC UDP\0",
            7 => "unspecified\0",
            _ => "unknown\0",
        })
    }
);

export!(
    "IBVERBS_1.1",
    null_mut::<c_char>(),
    fn ibv_port_state_str(port_state: c_int) -> *const c_char {
        c_str(match port_state {
            0 => "PORT_NOP\0",
            1 => "PORT_DOWN\0",
            2 => "PORT_INIT\0",
            3 => "PORT_ARMED\0",
            4 => "PORT_ACTIVE\0",
            5 => "PORT_ACTIVE_DEFER\0",
            _ => "invalid state\0",
        })
    }
);

export!(
    "IBVERBS_1.1",
    null_mut::<c_char>(),
    fn ibv_event_type_str(event: c_int) -> *const c_char {
        c_str(match event {
            0 => "CQ error\0",
            1 => "local work queue catastrophic error\0",
            2 => "invalid request local work queue error\0",
            3 => "local access violation work queue error\0",
            4 => "communication established\0",
            5 => "send queue drained\0",
            6 => "path migrated\0",
            7 => "path migration request error\0",
            8 => "local catastrophic error\0",
            9 => "port active\0",
            10 => "port error\0",
            11 => "LID change\0",
            12 => "P_Key change\0",
            13 => "SM change\0",
            14 => "SRQ catastrophic error\0",
            15 => "SRQ limit reached\0",
            16 => "last WQE reached\0",
            17 => "client reregistration\0",
            18 => "GID table change\0",
            19 => "WQ fatal error\0",
            _ => "unknown\0",
        })
    }
);
