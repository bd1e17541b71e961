//! The private interface between rctb's two drop-in libraries: RDMA CM on
//! the engine of an opened device. One file, compiled into both C-ABI
//! crates (`capi/ibverbs` owns it; `capi/rdmacm` includes it with
//! `#[path]`), so the two sides share one declaration of the table.
//!
//! rctb's `librdmacm.so.1` (`capi/rdmacm`) keeps what rdma-core's
//! librdmacm keeps in user space: ids, event channels, address and route
//! resolution, synchronous mode. The connection manager itself (REQ, REP,
//! RTU, REJ, DREQ, DREP as MADs on QP1, their timers, the QP transitions)
//! is rctb-engine's, and runs in the device's engine inside rctb's
//! `libibverbs.so.1` (`capi/ibverbs`), as the kernel's rdma_cm runs beside
//! the device for rdma-core. This crate is the port between the two: one
//! table of functions (`CmPort`) that libibverbs exports as `SYMBOL` at
//! version node `NODE`, and the records that cross it.
//!
//! # Contract
//!
//! - librdmacm finds the table with `dlvsym(handle, SYMBOL, NODE)` on the
//!   libibverbs.so.1 the program loaded; a libibverbs that is not rctb's
//!   has no such node, and librdmacm then reports no devices.
//! - Every call takes the `ibv_context` of an opened device (a pointer
//!   from that library's `ibv_open_device`) and returns 0 or an errno.
//! - Connections and listeners are named by the engine's handles (`u32`).
//!   The caller gives each a cookie of its own; every [`CmEventRecord`]
//!   carries the cookie of what it is about.
//! - Events reach the sink [`attach`](CmPort::attach)ed to the device. The
//!   sink runs with the device's engine locked, on the device's progress
//!   thread or in a verbs call: it must queue the event and return, and
//!   never call back into either library. For a connect request, its
//!   return value becomes the new connection's cookie, so no event of the
//!   new connection can arrive before its owner knows it.
//! - The caller never holds a lock of its own across a call of the table
//!   (the sink takes the caller's locks under the engine's).

use std::ffi::{CStr, c_int, c_void};

/// The version node libibverbs.so.1 binds [`SYMBOL`] to.
pub const NODE: &CStr = c"RCTB_PRIVATE_1";
/// The function that returns the table: `extern "C" fn() -> *const CmPort`.
pub const SYMBOL: &CStr = c"rctb_cm_port";
/// The layout of [`CmPort`] and the records this crate describes; a caller
/// refuses a table of another version.
pub const VERSION: u32 = 1;

/// What a [`CmEventRecord`] reports.
pub mod kind {
    /// A REQ arrived at a listener: the record's `cookie` is the
    /// listener's, `conn` the new connection (answer with accept or reject).
    pub const CONNECT_REQUEST: u32 = 1;
    /// The REP arrived for a connect whose QP the caller drives: move the
    /// QP to RTR and RTS, then `establish`.
    pub const CONNECT_RESPONSE: u32 = 2;
    /// The connection is up.
    pub const ESTABLISHED: u32 = 3;
    /// The peer rejected the connect (`status`: the IBA reject reason).
    pub const REJECTED: u32 = 4;
    /// No peer application answered (`status`: a negative errno).
    pub const UNREACHABLE: u32 = 5;
    /// Either side disconnected.
    pub const DISCONNECTED: u32 = 6;
}

/// The IBA reject reason a REJ for a port nobody listens on carries
/// ("invalid service ID").
pub const REJ_INVALID_SERVICE_ID: c_int = 8;
/// The IBA reject reason of an application's reject ("consumer defined").
pub const REJ_CONSUMER_DEFINED: c_int = 28;

/// The longest private data a record carries (a REP's: 196 bytes).
pub const MAX_PRIVATE_DATA: usize = 196;

/// One CM event, as the sink receives it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CmEventRecord {
    /// One of [`kind`].
    pub kind: u32,
    /// The reject reason ([`kind::REJECTED`]), a negative errno
    /// ([`kind::UNREACHABLE`]), else 0.
    pub status: c_int,
    /// The cookie of the connection, or of the listener for
    /// [`kind::CONNECT_REQUEST`].
    pub cookie: u64,
    /// The engine's connection handle.
    pub conn: u32,
    /// The peer's IPv4 address (host order) and CM port
    /// ([`kind::CONNECT_REQUEST`]).
    pub remote_ip: u32,
    /// See `remote_ip`.
    pub remote_port: u16,
    /// The REQ's or REP's responder resources.
    pub responder_resources: u8,
    /// The REQ's or REP's initiator depth.
    pub initiator_depth: u8,
    /// Bytes of `private_data` in use.
    pub private_data_len: u8,
    /// The message's private data.
    pub private_data: [u8; MAX_PRIVATE_DATA],
}

impl Default for CmEventRecord {
    fn default() -> Self {
        CmEventRecord {
            kind: 0,
            status: 0,
            cookie: 0,
            conn: 0,
            remote_ip: 0,
            remote_port: 0,
            responder_resources: 0,
            initiator_depth: 0,
            private_data_len: 0,
            private_data: [0; MAX_PRIVATE_DATA],
        }
    }
}

impl CmEventRecord {
    /// The private data in use.
    pub fn private_data(&self) -> &[u8] {
        &self.private_data[..usize::from(self.private_data_len).min(MAX_PRIVATE_DATA)]
    }

    /// Sets the private data, cut to [`MAX_PRIVATE_DATA`] bytes.
    pub fn set_private_data(&mut self, data: &[u8]) {
        let n = data.len().min(MAX_PRIVATE_DATA);
        self.private_data[..n].copy_from_slice(&data[..n]);
        self.private_data_len = n as u8;
    }
}

/// Where a device's events go: `user` is what [`CmPort::attach`] was
/// given. For [`kind::CONNECT_REQUEST`] the return value is the new
/// connection's cookie; for every other kind it is ignored.
pub type Sink = unsafe extern "C" fn(user: *mut c_void, event: *const CmEventRecord) -> u64;

/// The parameters of a connect or an accept (`struct rdma_conn_param`,
/// and the addresses the id resolved).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ConnParams {
    /// The private data, `private_data_len` bytes (NULL when 0).
    pub private_data: *const u8,
    /// See `private_data`.
    pub private_data_len: u8,
    /// RDMA READs and atomics this side serves at once.
    pub responder_resources: u8,
    /// RDMA READs and atomics this side has in flight at once.
    pub initiator_depth: u8,
    /// Transport retries (connect only).
    pub retry_count: u8,
    /// RNR retries.
    pub rnr_retry_count: u8,
    /// The peer's IPv4 address, host order (connect only).
    pub dst_ip: u32,
    /// The peer's CM port (connect only).
    pub dst_port: u16,
    /// This side's CM port (connect only; 0: an ephemeral one).
    pub src_port: u16,
}

/// Who moves a connection's QP through its states (`driver` of connect
/// and accept).
pub mod driver {
    /// The CM: INIT at once, RTR and RTS with the peer's values, ERR on a
    /// disconnect (a QP made with `rdma_create_qp`).
    pub const CM: u32 = 0;
    /// The caller, with `qp_attr` and `establish` (an id with no QP; the
    /// QP is named by `qp_num`).
    pub const APPLICATION: u32 = 1;
}

/// The table libibverbs.so.1 returns from [`SYMBOL`]. Each function
/// returns 0 or an errno; `ctx` is an opened device's `ibv_context`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CmPort {
    /// [`VERSION`].
    pub version: u32,
    /// `size_of::<CmPort>()` of the library.
    pub size: u32,
    /// Sends the device's events to `sink` (NULL: drops them). One sink per
    /// device; a second attach replaces the first.
    pub attach: unsafe extern "C" fn(ctx: *mut c_void, sink: Option<Sink>, user: *mut c_void) -> c_int,
    /// Listens on `port`; the listener's handle goes to `out`. EADDRINUSE
    /// when the port has a listener.
    pub listen: unsafe extern "C" fn(ctx: *mut c_void, port: u16, cookie: u64, out: *mut u32) -> c_int,
    /// Stops listening.
    pub close_listener: unsafe extern "C" fn(ctx: *mut c_void, listener: u32) -> c_int,
    /// Sends a REQ for `qp` (an `ibv_qp` of this device; NULL with
    /// [`driver::APPLICATION`] names the QP by `qp_num`); the connection's
    /// handle goes to `out`.
    pub connect: unsafe extern "C" fn(
        ctx: *mut c_void,
        qp: *mut c_void,
        qp_num: u32,
        driver: u32,
        params: *const ConnParams,
        cookie: u64,
        out: *mut u32,
    ) -> c_int,
    /// Accepts a connect request on `qp` (as for connect), sending the REP.
    pub accept: unsafe extern "C" fn(
        ctx: *mut c_void,
        conn: u32,
        qp: *mut c_void,
        qp_num: u32,
        driver: u32,
        params: *const ConnParams,
    ) -> c_int,
    /// Rejects a connect request, or a REP not yet answered.
    pub reject: unsafe extern "C" fn(ctx: *mut c_void, conn: u32, data: *const u8, len: u8) -> c_int,
    /// Sends the DREQ; the QP goes to ERR (if the CM drives it).
    pub disconnect: unsafe extern "C" fn(ctx: *mut c_void, conn: u32) -> c_int,
    /// Sends the RTU of a connect whose QP the caller drives.
    pub establish: unsafe extern "C" fn(ctx: *mut c_void, conn: u32) -> c_int,
    /// Forgets the connection: no event of it comes after this returns.
    pub destroy: unsafe extern "C" fn(ctx: *mut c_void, conn: u32) -> c_int,
    /// The attributes (`struct ibv_qp_attr`) and mask that bring the
    /// connection's QP to `state` (an `enum ibv_qp_state`: INIT, RTR, RTS).
    pub qp_attr:
        unsafe extern "C" fn(ctx: *mut c_void, conn: u32, state: c_int, attr: *mut c_void, mask: *mut c_int) -> c_int,
}
