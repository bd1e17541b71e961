//! The verbs outside the data path: devices, contexts, queries, protection
//! domains, memory regions, CQs and completion channels, QPs and SRQs,
//! asynchronous events, and the string helpers. Each fails as rdma-core
//! documents: NULL with errno, or an errno returned.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::os::fd::AsRawFd;
use std::ptr::null_mut;
use std::sync::{Arc, Mutex};

use rctb_core::transport::*;
use rctb_engine::ExternalMemory;
use rustix::pipe::{PipeFlags, pipe_with};

use crate::abi::set_errno;
use crate::data;
use crate::device::{self, ASYNC_RECORD, CqLink, MrLink};
use crate::objects::*;
use crate::sys;

/// The errno a failed engine verb maps to (what rdma-core returns for the
/// same misuse).
pub(crate) fn errno_of(e: &TransportError) -> c_int {
    match e {
        TransportError::Busy { .. } => libc::EBUSY,
        TransportError::QueueFull { .. } | TransportError::Exhausted { .. } => libc::ENOMEM,
        TransportError::NoDevice { .. } => libc::ENODEV,
        TransportError::Os { errno, .. } if *errno != 0 => *errno,
        TransportError::Os { .. } => libc::EIO,
        _ => libc::EINVAL,
    }
}

/// NULL with errno `e`.
fn fail<T>(e: c_int) -> *mut T {
    set_errno(e);
    null_mut()
}

/// Largest inline payload a QP takes (`max_inline_data`).
pub(crate) const MAX_INLINE: u32 = 512;
/// The IPv4-mapped GID is the port's one GID table entry, index 0; the
/// engine's table has it at index 1 (after the link-local one).
const ENGINE_SGID_INDEX: u32 = 1;

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

// ---- protection domains and memory regions ----

export!(
    "IBVERBS_1.1",
    null_mut(),
    fn ibv_alloc_pd(context: *mut sys::ibv_context) -> *mut sys::ibv_pd {
        if context.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: a live context.
        let ctx = unsafe { Context::from_ibv(context) };
        let r = ctx.rt.progress.lock().driver.engine_mut(0).0.alloc_pd();
        match r {
            Ok(id) => {
                let pd = Box::new(Pd { pd: sys::ibv_pd { context, handle: id.0 }, id });
                Box::into_raw(pd) as *mut sys::ibv_pd
            }
            Err(e) => fail(errno_of(&e)),
        }
    }
);

/// The library's object behind a program's pointer.
///
/// # Safety
/// `p` must be a live object of type `T` this library returned.
pub(crate) unsafe fn obj<'a, T, C>(p: *mut C) -> &'a T {
    // SAFETY: every object's first field is the C struct (repr(C)).
    unsafe { &*(p as *const T) }
}

export!(
    "IBVERBS_1.1",
    libc::EIO,
    fn ibv_dealloc_pd(pd: *mut sys::ibv_pd) -> c_int {
        if pd.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live PD from ibv_alloc_pd.
        let (p, ctx) = unsafe { (obj::<Pd, _>(pd), Context::from_ibv((*pd).context)) };
        let r = ctx.rt.progress.lock().driver.engine_mut(0).0.dealloc_pd(p.id);
        match r {
            Ok(()) => {
                // SAFETY: freed once, after the engine let it go.
                drop(unsafe { Box::from_raw(pd as *mut Pd) });
                0
            }
            Err(e) => errno_of(&e),
        }
    }
);

/// A program's buffer as the engine's region bytes: copies to and from
/// its address, as a NIC's DMA would (see the crate docs on Safety).
#[derive(Debug)]
struct UserMemory {
    base: *mut u8,
    len: u64,
}

// SAFETY: the memory is the program's, registered for the device to read
// and write from any thread until it is deregistered (verbs' rule); the
// engine touches it only under its lock.
unsafe impl Send for UserMemory {}

impl ExternalMemory for UserMemory {
    fn read_into(&self, offset: u64, len: usize, out: &mut Vec<u8>) {
        debug_assert!(offset + len as u64 <= self.len);
        out.reserve(len);
        let at = out.len();
        // SAFETY: the engine checked offset + len against the registered
        // length; the source is the program's registered buffer and the
        // destination the spare capacity just reserved. Raw copies, not
        // slices: the program may write the buffer meanwhile, as it may
        // under a NIC's DMA.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.add(offset as usize), out.as_mut_ptr().add(at), len);
            out.set_len(at + len);
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        debug_assert!(offset + data.len() as u64 <= self.len);
        // SAFETY: as in read_into: a checked range of the registered buffer.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.add(offset as usize), data.len()) };
    }
}

pub(crate) fn access_of(flags: c_uint) -> Option<Access> {
    let known = sys::IBV_ACCESS_LOCAL_WRITE
        | sys::IBV_ACCESS_REMOTE_WRITE
        | sys::IBV_ACCESS_REMOTE_READ
        | sys::IBV_ACCESS_REMOTE_ATOMIC
        | sys::IBV_ACCESS_RELAXED_ORDERING;
    if flags & !known != 0 {
        return None;
    }
    let mut a = Access::NONE;
    for (bit, acc) in [
        (sys::IBV_ACCESS_LOCAL_WRITE, Access::LOCAL_WRITE),
        (sys::IBV_ACCESS_REMOTE_WRITE, Access::REMOTE_WRITE),
        (sys::IBV_ACCESS_REMOTE_READ, Access::REMOTE_READ),
        (sys::IBV_ACCESS_REMOTE_ATOMIC, Access::REMOTE_ATOMIC),
    ] {
        if flags & bit != 0 {
            a = a | acc;
        }
    }
    Some(a)
}

fn reg_mr(pd: *mut sys::ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: c_uint) -> *mut sys::ibv_mr {
    if pd.is_null() || (addr.is_null() && length > 0) {
        return fail(libc::EINVAL);
    }
    // Optional flags a device may ignore (relaxed ordering and friends)
    // are ignored; unknown mandatory ones are refused, as rdma-core does.
    let Some(acc) = access_of(access & !sys::IB_UVERBS_ACCESS_OPTIONAL_RANGE) else { return fail(libc::EINVAL) };
    // SAFETY: a live PD.
    let (p, ctx) = unsafe { (obj::<Pd, _>(pd), Context::from_ibv((*pd).context)) };
    let mem = Box::new(UserMemory { base: addr as *mut u8, len: length as u64 });
    let mut st = ctx.rt.progress.lock();
    let r = st.driver.engine_mut(0).0.reg_mr_external(p.id, iova, length as u64, acc, mem);
    match r {
        Ok(info) => {
            let local_write = access & sys::IBV_ACCESS_LOCAL_WRITE != 0;
            st.owner.mrs.insert(info.lkey, MrLink { id: info.id, iova, local_write });
            let mr = sys::ibv_mr {
                context: ctx.ibv(),
                pd,
                addr,
                length,
                handle: info.id.0,
                lkey: info.lkey,
                rkey: info.rkey,
            };
            Box::into_raw(Box::new(Mr { mr, id: info.id })) as *mut sys::ibv_mr
        }
        Err(e) => fail(errno_of(&e)),
    }
}

export!(
    "IBVERBS_1.1",
    null_mut(),
    fn ibv_reg_mr(pd: *mut sys::ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut sys::ibv_mr {
        reg_mr(pd, addr, length, addr as u64, access as c_uint)
    }
);

export!(
    "IBVERBS_1.7",
    null_mut(),
    fn ibv_reg_mr_iova(
        pd: *mut sys::ibv_pd,
        addr: *mut c_void,
        length: usize,
        iova: u64,
        access: c_int,
    ) -> *mut sys::ibv_mr {
        reg_mr(pd, addr, length, iova, access as c_uint)
    }
);

export!(
    "IBVERBS_1.8",
    null_mut(),
    fn ibv_reg_mr_iova2(
        pd: *mut sys::ibv_pd,
        addr: *mut c_void,
        length: usize,
        iova: u64,
        access: c_uint,
    ) -> *mut sys::ibv_mr {
        reg_mr(pd, addr, length, iova, access)
    }
);

export!(
    "IBVERBS_1.1",
    libc::EIO,
    fn ibv_dereg_mr(mr: *mut sys::ibv_mr) -> c_int {
        if mr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live MR from a registration.
        let (m, ctx) = unsafe { (obj::<Mr, _>(mr), Context::from_ibv((*mr).context)) };
        let mut st = ctx.rt.progress.lock();
        match st.driver.engine_mut(0).0.dereg_mr(m.id) {
            Ok(()) => {
                // SAFETY: the MR is live (above).
                let lkey = unsafe { (*mr).lkey };
                st.owner.mrs.remove(&lkey);
                drop(st);
                // SAFETY: freed once, after the engine let it go.
                drop(unsafe { Box::from_raw(mr as *mut Mr) });
                0
            }
            Err(e) => errno_of(&e),
        }
    }
);

// ---- completion channels and CQs ----

export!(
    "IBVERBS_1.0",
    null_mut(),
    fn ibv_create_comp_channel(context: *mut sys::ibv_context) -> *mut sys::ibv_comp_channel {
        if context.is_null() {
            return fail(libc::EINVAL);
        }
        let Ok((rx, tx)) = pipe_with(PipeFlags::CLOEXEC) else { return fail(libc::EMFILE) };
        // The engine's side never blocks; the program's side blocks unless it
        // sets O_NONBLOCK itself.
        let _ = rustix::fs::fcntl_setfl(&tx, rustix::fs::OFlags::NONBLOCK);
        let fd = rx.as_raw_fd();
        let inner = Arc::new(Channel { queue: Mutex::new(Default::default()), rx, tx });
        let ch = sys::ibv_comp_channel { context, fd, refcnt: 0 };
        Box::into_raw(Box::new(CompChannel { ch, inner })) as *mut sys::ibv_comp_channel
    }
);

export!(
    "IBVERBS_1.0",
    -1,
    fn ibv_destroy_comp_channel(channel: *mut sys::ibv_comp_channel) -> c_int {
        if channel.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: a live channel.
        if unsafe { (*channel).refcnt } > 0 {
            set_errno(libc::EBUSY);
            return -1;
        }
        // SAFETY: freed once; no CQ uses it (refcnt 0).
        drop(unsafe { Box::from_raw(channel as *mut CompChannel) });
        0
    }
);

export!(
    "IBVERBS_1.1",
    null_mut(),
    fn ibv_create_cq(
        context: *mut sys::ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut sys::ibv_comp_channel,
        comp_vector: c_int,
    ) -> *mut sys::ibv_cq {
        if context.is_null() || cqe < 1 || cqe as u32 > rctb_engine::MAX_CQE {
            return fail(libc::EINVAL);
        }
        // SAFETY: a live context; `channel` is NULL or a live channel.
        let ctx = unsafe { Context::from_ibv(context) };
        let chan = (!channel.is_null()).then(|| {
            // SAFETY: not NULL, so a live channel of the program's.
            unsafe { obj::<CompChannel, _>(channel) }
        });
        if chan.is_some_and(|c| c.ch.context != context) {
            return fail(libc::EINVAL);
        }
        let mut st = ctx.rt.progress.lock();
        let id = match st.driver.engine_mut(0).0.create_cq(cqe as u32) {
            Ok(id) => id,
            Err(e) => return fail(errno_of(&e)),
        };
        let cq = Box::new(Cq {
            cq: sys::ibv_cq { context, channel, cq_context, handle: id.0, cqe, ..Default::default() },
            id,
            events: Mutex::new((0, 0)),
            acked: std::sync::Condvar::new(),
            armed_ever: std::sync::atomic::AtomicBool::new(false),
        });
        let ptr = Box::into_raw(cq);
        let link =
            CqLink { cq: ptr as usize, channel: chan.map(|c| c.inner.clone()), async_sink: ctx.async_tx.clone() };
        st.owner.cqs.insert(id, link);
        if !channel.is_null() {
            // SAFETY: a live channel; its count keeps it from being destroyed first.
            unsafe { (*channel).refcnt += 1 };
        }
        ptr as *mut sys::ibv_cq
    }
);

export!(
    "IBVERBS_1.1",
    libc::EIO,
    fn ibv_destroy_cq(cq: *mut sys::ibv_cq) -> c_int {
        if cq.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live CQ.
        let (c, ctx) = unsafe { (obj::<Cq, _>(cq), Context::from_ibv((*cq).context)) };
        {
            let mut st = ctx.rt.progress.lock();
            if let Err(e) = st.driver.engine_mut(0).0.destroy_cq(c.id) {
                return errno_of(&e);
            }
            if let Some(link) = st.owner.cqs.remove(&c.id)
                && let Some(ch) = link.channel
            {
                ch.forget(cq as usize);
            }
        }
        // As rdma-core: wait until every event handed out was acknowledged.
        let mut ev = c.events.lock().unwrap_or_else(|e| e.into_inner());
        while ev.1 < ev.0 {
            ev = c.acked.wait(ev).unwrap_or_else(|e| e.into_inner());
        }
        drop(ev);
        // SAFETY: a live CQ; its channel outlives it (refcnt).
        let channel = unsafe { (*cq).channel };
        if !channel.is_null() {
            // SAFETY: as above.
            unsafe { (*channel).refcnt -= 1 };
        }
        // SAFETY: freed once, after the engine and the channel let it go.
        drop(unsafe { Box::from_raw(cq as *mut Cq) });
        0
    }
);

export!(
    "IBVERBS_1.1",
    -1,
    fn ibv_get_cq_event(
        channel: *mut sys::ibv_comp_channel,
        cq: *mut *mut sys::ibv_cq,
        cq_context: *mut *mut c_void,
    ) -> c_int {
        if channel.is_null() || cq.is_null() || cq_context.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: a live channel.
        let ch = unsafe { &obj::<CompChannel, _>(channel).inner };
        loop {
            let mut byte = [0u8; 1];
            // Blocks, or fails with EAGAIN, as the program set the descriptor.
            match rustix::io::read(&ch.rx, &mut byte) {
                Ok(1) => {}
                Ok(_) => {
                    set_errno(libc::EIO);
                    return -1;
                }
                Err(e) => {
                    set_errno(e.raw_os_error());
                    return -1;
                }
            }
            let Some(p) = ch.queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front() else {
                // The byte of an event whose CQ was destroyed: read the next.
                continue;
            };
            let p = p as *mut sys::ibv_cq;
            // SAFETY: the queue holds only live CQs (destroy removes its own),
            // and `cq`/`cq_context` are the caller's out pointers.
            unsafe {
                *cq = p;
                *cq_context = (*p).cq_context;
                obj::<Cq, _>(p).events.lock().unwrap_or_else(|e| e.into_inner()).0 += 1;
            }
            return 0;
        }
    }
);

export!(
    "IBVERBS_1.1",
    (),
    fn ibv_ack_cq_events(cq: *mut sys::ibv_cq, nevents: c_uint) {
        if cq.is_null() {
            return;
        }
        // SAFETY: a live CQ.
        let c = unsafe { obj::<Cq, _>(cq) };
        c.events.lock().unwrap_or_else(|e| e.into_inner()).1 += nevents;
        c.acked.notify_all();
    }
);

export!(
    "IBVERBS_1.1",
    libc::EIO,
    fn ibv_resize_cq(cq: *mut sys::ibv_cq, cqe: c_int) -> c_int {
        // The engine's CQs keep their depth; a resize to fewer entries than
        // exist would lose completions. Refused as a device without the
        // capability refuses it.
        libc::EOPNOTSUPP
    }
);

// ---- shared receive queues ----

export!(
    "IBVERBS_1.1",
    null_mut(),
    fn ibv_create_srq(pd: *mut sys::ibv_pd, srq_init_attr: *mut sys::ibv_srq_init_attr) -> *mut sys::ibv_srq {
        if pd.is_null() || srq_init_attr.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: a live PD; the caller's init attributes.
        let (p, ctx, ia) = unsafe { (obj::<Pd, _>(pd), Context::from_ibv((*pd).context), &mut *srq_init_attr) };
        let init = SrqInit { pd: p.id, max_wr: ia.attr.max_wr, max_sge: ia.attr.max_sge, limit: ia.attr.srq_limit };
        let mut st = ctx.rt.progress.lock();
        let id = match st.driver.engine_mut(0).0.create_srq(&init) {
            Ok(id) => id,
            Err(e) => return fail(errno_of(&e)),
        };
        let srq = Box::new(Srq {
            srq: sys::ibv_srq {
                context: ctx.ibv(),
                srq_context: ia.srq_context,
                pd,
                handle: id.0,
                ..Default::default()
            },
            id,
            max_wr: ia.attr.max_wr,
            max_sge: ia.attr.max_sge,
            limit: ia.attr.srq_limit,
        });
        let ptr = Box::into_raw(srq);
        st.owner.srqs.insert(id, (ptr as usize, ctx.async_tx.clone()));
        ptr as *mut sys::ibv_srq
    }
);

export!(
    "IBVERBS_1.1",
    libc::EIO,
    fn ibv_modify_srq(srq: *mut sys::ibv_srq, srq_attr: *mut sys::ibv_srq_attr, srq_attr_mask: c_int) -> c_int {
        if srq.is_null() || srq_attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live SRQ; the caller's attributes.
        let (s, ctx, a) = unsafe { (obj::<Srq, _>(srq), Context::from_ibv((*srq).context), &*srq_attr) };
        if srq_attr_mask as u32 & sys::IBV_SRQ_MAX_WR != 0 {
            return libc::EINVAL; // resizing: the device has no SRQ_RESIZE for shrinking either way
        }
        if srq_attr_mask as u32 & sys::IBV_SRQ_LIMIT != 0 {
            let r = ctx.rt.progress.lock().driver.engine_mut(0).0.modify_srq(s.id, a.srq_limit);
            if let Err(e) = r {
                return errno_of(&e);
            }
            // SAFETY: the library's own field of a live SRQ; the program does
            // not share it.
            unsafe { (*(srq as *mut Srq)).limit = a.srq_limit };
        }
        0
    }
);

export!(
    "IBVERBS_1.1",
    libc::EIO,
    fn ibv_query_srq(srq: *mut sys::ibv_srq, srq_attr: *mut sys::ibv_srq_attr) -> c_int {
        if srq.is_null() || srq_attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live SRQ; the caller's struct.
        let s = unsafe { obj::<Srq, _>(srq) };
        // SAFETY: as above.
        unsafe { *srq_attr = sys::ibv_srq_attr { max_wr: s.max_wr, max_sge: s.max_sge, srq_limit: s.limit } };
        0
    }
);

export!(
    "IBVERBS_1.1",
    libc::EIO,
    fn ibv_destroy_srq(srq: *mut sys::ibv_srq) -> c_int {
        if srq.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live SRQ.
        let (s, ctx) = unsafe { (obj::<Srq, _>(srq), Context::from_ibv((*srq).context)) };
        let mut st = ctx.rt.progress.lock();
        if let Err(e) = st.driver.engine_mut(0).0.destroy_srq(s.id) {
            return errno_of(&e);
        }
        st.owner.srqs.remove(&s.id);
        drop(st);
        // SAFETY: freed once, after the engine let it go.
        drop(unsafe { Box::from_raw(srq as *mut Srq) });
        0
    }
);

// ---- queue pairs ----

export!(
    "IBVERBS_1.1",
    null_mut(),
    fn ibv_create_qp(pd: *mut sys::ibv_pd, qp_init_attr: *mut sys::ibv_qp_init_attr) -> *mut sys::ibv_qp {
        if pd.is_null() || qp_init_attr.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: a live PD; the caller's init attributes (read and, for the
        // capabilities granted, written back).
        let (p, ctx, ia) = unsafe { (obj::<Pd, _>(pd), Context::from_ibv((*pd).context), &mut *qp_init_attr) };
        if ia.qp_type != sys::IBV_QPT_RC {
            // UD, UC, XRC, raw packet: the engine speaks RC.
            return fail(libc::EOPNOTSUPP);
        }
        if ia.send_cq.is_null() || ia.recv_cq.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: live CQs (and SRQ, when given) of the program.
        let (scq, rcq) = unsafe { (obj::<Cq, _>(ia.send_cq), obj::<Cq, _>(ia.recv_cq)) };
        let srq = (!ia.srq.is_null()).then(|| {
            // SAFETY: not NULL, so a live SRQ of the program's.
            unsafe { obj::<Srq, _>(ia.srq) }
        });
        let context = ctx.ibv();
        // Every object must belong to the QP's context.
        if scq.cq.context != context || rcq.cq.context != context || srq.is_some_and(|s| s.srq.context != context) {
            return fail(libc::EINVAL);
        }
        if ia.cap.max_inline_data > MAX_INLINE {
            return fail(libc::EINVAL);
        }
        let caps = QpCaps {
            max_send_wr: ia.cap.max_send_wr.max(1),
            max_recv_wr: if srq.is_some() { 0 } else { ia.cap.max_recv_wr.max(1) },
            max_send_sge: ia.cap.max_send_sge.max(1),
            max_recv_sge: ia.cap.max_recv_sge.max(1),
            max_inline_data: ia.cap.max_inline_data,
        };
        let init = QpInit {
            pd: p.id,
            send_cq: scq.id,
            recv_cq: rcq.id,
            caps,
            sq_sig_all: ia.sq_sig_all != 0,
            srq: srq.map(|s| s.id),
        };
        let mut st = ctx.rt.progress.lock();
        let engine = st.driver.engine_mut(0).0;
        let info = match engine.create_qp(&init) {
            Ok(info) => info,
            Err(e) => return fail(errno_of(&e)),
        };
        // Inline sends copy into a bounce region at post time (see Bounce).
        let bounce = if ia.cap.max_inline_data > 0 {
            let slot = ia.cap.max_inline_data;
            let slots = caps.max_send_wr;
            match engine.reg_mr(p.id, slot as u64 * slots as u64, Access::LOCAL_WRITE) {
                Ok(mr) => Some(Bounce { mr: mr.id, slot, slots, next: 0 }),
                Err(e) => {
                    let _ = engine.destroy_qp(info.id);
                    return fail(errno_of(&e));
                }
            }
        } else {
            None
        };
        ia.cap = sys::ibv_qp_cap {
            max_send_wr: caps.max_send_wr,
            max_recv_wr: caps.max_recv_wr,
            max_send_sge: caps.max_send_sge,
            max_recv_sge: caps.max_recv_sge,
            max_inline_data: ia.cap.max_inline_data,
        };
        let qp = Box::new(Qp {
            qp: sys::ibv_qp {
                context,
                qp_context: ia.qp_context,
                pd,
                send_cq: ia.send_cq,
                recv_cq: ia.recv_cq,
                srq: ia.srq,
                handle: info.id.0,
                qp_num: info.qpn,
                state: sys::IBV_QPS_RESET,
                qp_type: sys::IBV_QPT_RC,
                ..Default::default()
            },
            id: info.id,
            attr: Mutex::new(sys::ibv_qp_attr { qp_state: sys::IBV_QPS_RESET, cap: ia.cap, ..Default::default() }),
            init: *ia,
            bounce: Mutex::new(bounce),
        });
        let ptr = Box::into_raw(qp);
        st.owner.qps.insert(info.id, (info.qpn, ptr as usize, ctx.async_tx.clone()));
        ptr as *mut sys::ibv_qp
    }
);

export!(
    "IBVERBS_1.1",
    libc::EIO,
    fn ibv_destroy_qp(qp: *mut sys::ibv_qp) -> c_int {
        if qp.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live QP.
        let (q, ctx) = unsafe { (obj::<Qp, _>(qp), Context::from_ibv((*qp).context)) };
        let mut st = ctx.rt.progress.lock();
        // The ACKs a last poll left for the next call leave first: the
        // peer is owed them even if this QP goes.
        let _ = st.turn();
        let engine = st.driver.engine_mut(0).0;
        if let Err(e) = engine.destroy_qp(q.id) {
            return errno_of(&e);
        }
        if let Some(b) = *q.bounce.lock().unwrap_or_else(|e| e.into_inner()) {
            let _ = engine.dereg_mr(b.mr);
        }
        st.owner.qps.remove(&q.id);
        drop(st);
        // SAFETY: freed once, after the engine let it go.
        drop(unsafe { Box::from_raw(qp as *mut Qp) });
        0
    }
);

export!(
    "IBVERBS_1.1",
    libc::EIO,
    fn ibv_query_qp(
        qp: *mut sys::ibv_qp,
        attr: *mut sys::ibv_qp_attr,
        attr_mask: c_int,
        init_attr: *mut sys::ibv_qp_init_attr,
    ) -> c_int {
        if qp.is_null() || attr.is_null() || init_attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live QP; the caller's out structs.
        let (q, ctx) = unsafe { (obj::<Qp, _>(qp), Context::from_ibv((*qp).context)) };
        let state = ctx.rt.progress.lock().driver.engine(0).query_qp(q.id).map(|i| i.state);
        let mut a = *q.attr.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(s) = state {
            a.qp_state = qp_state_code(s);
            a.cur_qp_state = a.qp_state;
        }
        // SAFETY: as above.
        unsafe {
            *attr = a;
            *init_attr = q.init;
        }
        0
    }
);

pub(crate) fn qp_state_code(s: QpState) -> sys::ibv_qp_state {
    match s {
        QpState::Reset => sys::IBV_QPS_RESET,
        QpState::Init => sys::IBV_QPS_INIT,
        QpState::Rtr => sys::IBV_QPS_RTR,
        QpState::Rts => sys::IBV_QPS_RTS,
        QpState::Err => sys::IBV_QPS_ERR,
        #[allow(unreachable_patterns)]
        _ => sys::IBV_QPS_UNKNOWN,
    }
}

/// The engine transition an `ibv_modify_qp` asks for, checked as the
/// kernel checks it: each transition's required attributes must be in the
/// mask (EINVAL otherwise).
fn transition(a: &sys::ibv_qp_attr, mask: c_uint, cur: QpState) -> Result<Option<QpTransition>, c_int> {
    let has = |bits: c_uint| mask & bits == bits;
    if !has(sys::IBV_QP_STATE) {
        // Attributes alone (no state change): kept, and nothing else.
        return Ok(None);
    }
    let mtu = |code: sys::ibv_mtu| Mtu::from_code(code as u8).map_err(|_| libc::EINVAL);
    Ok(Some(match a.qp_state {
        sys::IBV_QPS_RESET => QpTransition::Reset,
        sys::IBV_QPS_ERR => QpTransition::Err,
        sys::IBV_QPS_INIT if cur == QpState::Reset || cur == QpState::Init => {
            if !has(sys::IBV_QP_PKEY_INDEX | sys::IBV_QP_PORT | sys::IBV_QP_ACCESS_FLAGS) {
                return Err(libc::EINVAL);
            }
            if cur == QpState::Init {
                return Ok(None);
            }
            let access = access_of(a.qp_access_flags).ok_or(libc::EINVAL)?;
            QpTransition::Init(InitAttr { pkey_index: a.pkey_index, port: a.port_num, access })
        }
        sys::IBV_QPS_RTR => {
            let need = sys::IBV_QP_AV
                | sys::IBV_QP_PATH_MTU
                | sys::IBV_QP_DEST_QPN
                | sys::IBV_QP_RQ_PSN
                | sys::IBV_QP_MAX_DEST_RD_ATOMIC
                | sys::IBV_QP_MIN_RNR_TIMER;
            if !has(need) {
                return Err(libc::EINVAL);
            }
            let ah = &a.ah_attr;
            // RoCE needs the GRH: the peer is named by its GID.
            if ah.is_global == 0 || ah.grh.sgid_index != 0 {
                return Err(libc::EINVAL);
            }
            // SAFETY: a GID's 16 bytes, whichever view the caller filled.
            let dgid = Gid(unsafe { ah.grh.dgid.raw });
            if dgid.to_ipv4().is_none() {
                return Err(libc::EINVAL);
            }
            let mut av = AddressVector::new(dgid, ENGINE_SGID_INDEX);
            av.hop_limit = ah.grh.hop_limit;
            av.traffic_class = ah.grh.traffic_class;
            av.flow_label = ah.grh.flow_label;
            av.sl = ah.sl;
            QpTransition::Rtr(RtrAttr {
                path_mtu: mtu(a.path_mtu)?,
                dest_qpn: a.dest_qp_num,
                rq_psn: Psn::new(a.rq_psn).map_err(|_| libc::EINVAL)?,
                max_dest_rd_atomic: a.max_dest_rd_atomic,
                min_rnr_timer: RnrTimer::from_code(a.min_rnr_timer).map_err(|_| libc::EINVAL)?,
                av,
            })
        }
        sys::IBV_QPS_RTS if cur == QpState::Rtr => {
            let need = sys::IBV_QP_TIMEOUT
                | sys::IBV_QP_RETRY_CNT
                | sys::IBV_QP_RNR_RETRY
                | sys::IBV_QP_SQ_PSN
                | sys::IBV_QP_MAX_QP_RD_ATOMIC;
            if !has(need) {
                return Err(libc::EINVAL);
            }
            QpTransition::Rts(RtsAttr {
                sq_psn: Psn::new(a.sq_psn).map_err(|_| libc::EINVAL)?,
                timeout: a.timeout,
                retry_cnt: a.retry_cnt,
                rnr_retry: a.rnr_retry,
                max_rd_atomic: a.max_rd_atomic,
            })
        }
        // RTS -> RTS (timeouts, retry counts): kept, the path stays.
        sys::IBV_QPS_RTS if cur == QpState::Rts => return Ok(None),
        _ => return Err(libc::EINVAL),
    }))
}

export!(
    "IBVERBS_1.1",
    libc::EIO,
    fn ibv_modify_qp(qp: *mut sys::ibv_qp, attr: *mut sys::ibv_qp_attr, attr_mask: c_int) -> c_int {
        if qp.is_null() || attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live QP; the caller's attributes.
        let (q, ctx, a) = unsafe { (obj::<Qp, _>(qp), Context::from_ibv((*qp).context), &*attr) };
        let mask = attr_mask as c_uint;
        let mut st = ctx.rt.progress.lock();
        let (engine, now) = st.driver.engine_mut(0);
        let cur = match engine.query_qp(q.id) {
            Ok(i) => i.state,
            Err(e) => return errno_of(&e),
        };
        if mask & sys::IBV_QP_CUR_STATE != 0 && a.cur_qp_state != qp_state_code(cur) {
            return libc::EINVAL;
        }
        let t = match transition(a, mask, cur) {
            Ok(t) => t,
            Err(e) => return e,
        };
        if let Some(t) = t
            && let Err(e) = engine.modify_qp(now, q.id, &t)
        {
            return errno_of(&e);
        }
        let state = engine.query_qp(q.id).map(|i| i.state).unwrap_or(cur);
        let _ = st.turn();
        drop(st);
        ctx.rt.progress.ring();
        remember(q, a, mask);
        // SAFETY: the program reads `state`; only the library writes it.
        unsafe { (*qp).state = qp_state_code(state) };
        0
    }
);

/// Keeps the attributes `ibv_modify_qp` set, for `ibv_query_qp`.
fn remember(q: &Qp, a: &sys::ibv_qp_attr, mask: c_uint) {
    let mut m = q.attr.lock().unwrap_or_else(|e| e.into_inner());
    macro_rules! keep {
        ($($bit:ident => $($field:ident),+;)*) => {
            $( if mask & sys::$bit != 0 { $( m.$field = a.$field; )+ } )*
        };
    }
    keep! {
        IBV_QP_PKEY_INDEX => pkey_index;
        IBV_QP_PORT => port_num;
        IBV_QP_ACCESS_FLAGS => qp_access_flags;
        IBV_QP_AV => ah_attr;
        IBV_QP_PATH_MTU => path_mtu;
        IBV_QP_DEST_QPN => dest_qp_num;
        IBV_QP_RQ_PSN => rq_psn;
        IBV_QP_MAX_DEST_RD_ATOMIC => max_dest_rd_atomic;
        IBV_QP_MIN_RNR_TIMER => min_rnr_timer;
        IBV_QP_TIMEOUT => timeout;
        IBV_QP_RETRY_CNT => retry_cnt;
        IBV_QP_RNR_RETRY => rnr_retry;
        IBV_QP_SQ_PSN => sq_psn;
        IBV_QP_MAX_QP_RD_ATOMIC => max_rd_atomic;
    }
}

export!(
    "IBVERBS_1.6",
    null_mut(),
    fn ibv_qp_to_qp_ex(qp: *mut sys::ibv_qp) -> *mut sys::ibv_qp_ex {
        // Only QPs created through ibv_create_qp_ex have the extended posting
        // interface; this library creates none.
        fail(libc::EOPNOTSUPP)
    }
);

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

fn c_str(s: &'static str) -> *const c_char {
    s.as_ptr() as *const c_char
}

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

// ---- fork support ----

export!(
    "IBVERBS_1.1",
    0,
    fn ibv_fork_init() -> c_int {
        // Registered memory is the program's own pages, read by a thread of
        // this process: fork needs no page pinning care. The child cannot use
        // the parent's devices (their threads do not survive fork), as with
        // real verbs without fork support.
        0
    }
);

export!(
    "IBVERBS_1.13",
    0,
    fn ibv_is_fork_initialized() -> c_int {
        // IBV_FORK_UNNEEDED: nothing of this library depends on it.
        2
    }
);

export!(
    "IBVERBS_1.1",
    0,
    fn ibv_dontfork_range(base: *mut c_void, size: usize) -> c_int {
        0
    }
);

export!(
    "IBVERBS_1.1",
    0,
    fn ibv_dofork_range(base: *mut c_void, size: usize) -> c_int {
        0
    }
);

// ---- sysfs ----

export!(
    "IBVERBS_1.0",
    -1,
    fn ibv_read_sysfs_file(dir: *const c_char, file: *const c_char, buf: *mut c_char, size: usize) -> c_int {
        // There is no sysfs device; the few files programs read are answered
        // from the library's own facts, the rest do not exist.
        if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: NUL-terminated strings of the caller.
        let (dir, file) = unsafe { (std::ffi::CStr::from_ptr(dir), std::ffi::CStr::from_ptr(file)) };
        let ours = device::devices().iter().any(|d| {
            // SAFETY: the library's own NUL-terminated path.
            dir == unsafe { std::ffi::CStr::from_ptr(d.dev.ibdev_path.as_ptr()) }
        });
        let value = match (ours, file.to_bytes()) {
            (true, b"board_id") => "RCTB-UDP\n",
            (true, b"hw_rev") => "0\n",
            (true, b"fw_ver") => concat!("rctb ", env!("CARGO_PKG_VERSION"), "\n"),
            (true, b"node_type") => "1: CA\n",
            _ => {
                set_errno(libc::ENOENT);
                return -1;
            }
        };
        let n = value.len().min(size - 1);
        // SAFETY: `buf` holds `size` bytes; n + 1 <= size.
        unsafe {
            std::ptr::copy_nonoverlapping(value.as_ptr() as *const c_char, buf, n);
            *buf.add(n) = 0;
        }
        n as c_int
    }
);

export!(
    "IBVERBS_1.0",
    std::ptr::null(),
    fn ibv_get_sysfs_path() -> *const c_char {
        c_str("/sys\0")
    }
);
