//! The libibverbs under this library: the public verbs it calls (found
//! with `dlsym` in the libibverbs.so.1 the program loaded, as rdma-core's
//! librdmacm calls them), the CM port of rctb's libibverbs
//! (`capi/ibverbs/src/cmport.rs`), and the devices, opened once for the process.
//!
//! Nothing is linked at build time: a fresh machine has no libibverbs to
//! link against, and the program brings its own. A libibverbs that is not
//! rctb's has no CM port; this library then has no devices, and says why
//! on stderr once.

use std::ffi::{CStr, c_int, c_void};
use std::net::Ipv4Addr;
use std::sync::OnceLock;

use crate::cmport::{CmEventRecord, CmPort};

use crate::sys::*;

// The verbs.h constants this library passes (the ABI's values).
pub(crate) const IBV_QP_STATE: c_int = 1;
pub(crate) const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub(crate) const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub(crate) const IBV_QP_PORT: c_int = 1 << 5;
pub(crate) const IBV_ACCESS_LOCAL_WRITE: u32 = 1;
pub(crate) const IBV_ACCESS_REMOTE_WRITE: u32 = 1 << 1;
pub(crate) const IBV_ACCESS_REMOTE_READ: u32 = 1 << 2;
pub(crate) const IBV_ACCESS_REMOTE_ATOMIC: u32 = 1 << 3;

/// The public verbs this library calls, and the CM port.
pub(crate) struct Lib {
    pub get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void,
    pub free_device_list: unsafe extern "C" fn(*mut *mut c_void),
    pub open_device: unsafe extern "C" fn(*mut c_void) -> *mut ibv_context,
    pub query_gid: unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int,
    pub alloc_pd: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd,
    pub create_qp: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp,
    pub destroy_qp: unsafe extern "C" fn(*mut ibv_qp) -> c_int,
    pub modify_qp: unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int,
    pub create_srq: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_srq_init_attr) -> *mut ibv_srq,
    pub destroy_srq: unsafe extern "C" fn(*mut ibv_srq) -> c_int,
    pub create_comp_channel: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_comp_channel,
    pub destroy_comp_channel: unsafe extern "C" fn(*mut ibv_comp_channel) -> c_int,
    pub create_cq:
        unsafe extern "C" fn(*mut ibv_context, c_int, *mut c_void, *mut ibv_comp_channel, c_int) -> *mut ibv_cq,
    pub destroy_cq: unsafe extern "C" fn(*mut ibv_cq) -> c_int,
    pub port: CmPort,
}

// SAFETY: function pointers and a table of function pointers, all of a
// library that stays loaded; calling them from any thread is what
// libibverbs allows.
unsafe impl Sync for Lib {}
// SAFETY: as for Sync.
unsafe impl Send for Lib {}

/// One device: its context (opened for the life of the process, as
/// rdma-core's librdmacm keeps its own), its IPv4 address (the GID), and
/// the protection domain of ids given none.
pub(crate) struct Dev {
    pub ctx: *mut ibv_context,
    pub ip: Ipv4Addr,
    pd: OnceLock<usize>,
}

// SAFETY: `ctx` is an opened context, shared by design (every id on the
// device uses it); the library behind it is thread-safe.
unsafe impl Sync for Dev {}
// SAFETY: as for Sync.
unsafe impl Send for Dev {}

impl Dev {
    /// The device's default protection domain, allocated on first use.
    pub fn pd(&self, lib: &Lib) -> *mut ibv_pd {
        // SAFETY: `ctx` is an opened context.
        *self.pd.get_or_init(|| unsafe { (lib.alloc_pd)(self.ctx) } as usize) as *mut ibv_pd
    }
}

/// The library, the CM port and the devices.
pub(crate) struct Cm {
    pub lib: Lib,
    pub devs: Vec<Dev>,
}

/// The process's CM, loaded and attached on first use; an errno when the
/// libibverbs loaded is not rctb's, or has no device.
pub(crate) fn get() -> Result<&'static Cm, c_int> {
    static ATTACHED: std::sync::Once = std::sync::Once::new();
    let cm = loaded()?;
    ATTACHED.call_once(|| {
        for (i, d) in cm.devs.iter().enumerate() {
            // SAFETY: an opened context of this libibverbs; the sink is a
            // function of this library, which stays loaded while in use.
            unsafe { (cm.lib.port.attach)(d.ctx.cast(), Some(crate::id::sink), i as *mut c_void) };
        }
    });
    Ok(cm)
}

/// The CM as loaded, its sinks attached or not (what the sink itself uses).
pub(crate) fn loaded() -> Result<&'static Cm, c_int> {
    static CM: OnceLock<Result<Cm, c_int>> = OnceLock::new();
    CM.get_or_init(|| {
        load().map_err(|why| {
            eprintln!("rctb librdmacm: no devices: {why}");
            libc::ENODEV
        })
    })
    .as_ref()
    .map_err(|e| *e)
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

fn load() -> Result<Cm, String> {
    // The program's own libibverbs.so.1 (already loaded: a reference more).
    // SAFETY: dlopen of a library name; the handle is kept for good.
    let h = unsafe { libc::dlopen(c"libibverbs.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if h.is_null() {
        return Err("libibverbs.so.1 cannot be loaded".into());
    }
    // SAFETY: the handle; the versioned name of rctb's CM port.
    let port = unsafe { libc::dlvsym(h, crate::cmport::SYMBOL.as_ptr(), crate::cmport::NODE.as_ptr()) };
    if port.is_null() {
        return Err("the libibverbs.so.1 loaded is not rctb's (put target/<profile>/rctb-verbs first \
                    on LD_LIBRARY_PATH)"
            .into());
    }
    // SAFETY: rctb_cm_port@RCTB_PRIVATE_1 is `extern "C" fn() -> *const CmPort`.
    let get_port: unsafe extern "C" fn() -> *const CmPort = unsafe { std::mem::transmute(port) };
    // SAFETY: as above; the table is static in that library.
    let table = unsafe { get_port() };
    // SAFETY: not NULL: a static table whose first field is its version.
    if table.is_null() || unsafe { (*table).version } != crate::cmport::VERSION {
        return Err("rctb's libibverbs.so.1 is of another version than this librdmacm.so.1".into());
    }
    macro_rules! load {
        ($($field:ident = $name:literal),* $(,)?) => {
            Lib {
                // SAFETY: each name is the libibverbs function of the
                // field's C signature (verbs.h).
                $( $field: unsafe { as_fn(sym(h, $name)?) }, )*
                // SAFETY: checked above: a table of this version.
                port: unsafe { *table },
            }
        };
    }
    let lib = load! {
        get_device_list = c"ibv_get_device_list",
        free_device_list = c"ibv_free_device_list",
        open_device = c"ibv_open_device",
        query_gid = c"ibv_query_gid",
        alloc_pd = c"ibv_alloc_pd",
        create_qp = c"ibv_create_qp",
        destroy_qp = c"ibv_destroy_qp",
        modify_qp = c"ibv_modify_qp",
        create_srq = c"ibv_create_srq",
        destroy_srq = c"ibv_destroy_srq",
        create_comp_channel = c"ibv_create_comp_channel",
        destroy_comp_channel = c"ibv_destroy_comp_channel",
        create_cq = c"ibv_create_cq",
        destroy_cq = c"ibv_destroy_cq",
    };
    let mut n = 0;
    // SAFETY: the device list of that library, freed below.
    let list = unsafe { (lib.get_device_list)(&mut n) };
    if list.is_null() {
        return Err("ibv_get_device_list failed (is RCTB_IBV_ADDR right?)".into());
    }
    let mut devs = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: `list` holds `n` device pointers.
        let dev = unsafe { *list.add(i) };
        // SAFETY: a device of the list.
        let ctx = unsafe { (lib.open_device)(dev) };
        if ctx.is_null() {
            continue;
        }
        let mut gid = ibv_gid::default();
        // SAFETY: an opened context; port 1, GID 0, into a local.
        if unsafe { (lib.query_gid)(ctx, 1, 0, &mut gid) } != 0 {
            continue;
        }
        // SAFETY: a GID's 16 bytes, whichever view.
        let raw = unsafe { gid.raw };
        let ip = Ipv4Addr::new(raw[12], raw[13], raw[14], raw[15]);
        devs.push(Dev { ctx, ip, pd: OnceLock::new() });
    }
    // SAFETY: the list from get_device_list; the opened contexts live on.
    unsafe { (lib.free_device_list)(list) };
    if devs.is_empty() {
        return Err("no device could be opened".into());
    }
    Ok(Cm { lib, devs })
}

impl Cm {
    /// The device whose address is `ip`.
    pub fn dev_of(&self, ip: Ipv4Addr) -> Option<usize> {
        self.devs.iter().position(|d| d.ip == ip)
    }

    /// The device a connection to `dst` leaves from: the one with that
    /// address (a loop to this process), else the first.
    pub fn route_to(&self, dst: Ipv4Addr) -> usize {
        self.dev_of(dst).unwrap_or(0)
    }
}

/// What a device's sink receives, re-exported for `id.rs`.
pub(crate) type Record = CmEventRecord;
