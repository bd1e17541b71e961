//! Devices, contexts, and the queries on them (device, port, GID, P_Key).

use super::*;

// ---- devices ----

export!(
    "IBVERBS_1.1",
    null_mut(),
    fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut sys::ibv_device {
        if crate::config::get().is_err() {
            return fail(libc::EINVAL);
        }
        let devs = device::devices();
        let list: Box<[*mut sys::ibv_device]> = devs
            .iter()
            .map(|d| &d.dev as *const _ as *mut sys::ibv_device)
            .chain(std::iter::once(null_mut()))
            .collect();
        if !num_devices.is_null() {
            // SAFETY: the caller passes NULL or a pointer to an int.
            unsafe { *num_devices = devs.len() as c_int };
        }
        Box::into_raw(list) as *mut *mut sys::ibv_device
    }
);

export!(
    "IBVERBS_1.1",
    (),
    fn ibv_free_device_list(list: *mut *mut sys::ibv_device) {
        if list.is_null() {
            return;
        }
        let n = device::devices().len() + 1;
        // SAFETY: `list` came from ibv_get_device_list, a boxed slice of n
        // pointers (the devices, then NULL); the devices themselves live on.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(list, n)) });
    }
);

export!(
    "IBVERBS_1.1",
    null_mut(),
    fn ibv_get_device_name(dev: *mut sys::ibv_device) -> *const c_char {
        match device::find(dev) {
            Some(d) => d.dev.name.as_ptr(),
            None => fail(libc::EINVAL),
        }
    }
);

export!(
    "IBVERBS_1.1",
    0,
    fn ibv_get_device_guid(dev: *mut sys::ibv_device) -> u64 {
        device::find(dev).map_or(0, |d| d.guid_be())
    }
);

export!(
    "IBVERBS_1.9",
    -1,
    fn ibv_get_device_index(dev: *mut sys::ibv_device) -> c_int {
        device::find(dev).map_or(-1, |d| d.index as c_int)
    }
);

export!(
    "IBVERBS_1.1",
    null_mut(),
    fn ibv_open_device(dev: *mut sys::ibv_device) -> *mut sys::ibv_context {
        let Some(d) = device::find(dev) else { return fail(libc::ENODEV) };
        let rt = match d.open() {
            Ok(rt) => rt,
            Err(msg) => {
                eprintln!("{msg}");
                return fail(libc::EADDRINUSE);
            }
        };
        let Ok((async_rx, async_tx)) = pipe_with(PipeFlags::CLOEXEC) else { return fail(libc::EMFILE) };
        // Writes never block the engine: a program that stops reading loses
        // the newest events, not the device.
        let _ = rustix::fs::fcntl_setfl(&async_tx, rustix::fs::OFlags::NONBLOCK);
        let Ok(cmd) = rustix::fs::open("/dev/null", rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC, 0.into())
        else {
            return fail(libc::EMFILE);
        };
        let mut vctx = sys::verbs_context {
            sz: std::mem::size_of::<sys::verbs_context>(),
            query_port: Some(data::vctx_query_port),
            query_device_ex: Some(data::vctx_query_device_ex),
            ..Default::default()
        };
        let c = &mut vctx.context;
        c.device = dev;
        c.ops.poll_cq = Some(data::poll_cq);
        c.ops.req_notify_cq = Some(data::req_notify_cq);
        c.ops.post_send = Some(data::post_send);
        c.ops.post_recv = Some(data::post_recv);
        c.ops.post_srq_recv = Some(data::post_srq_recv);
        c.cmd_fd = cmd.as_raw_fd();
        c.async_fd = async_rx.as_raw_fd();
        c.num_comp_vectors = 1;
        // `verbs_get_ctx` trusts the extended layout only when this is set.
        c.abi_compat = usize::MAX as *mut c_void;
        // SAFETY: an all-zero pthread mutex is PTHREAD_MUTEX_INITIALIZER on
        // glibc; programs never lock it, but it is valid if they do.
        let ctx = Box::new(Context { vctx, rt, async_rx, async_tx: Arc::new(async_tx), cmd });
        let ctx = Box::leak(ctx);
        ctx.ibv()
    }
);

export!(
    "IBVERBS_1.1",
    -1,
    fn ibv_close_device(context: *mut sys::ibv_context) -> c_int {
        if context.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: a context from ibv_open_device, closed once: the Box leaked
        // there is taken back. The engine stops with its last context.
        let ctx = unsafe { Context::from_ibv(context) } as *const Context as *mut Context;
        // SAFETY: as above.
        drop(unsafe { Box::from_raw(ctx) });
        0
    }
);

// ---- queries ----

pub(crate) fn device_attr(ctx: &Context) -> sys::ibv_device_attr {
    let d = ctx.rt.device;
    let mut a = sys::ibv_device_attr::default();
    for (dst, b) in a.fw_ver.iter_mut().zip(concat!("rctb ", env!("CARGO_PKG_VERSION"), "\0").bytes()) {
        *dst = b as c_char;
    }
    a.node_guid = d.guid_be();
    a.sys_image_guid = d.guid_be();
    a.max_mr_size = u64::MAX;
    a.page_size_cap = 0xffff_f000;
    // The vendor id rxe reports: perftest treats the device as a generic
    // one (no vendor fast paths, no inline).
    a.vendor_id = 0xffffff;
    a.vendor_part_id = 0;
    a.hw_ver = 0;
    a.max_qp = 1 << 16;
    a.max_qp_wr = rctb_engine::MAX_QP_WR as c_int;
    a.device_cap_flags = sys::IBV_DEVICE_RC_RNR_NAK_GEN
        | sys::IBV_DEVICE_SHUTDOWN_PORT
        | sys::IBV_DEVICE_PORT_ACTIVE_EVENT
        | sys::IBV_DEVICE_SRQ_RESIZE
        | sys::IBV_DEVICE_SYS_IMAGE_GUID;
    a.max_sge = rctb_engine::MAX_SGE as c_int;
    a.max_sge_rd = rctb_engine::MAX_SGE as c_int;
    a.max_cq = 1 << 16;
    a.max_cqe = rctb_engine::MAX_CQE as c_int;
    a.max_mr = 1 << 20;
    a.max_pd = 1 << 16;
    a.max_qp_rd_atom = 16;
    a.max_res_rd_atom = 16 << 16;
    a.max_qp_init_rd_atom = 16;
    a.atomic_cap = sys::IBV_ATOMIC_HCA;
    a.max_srq = 1 << 16;
    a.max_srq_wr = 1 << 15;
    a.max_srq_sge = rctb_engine::MAX_SGE as c_int;
    a.max_pkeys = 1;
    a.local_ca_ack_delay = 15;
    a.phys_port_cnt = 1;
    a
}

export!(
    "IBVERBS_1.1",
    libc::EIO,
    fn ibv_query_device(context: *mut sys::ibv_context, attr: *mut sys::ibv_device_attr) -> c_int {
        if context.is_null() || attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live context from ibv_open_device; `attr` points to a struct.
        unsafe { *attr = device_attr(Context::from_ibv(context)) };
        0
    }
);

/// Port 1's attributes (`ibv_port_attr`), the one port.
pub(crate) fn port_attr(ctx: &Context) -> sys::ibv_port_attr {
    let d = ctx.rt.device;
    let up = ctx.rt.progress.lock().driver.engine(0).link_up();
    sys::ibv_port_attr {
        state: if up { sys::IBV_PORT_ACTIVE } else { sys::IBV_PORT_DOWN },
        max_mtu: sys::IBV_MTU_4096,
        active_mtu: d.mtu.code() as sys::ibv_mtu,
        gid_tbl_len: 1,
        port_cap_flags: sys::IBV_PORT_CM_SUP,
        max_msg_sz: 1 << 31,
        pkey_tbl_len: 1,
        max_vl_num: 1,
        active_width: 1,
        active_speed: 32,
        phys_state: if up { 5 } else { 3 },
        link_layer: sys::IBV_LINK_LAYER_ETHERNET as u8,
        ..Default::default()
    }
}

/// The size of the port attributes the exported `ibv_query_port` writes:
/// the struct as it was before `port_cap_flags2` (what programs that call
/// it directly, not through the inline, were built with).
const COMPAT_PORT_ATTR: usize = std::mem::offset_of!(sys::ibv_port_attr, port_cap_flags2);

/// Writes `len` bytes (at most the struct) of port `port`'s attributes.
pub(crate) fn write_port_attr(ctx: &Context, port: u8, out: *mut sys::ibv_port_attr, len: usize) -> c_int {
    if port != 1 {
        return libc::EINVAL;
    }
    let a = port_attr(ctx);
    let len = len.min(std::mem::size_of::<sys::ibv_port_attr>());
    // SAFETY: `out` points to at least `len` bytes (the caller's struct
    // size), and `a` is a whole struct.
    unsafe { std::ptr::copy_nonoverlapping(&a as *const _ as *const u8, out as *mut u8, len) };
    0
}

export!(
    "IBVERBS_1.1",
    libc::EIO,
    fn ibv_query_port(context: *mut sys::ibv_context, port_num: u8, port_attr: *mut sys::ibv_port_attr) -> c_int {
        if context.is_null() || port_attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live context.
        write_port_attr(unsafe { Context::from_ibv(context) }, port_num, port_attr, COMPAT_PORT_ATTR)
    }
);

fn our_gid(ctx: &Context) -> Gid {
    Gid::from_ipv4(ctx.rt.device.ip)
}

export!(
    "IBVERBS_1.1",
    -1,
    fn ibv_query_gid(context: *mut sys::ibv_context, port_num: u8, index: c_int, gid: *mut sys::ibv_gid) -> c_int {
        if context.is_null() || gid.is_null() || port_num != 1 || index != 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: a live context; `gid` points to 16 bytes.
        unsafe { (*gid).raw = our_gid(Context::from_ibv(context)).0 };
        0
    }
);

fn gid_entry(ctx: &Context) -> sys::ibv_gid_entry {
    sys::ibv_gid_entry {
        gid: sys::ibv_gid { raw: our_gid(ctx).0 },
        gid_index: 0,
        port_num: 1,
        gid_type: sys::IBV_GID_TYPE_ROCE_V2,
        ndev_ifindex: 0,
    }
}

export!(
    "IBVERBS_1.11",
    libc::EIO,
    fn _ibv_query_gid_ex(
        context: *mut sys::ibv_context,
        port_num: u32,
        gid_index: u32,
        entry: *mut sys::ibv_gid_entry,
        flags: u32,
        entry_size: usize,
    ) -> c_int {
        if context.is_null() || entry.is_null() || flags != 0 || port_num != 1 {
            return libc::EINVAL;
        }
        if gid_index != 0 {
            return libc::ENODATA;
        }
        // SAFETY: a live context; `entry` holds `entry_size` bytes.
        let e = gid_entry(unsafe { Context::from_ibv(context) });
        let n = entry_size.min(std::mem::size_of::<sys::ibv_gid_entry>());
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(&e as *const _ as *const u8, entry as *mut u8, n) };
        0
    }
);

export!(
    "IBVERBS_1.11",
    -(libc::EIO as isize),
    fn _ibv_query_gid_table(
        context: *mut sys::ibv_context,
        entries: *mut sys::ibv_gid_entry,
        max_entries: usize,
        flags: u32,
        entry_size: usize,
    ) -> isize {
        if context.is_null() || entries.is_null() || flags != 0 {
            return -(libc::EINVAL as isize);
        }
        if max_entries < 1 {
            return -(libc::EINVAL as isize);
        }
        // SAFETY: a live context; `entries` holds max_entries * entry_size bytes.
        let e = gid_entry(unsafe { Context::from_ibv(context) });
        let n = entry_size.min(std::mem::size_of::<sys::ibv_gid_entry>());
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(&e as *const _ as *const u8, entries as *mut u8, n) };
        1
    }
);

export!(
    "IBVERBS_PRIVATE_34",
    libc::EIO,
    fn ibv_query_gid_type(context: *mut sys::ibv_context, port_num: u8, index: c_uint, gid_type: *mut c_uint) -> c_int {
        if context.is_null() || gid_type.is_null() || port_num != 1 || index != 0 {
            return libc::EINVAL;
        }
        // SAFETY: `gid_type` points to the caller's enum (an int). 1 is
        // IBV_GID_TYPE_SYSFS_ROCE_V2.
        unsafe { *gid_type = 1 };
        0
    }
);

export!(
    "IBVERBS_1.1",
    -1,
    fn ibv_query_pkey(context: *mut sys::ibv_context, port_num: u8, index: c_int, pkey: *mut u16) -> c_int {
        if context.is_null() || pkey.is_null() || port_num != 1 || index != 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: `pkey` points to a u16; the default P_Key, network order.
        unsafe { *pkey = 0xffffu16.to_be() };
        0
    }
);

export!(
    "IBVERBS_1.5",
    -1,
    fn ibv_get_pkey_index(context: *mut sys::ibv_context, port_num: u8, pkey: u16) -> c_int {
        if port_num == 1 && u16::from_be(pkey) | 0x8000 == 0xffff {
            0
        } else {
            set_errno(libc::ENOENT);
            -1
        }
    }
);
