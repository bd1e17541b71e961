//! The libibverbs under the server, found at `rc_server_init` with
//! `dlopen("libibverbs.so.1")` and `dlsym`, as versitygw's C++ library
//! finds it: nothing is linked at build time, so versitygw's cgo line
//! (`-l:librcserver.a -lstdc++ -ldl -lpthread`) links it unchanged, and the
//! program runs on rxe, on a NIC, or on rctb's own libibverbs.so.1.
//!
//! The calls verbs.h makes inline (`ibv_post_send`, `ibv_post_recv`,
//! `ibv_poll_cq`, `ibv_req_notify_cq`) go through the context's `ops`, as
//! the header's inline functions do.

use std::ffi::{CStr, c_int, c_void};
use std::net::Ipv4Addr;
use std::sync::OnceLock;

use crate::sys::*;

/// The libibverbs functions the server calls.
pub(crate) struct Lib {
    pub get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device,
    pub free_device_list: unsafe extern "C" fn(*mut *mut ibv_device),
    pub get_device_name: unsafe extern "C" fn(*mut ibv_device) -> *const std::ffi::c_char,
    pub open_device: unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context,
    pub close_device: unsafe extern "C" fn(*mut ibv_context) -> c_int,
    pub query_port: unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int,
    pub query_gid: unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int,
    pub alloc_pd: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd,
    pub dealloc_pd: unsafe extern "C" fn(*mut ibv_pd) -> c_int,
    pub reg_mr: unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr,
    pub dereg_mr: unsafe extern "C" fn(*mut ibv_mr) -> c_int,
    pub create_comp_channel: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_comp_channel,
    pub destroy_comp_channel: unsafe extern "C" fn(*mut ibv_comp_channel) -> c_int,
    pub create_cq:
        unsafe extern "C" fn(*mut ibv_context, c_int, *mut c_void, *mut ibv_comp_channel, c_int) -> *mut ibv_cq,
    pub destroy_cq: unsafe extern "C" fn(*mut ibv_cq) -> c_int,
    pub get_cq_event: unsafe extern "C" fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int,
    pub ack_cq_events: unsafe extern "C" fn(*mut ibv_cq, u32),
    pub create_qp: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp,
    pub modify_qp: unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int,
    pub destroy_qp: unsafe extern "C" fn(*mut ibv_qp) -> c_int,
}

// SAFETY: function pointers of a library that stays loaded (the handle is
// never closed); libibverbs allows calls from any thread.
unsafe impl Sync for Lib {}
// SAFETY: as for Sync.
unsafe impl Send for Lib {}

/// The process's libibverbs, loaded once; why not, when it cannot be.
pub(crate) fn lib() -> Result<&'static Lib, String> {
    static LIB: OnceLock<Result<Lib, String>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn sym(handle: *mut c_void, name: &CStr) -> Result<*mut c_void, String> {
    // SAFETY: `handle` is a dlopen handle; `name` is NUL-terminated.
    let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
    if p.is_null() { Err(format!("libibverbs.so.1 has no {}", name.to_string_lossy())) } else { Ok(p) }
}

/// A symbol's address as the function pointer type `F`.
///
/// # Safety
/// `F` must be the `extern "C"` function pointer type of the symbol.
unsafe fn as_fn<F: Copy>(p: *mut c_void) -> F {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
    // SAFETY: the caller's promise; the sizes match (checked above).
    unsafe { std::mem::transmute_copy(&p) }
}

fn load() -> Result<Lib, String> {
    // SAFETY: dlopen of a library name; the handle is kept for good.
    let h = unsafe { libc::dlopen(c"libibverbs.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if h.is_null() {
        return Err("libibverbs.so.1 cannot be loaded (install rdma-core's libibverbs, or put rctb's \
                    target/<profile>/rctb-verbs on LD_LIBRARY_PATH)"
            .into());
    }
    macro_rules! load {
        ($($field:ident = $name:literal),* $(,)?) => {
            Lib {
                // SAFETY: each name is the libibverbs function of the
                // field's C signature (verbs.h).
                $( $field: unsafe { as_fn(sym(h, $name)?) }, )*
            }
        };
    }
    Ok(load! {
        get_device_list = c"ibv_get_device_list",
        free_device_list = c"ibv_free_device_list",
        get_device_name = c"ibv_get_device_name",
        open_device = c"ibv_open_device",
        close_device = c"ibv_close_device",
        query_port = c"ibv_query_port",
        query_gid = c"ibv_query_gid",
        alloc_pd = c"ibv_alloc_pd",
        dealloc_pd = c"ibv_dealloc_pd",
        reg_mr = c"ibv_reg_mr",
        dereg_mr = c"ibv_dereg_mr",
        create_comp_channel = c"ibv_create_comp_channel",
        destroy_comp_channel = c"ibv_destroy_comp_channel",
        create_cq = c"ibv_create_cq",
        destroy_cq = c"ibv_destroy_cq",
        get_cq_event = c"ibv_get_cq_event",
        ack_cq_events = c"ibv_ack_cq_events",
        create_qp = c"ibv_create_qp",
        modify_qp = c"ibv_modify_qp",
        destroy_qp = c"ibv_destroy_qp",
    })
}

/// An opened device context; closed when dropped.
pub(crate) struct Device {
    pub lib: &'static Lib,
    pub ctx: *mut ibv_context,
    pub name: String,
    /// The source GID index sessions use.
    pub gid_index: u32,
}

// SAFETY: an opened context; libibverbs contexts may be used from any
// thread.
unsafe impl Send for Device {}
// SAFETY: as for Send.
unsafe impl Sync for Device {}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: opened by `open`, closed once here.
        unsafe { (self.lib.close_device)(self.ctx) };
    }
}

/// What `gid_hint` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hint {
    /// No hint: the first device.
    First,
    /// The device with this IPv4 address in its GID table (the
    /// IPv4-mapped RoCE v2 GID `::ffff:a.b.c.d`).
    Ipv4(Ipv4Addr),
    /// The device with a GID whose first bytes are these.
    Prefix([u8; 16], usize),
}

impl Hint {
    /// Reads `gid_hint`: empty (first device), a dotted IPv4 address, or
    /// a GID or its prefix in colon-separated hex groups (`fe80:0000`).
    pub fn parse(text: &str) -> Result<Hint, &'static str> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(Hint::First);
        }
        if let Ok(ip) = text.parse::<Ipv4Addr>() {
            return Ok(Hint::Ipv4(ip));
        }
        if let Ok(ip) = text.parse::<std::net::Ipv6Addr>() {
            return Ok(Hint::Prefix(ip.octets(), 16));
        }
        let mut bytes = [0u8; 16];
        let mut n = 0;
        for group in text.split(':') {
            let v = u16::from_str_radix(group, 16).map_err(|_| "gid_hint: not an IPv4 address or hex GID groups")?;
            if group.len() != 4 || n == 16 {
                return Err("gid_hint: GID groups are 4 hex digits, at most 8 of them");
            }
            bytes[n..n + 2].copy_from_slice(&v.to_be_bytes());
            n += 2;
        }
        Ok(Hint::Prefix(bytes, n))
    }

    fn matches(&self, gid: &[u8; 16]) -> bool {
        match self {
            Hint::First => true,
            Hint::Ipv4(ip) => gid[..12] == V4_MAPPED && gid[12..] == ip.octets(),
            Hint::Prefix(p, n) => gid[..*n] == p[..*n],
        }
    }
}

/// Opens the device `hint` names, on `port`. `gid_index` < 0 takes the
/// entry the hint matched, or the first IPv4-mapped GID when there is no
/// hint (RoCE v2 over IPv4).
pub(crate) fn open(lib: &'static Lib, hint: Hint, port: u8, gid_index: c_int) -> Result<Device, String> {
    let mut n = 0;
    // SAFETY: the library's device list, freed below.
    let list = unsafe { (lib.get_device_list)(&mut n) };
    if list.is_null() {
        return Err(format!("ibv_get_device_list failed: {}", std::io::Error::last_os_error()));
    }
    let mut found = None;
    let mut seen = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: `list` holds `n` device pointers.
        let dev = unsafe { *list.add(i) };
        // SAFETY: a device of the list; the name is NUL-terminated and lives as the list does.
        let name = unsafe { CStr::from_ptr((lib.get_device_name)(dev)) }.to_string_lossy().into_owned();
        // SAFETY: a device of the list.
        let ctx = unsafe { (lib.open_device)(dev) };
        if ctx.is_null() {
            seen.push(format!("{name} (cannot be opened)"));
            continue;
        }
        let mut attr = ibv_port_attr::default();
        // SAFETY: an opened context, a port number, a zeroed attribute struct.
        let rc = unsafe { (lib.query_port)(ctx, port, &mut attr) };
        let table = if rc == 0 { attr.gid_tbl_len.max(0) as u32 } else { 0 };
        let pick = (0..table).find(|&idx| {
            let mut gid = ibv_gid::default();
            // SAFETY: an opened context; an index inside the port's table.
            if unsafe { (lib.query_gid)(ctx, port, idx as c_int, &mut gid) } != 0 {
                return false;
            }
            // SAFETY: a GID's 16 bytes, whichever view.
            let raw = unsafe { gid.raw };
            match hint {
                Hint::First if gid_index >= 0 => idx == gid_index as u32,
                Hint::First => raw[..12] == V4_MAPPED,
                other => other.matches(&raw),
            }
        });
        match pick {
            Some(idx) => {
                let gid_index = if gid_index >= 0 { gid_index as u32 } else { idx };
                found = Some(Device { lib, ctx, name, gid_index });
                break;
            }
            None => {
                seen.push(name);
                // SAFETY: opened above, not kept.
                unsafe { (lib.close_device)(ctx) };
            }
        }
    }
    // SAFETY: the list from above; the opened context does not need it.
    unsafe { (lib.free_device_list)(list) };
    found.ok_or_else(|| match hint {
        Hint::First if seen.is_empty() => "no RDMA device".to_string(),
        Hint::First => format!("no device has GID index {gid_index} on port {port} (devices: {})", seen.join(", ")),
        _ => format!("no device has a GID matching gid_hint on port {port} (devices: {})", seen.join(", ")),
    })
}

const V4_MAPPED: [u8; 12] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
