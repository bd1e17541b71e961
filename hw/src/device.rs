//! Devices: librdmacm's device list, the open context this transport uses,
//! and the device/port/GID queries.
//!
//! Contexts come from `rdma_get_devices`, not `ibv_open_device`: librdmacm
//! opens each device once and binds every `rdma_cm_id` to that same
//! `ibv_context` (`id->verbs`). PDs and CQs created on it can therefore be
//! used with QPs that `rdma_create_qp` makes on a CM id. librdmacm owns the
//! contexts; holding the list keeps them open (`rdma_free_devices` drops
//! the references), so they are never `ibv_close_device`d here.

use std::net::Ipv4Addr;
use std::path::Path;
use std::ptr::NonNull;

use rctb_core::transport::{
    DeviceInfo, Gid, GidEntry, GidType, Mtu, PortInfo, PortState, Result, TransportError, Verb,
};
use rdma_sys::{
    _compat_ibv_port_attr, ibv_ack_async_event, ibv_async_event, ibv_context, ibv_device_attr, ibv_get_async_event,
    ibv_get_device_name, ibv_gid, ibv_port_attr, ibv_port_state, ibv_query_device, ibv_query_gid, ibv_query_port,
    rdma_free_devices, rdma_get_devices,
};

use crate::gid::read_gid_type;

/// A GID entry's type: sysfs first (every kernel has it), then verbs'
/// `_ibv_query_gid_ex` (rdma-core 32 and later), for a device with no
/// sysfs node: rctb's own libibverbs, or a future provider without one.
fn gid_type(ctx: NonNull<ibv_context>, sysfs_root: &Path, name: &str, port: u8, index: u32) -> Option<GidType> {
    read_gid_type(sysfs_root, name, port, index).or_else(|| query_gid_type(ctx, port, index))
}

/// `_ibv_query_gid_ex`'s answer on the type, looked up at run time: it is
/// absent from libibverbs before rdma-core 32, which must still load.
fn query_gid_type(ctx: NonNull<ibv_context>, port: u8, index: u32) -> Option<GidType> {
    type QueryGidEx =
        unsafe extern "C" fn(*mut ibv_context, u32, u32, *mut rdma_sys::ibv_gid_entry, u32, usize) -> libc::c_int;
    // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the libraries
    // already loaded, libibverbs among them.
    let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_ibv_query_gid_ex".as_ptr()) };
    if sym.is_null() {
        return None;
    }
    // SAFETY: the symbol is libibverbs' `_ibv_query_gid_ex`, whose C
    // signature QueryGidEx states.
    let query: QueryGidEx = unsafe { std::mem::transmute::<*mut libc::c_void, QueryGidEx>(sym) };
    // SAFETY: ibv_gid_entry is plain data; all-zero is a valid value.
    let mut entry: rdma_sys::ibv_gid_entry = unsafe { std::mem::zeroed() };
    // SAFETY: `ctx` is open; `entry` is writable for its size, which is passed.
    let rc = unsafe { query(ctx.as_ptr(), port.into(), index, &mut entry, 0, std::mem::size_of_val(&entry)) };
    match (rc, entry.gid_type) {
        // enum ibv_gid_type: IBV_GID_TYPE_IB 0, ROCE_V1 1, ROCE_V2 2.
        (0, 1) => Some(GidType::RoceV1),
        (0, 2) => Some(GidType::RoceV2),
        _ => None,
    }
}
use crate::summary::{DeviceSummary, NO_DEVICE_HINT, SYSFS_ROOT, UNKNOWN_DEVICE_HINT};
use crate::sys::{check_rc, cstr_lossy, errno, os_error, set_nonblocking};

fn no_device(verb: Verb, hint: &'static str) -> TransportError {
    TransportError::NoDevice { verb, hint: Some(hint) }
}

/// The array `rdma_get_devices` returns; holding it keeps every listed
/// context open.
#[derive(Debug)]
pub(crate) struct DeviceList {
    list: NonNull<*mut ibv_context>,
    len: usize,
}

impl DeviceList {
    /// librdmacm's devices, or `NoDevice` when there are none (it returns
    /// NULL with ENODEV then, or when the kernel has no RDMA support).
    pub(crate) fn get(verb: Verb) -> Result<Self> {
        let mut n: i32 = 0;
        // SAFETY: `n` is a valid out-pointer; the call returns NULL or a
        // NULL-terminated array that we release with rdma_free_devices.
        let list = unsafe { rdma_get_devices(&mut n) };
        let Some(list) = NonNull::new(list) else {
            return Err(no_device(verb, NO_DEVICE_HINT));
        };
        let list = DeviceList { list, len: usize::try_from(n).unwrap_or(0) };
        if list.len == 0 {
            return Err(no_device(verb, NO_DEVICE_HINT));
        }
        Ok(list)
    }

    /// The contexts with their device names.
    pub(crate) fn contexts(&self) -> impl Iterator<Item = (NonNull<ibv_context>, String)> + '_ {
        (0..self.len).filter_map(move |i| {
            // SAFETY: `i < len`, the number of entries rdma_get_devices
            // reported; the array lives as long as `self`.
            let ctx = unsafe { *self.list.as_ptr().add(i) };
            let ctx = NonNull::new(ctx)?;
            // SAFETY: a context from librdmacm's list is open while the list
            // is held; `device` points to its ibv_device, whose name is a
            // NUL-terminated array inside that struct.
            let name = unsafe { cstr_lossy(ibv_get_device_name((*ctx.as_ptr()).device)) };
            Some((ctx, name))
        })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the array came from rdma_get_devices and is freed once.
        unsafe { rdma_free_devices(self.list.as_ptr()) }
    }
}

// SAFETY: librdmacm's device array is plain memory that is only read, and
// released once in Drop; librdmacm locks its own bookkeeping.
unsafe impl Send for DeviceList {}
// SAFETY: as above: `&self` only reads the array.
unsafe impl Sync for DeviceList {}

/// `struct ibv_async_event` with its `event_type` as a plain integer:
/// rdma-sys declares it a Rust enum, which a value from a newer kernel
/// (not in our headers) would make undefined behaviour to hold. Same C
/// layout: an 8-byte union of pointers and an int, then a C enum (an int).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct AsyncEventRaw {
    /// `element`: the CQ, QP, SRQ or WQ pointer (or the port number) the
    /// event is about, by `event_type`. Compared, never dereferenced.
    pub(crate) element: *mut libc::c_void,
    /// `event_type`, an `enum ibv_event_type` value.
    pub(crate) event_type: u32,
}

// The mirror must match the C struct exactly.
const _: () = {
    assert!(std::mem::size_of::<AsyncEventRaw>() == std::mem::size_of::<ibv_async_event>());
    assert!(std::mem::align_of::<AsyncEventRaw>() == std::mem::align_of::<ibv_async_event>());
    assert!(std::mem::offset_of!(AsyncEventRaw, event_type) == std::mem::offset_of!(ibv_async_event, event_type));
};

/// The device's shared receive queue limits (`ibv_device_attr`), which
/// [`DeviceInfo`] does not carry.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SrqLimits {
    /// Most SRQs (`max_srq`); 0 when the device has none.
    pub(crate) max_srq: u32,
    /// Most receives one SRQ holds (`max_srq_wr`).
    pub(crate) max_srq_wr: u32,
    /// Most SGEs per SRQ receive (`max_srq_sge`).
    pub(crate) max_srq_sge: u32,
}

/// An open device context (shared by every object created on it).
#[derive(Debug)]
pub(crate) struct Context {
    ctx: NonNull<ibv_context>,
    pub(crate) name: String,
    pub(crate) info: DeviceInfo,
    pub(crate) srq_limits: SrqLimits,
    pub(crate) port_count: u8,
    /// Keeps `ctx` open; dropped last (after every child released its Arc).
    _list: DeviceList,
}

// SAFETY: an ibv_context may be used from any thread (verbs calls are
// thread-safe), and the Rust-side fields are immutable after `open`.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Context {
    /// Opens device `name` from librdmacm's list, with its async event fd
    /// made non-blocking (so `poll_async_event` never blocks).
    pub(crate) fn open(name: &str) -> Result<Self> {
        let list = DeviceList::get(Verb::QueryDevice)?;
        let ctx = list
            .contexts()
            .find(|(_, n)| n == name)
            .map(|(ctx, _)| ctx)
            .ok_or_else(|| no_device(Verb::QueryDevice, UNKNOWN_DEVICE_HINT))?;
        let (info, srq_limits, port_count) = query_device(ctx, name)?;
        // librdmacm opens each device once, so this context (and its fd)
        // may be shared with other transports on the device: setting the
        // flag again is harmless, and nothing else here reads the fd.
        // SAFETY: the context is open while `list` is held; `async_fd` is
        // a plain int field set when the device was opened.
        set_nonblocking(unsafe { (*ctx.as_ptr()).async_fd }, Verb::QueryDevice)?;
        Ok(Context { ctx, name: name.to_owned(), info, srq_limits, port_count, _list: list })
    }

    /// The raw context; valid for as long as `self` lives.
    pub(crate) fn as_ptr(&self) -> *mut ibv_context {
        self.ctx.as_ptr()
    }

    /// The next asynchronous event, copied out and already acknowledged
    /// (`ibv_get_async_event` + `ibv_ack_async_event`); `None` when none
    /// is pending. Never blocks (the fd is non-blocking, see `open`).
    pub(crate) fn next_async_event(&self) -> Result<Option<AsyncEventRaw>> {
        let mut event = AsyncEventRaw { element: std::ptr::null_mut(), event_type: 0 };
        let event_ptr = (&mut event as *mut AsyncEventRaw).cast::<ibv_async_event>();
        // SAFETY: the context is open; `event_ptr` points to writable
        // memory of `struct ibv_async_event`'s C layout (see
        // `AsyncEventRaw`), which the call fills on success.
        if unsafe { ibv_get_async_event(self.as_ptr(), event_ptr) } != 0 {
            return match errno() {
                libc::EAGAIN | libc::EINTR => Ok(None),
                e => Err(os_error(Verb::AsyncEvent, "ibv_get_async_event", e)),
            };
        }
        // Acknowledge at once: ibv_destroy_cq/qp/srq wait until every event
        // of their object was acknowledged, so holding one could deadlock.
        // SAFETY: `event_ptr` holds the event just read, unchanged, and it
        // is acknowledged exactly once.
        unsafe { ibv_ack_async_event(event_ptr) };
        Ok(Some(event))
    }

    pub(crate) fn port(&self, port: u8) -> Result<PortInfo> {
        if port == 0 || port > self.port_count {
            return Err(TransportError::invalid(
                Verb::QueryPort,
                "port",
                port.into(),
                "no such port on this device (ports are 1-based)",
            ));
        }
        query_port(self.ctx, &self.name, port, Path::new(SYSFS_ROOT))
    }

    /// The GID at `index` of `port` (one `ibv_query_gid`).
    pub(crate) fn gid(&self, port: u8, index: u32, verb: Verb) -> Result<Gid> {
        query_gid(self.ctx, port, index, verb)
    }

    /// `port`'s active MTU (one `ibv_query_port`, no GID table).
    pub(crate) fn active_mtu(&self, port: u8, verb: Verb) -> Result<Mtu> {
        let attr = port_attr(self.ctx, port, verb)?;
        mtu(attr.active_mtu)
    }

    /// The IPv4 address of the first RoCE v2, IPv4-mapped GID, scanning
    /// ports and GID indexes in order and stopping at the first match (the
    /// full tables can be long: rxe has 1024 slots).
    pub(crate) fn ipv4(&self) -> Option<Ipv4Addr> {
        let root = Path::new(SYSFS_ROOT);
        (1..=self.port_count).find_map(|port| {
            let len = port_attr(self.ctx, port, Verb::QueryPort).ok()?.gid_tbl_len;
            (0..u32::try_from(len).unwrap_or(0)).find_map(|index| {
                let ip = query_gid(self.ctx, port, index, Verb::QueryPort).ok()?.to_ipv4()?;
                (gid_type(self.ctx, root, &self.name, port, index) == Some(GidType::RoceV2)).then_some(ip)
            })
        })
    }
}

/// Lists every RDMA device with its ports and GID tables.
pub(crate) fn list_devices() -> Result<Vec<DeviceSummary>> {
    let list = DeviceList::get(Verb::QueryDevice)?;
    let mut out = Vec::new();
    for (ctx, name) in list.contexts() {
        let (device, _, port_count) = query_device(ctx, &name)?;
        let ports =
            (1..=port_count).map(|p| query_port(ctx, &name, p, Path::new(SYSFS_ROOT))).collect::<Result<Vec<_>>>()?;
        out.push(DeviceSummary { name, device, ports });
    }
    Ok(out)
}

fn query_device(ctx: NonNull<ibv_context>, name: &str) -> Result<(DeviceInfo, SrqLimits, u8)> {
    // SAFETY: ibv_device_attr is plain data; all-zero is a valid value.
    let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: `ctx` is an open context (callers hold its list) and `attr`
    // is a writable ibv_device_attr.
    let rc = unsafe { ibv_query_device(ctx.as_ptr(), &mut attr) };
    check_rc(rc, Verb::QueryDevice, "ibv_query_device")?;
    let u32_of = |v: i32| u32::try_from(v).unwrap_or(0);
    let u8_of = |v: i32| u8::try_from(v.max(0)).unwrap_or(u8::MAX);
    let info = DeviceInfo {
        name: name.to_owned(),
        max_qp_wr: u32_of(attr.max_qp_wr),
        max_sge: u32_of(attr.max_sge),
        max_cqe: u32_of(attr.max_cqe),
        max_mr_size: attr.max_mr_size,
        max_qp_rd_atom: u8_of(attr.max_qp_rd_atom),
        max_qp_init_rd_atom: u8_of(attr.max_qp_init_rd_atom),
    };
    let srq_limits = SrqLimits {
        max_srq: u32_of(attr.max_srq),
        max_srq_wr: u32_of(attr.max_srq_wr),
        max_srq_sge: u32_of(attr.max_srq_sge),
    };
    Ok((info, srq_limits, attr.phys_port_cnt))
}

fn port_state(raw: u32) -> PortState {
    match raw {
        ibv_port_state::IBV_PORT_INIT => PortState::Init,
        ibv_port_state::IBV_PORT_ARMED => PortState::Armed,
        ibv_port_state::IBV_PORT_ACTIVE | ibv_port_state::IBV_PORT_ACTIVE_DEFER => PortState::Active,
        _ => PortState::Down,
    }
}

fn mtu(code: u32) -> Result<Mtu> {
    let code = u8::try_from(code).unwrap_or(0);
    Mtu::from_code(code).map_err(|source| TransportError::InvalidArgument { verb: Verb::QueryPort, source })
}

fn port_attr(ctx: NonNull<ibv_context>, port: u8, verb: Verb) -> Result<ibv_port_attr> {
    // SAFETY: ibv_port_attr is plain data; all-zero is a valid value.
    let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
    // `ibv_query_port` is a macro in C that passes the full struct size to
    // the provider; the exported symbol fills the older, shorter
    // `_compat_ibv_port_attr`, which is a prefix of `ibv_port_attr` holding
    // every field read here (rdma-sys's `___ibv_query_port` falls back to
    // the same call).
    // SAFETY: `ctx` is open; `attr` is writable and at least as large as
    // the compat struct the symbol writes.
    let rc = unsafe {
        ibv_query_port(ctx.as_ptr(), port, (&mut attr as *mut ibv_port_attr).cast::<_compat_ibv_port_attr>())
    };
    check_rc(rc, verb, "ibv_query_port")?;
    Ok(attr)
}

fn query_port(ctx: NonNull<ibv_context>, name: &str, port: u8, sysfs_root: &Path) -> Result<PortInfo> {
    let attr = port_attr(ctx, port, Verb::QueryPort)?;
    let mut gids = Vec::new();
    for index in 0..u32::try_from(attr.gid_tbl_len).unwrap_or(0) {
        let Ok(gid) = query_gid(ctx, port, index, Verb::QueryPort) else {
            // Unused slots of some providers fail instead of reading zero.
            continue;
        };
        if gid.is_zero() {
            continue;
        }
        // An entry whose type neither sysfs nor verbs tells is left out
        // rather than guessed.
        if let Some(gid_type) = gid_type(ctx, sysfs_root, name, port, index) {
            gids.push(GidEntry { index, gid, gid_type });
        }
    }
    Ok(PortInfo {
        port,
        state: port_state(attr.state),
        active_mtu: mtu(attr.active_mtu)?,
        max_mtu: mtu(attr.max_mtu)?,
        gids,
    })
}

fn query_gid(ctx: NonNull<ibv_context>, port: u8, index: u32, verb: Verb) -> Result<Gid> {
    let Ok(c_index) = i32::try_from(index) else {
        return Err(TransportError::invalid(verb, "gid_index", index.into(), "exceeds the C int range"));
    };
    let mut gid = ibv_gid { raw: [0; 16] };
    // SAFETY: `ctx` is open and `gid` is a writable 16-byte union.
    let rc = unsafe { ibv_query_gid(ctx.as_ptr(), port, c_index, &mut gid) };
    check_rc(rc, verb, "ibv_query_gid")?;
    // SAFETY: every bit pattern of the union is a valid [u8; 16].
    Ok(Gid(unsafe { gid.raw }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_states() {
        assert_eq!(port_state(ibv_port_state::IBV_PORT_ACTIVE), PortState::Active);
        assert_eq!(port_state(ibv_port_state::IBV_PORT_ACTIVE_DEFER), PortState::Active);
        assert_eq!(port_state(ibv_port_state::IBV_PORT_DOWN), PortState::Down);
        assert_eq!(port_state(ibv_port_state::IBV_PORT_NOP), PortState::Down);
        assert_eq!(port_state(ibv_port_state::IBV_PORT_ARMED), PortState::Armed);
    }

    #[test]
    fn mtu_codes() {
        assert_eq!(mtu(3).unwrap(), Mtu::Mtu1024);
        assert!(matches!(mtu(0), Err(TransportError::InvalidArgument { verb: Verb::QueryPort, .. })));
    }
}
