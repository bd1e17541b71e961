//! The C types of `rc_server_abi.h`: the same names, fields and x86_64
//! layout as versitygw's header, written from its declarations
//! (`include/rc_server_abi.h` is this crate's own copy; `tests/c/abi.c`
//! checks every size and offset against it).

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

/// Status codes: what every `int` entry point returns.
pub const RC_OK: c_int = 0;
/// An argument broke a rule (checked before the server is touched).
pub const RC_E_ARG: c_int = 1;
/// The call is not valid in the session's state; the session is kept.
pub const RC_E_STATE: c_int = 2;
/// Another principal's session, or a wrong cookie; the session is kept.
pub const RC_E_SESSION: c_int = 3;
/// An unknown or spent handle, or a session past this step.
pub const RC_E_STALE: c_int = 4;
/// No session has the id.
pub const RC_E_NO_SESSION: c_int = 5;
/// The lease or view is already out.
pub const RC_E_DOUBLE: c_int = 6;
/// The data phase failed on the wire.
pub const RC_E_WIRE: c_int = 7;
/// Staged bytes differ from the session's size.
pub const RC_E_SHORT: c_int = 8;
/// A string is longer than its field.
pub const RC_E_TRUNC: c_int = 9;
/// A session, resource or slot limit was reached.
pub const RC_E_LIMIT: c_int = 10;
/// Anything else, a caught panic included.
pub const RC_E_INTERNAL: c_int = 11;

/// READY outcomes (`rc_ready_resp.outcome` and the terminal notification).
pub const RC_READY_OK: c_int = 0;
/// The client was not ready (RNR or retries exhausted): READY may be retried.
pub const RC_READY_BUSY: c_int = 1;
/// The data phase passed its deadline.
pub const RC_READY_TIMEOUT: c_int = 2;
/// The data arrived with the wrong immediate or length.
pub const RC_READY_VERIFY_FAIL: c_int = 3;
/// Any other transfer failure.
pub const RC_READY_WIRE_FAIL: c_int = 4;

/// OR-ed into `rc_session_snapshot.state` when the session is marked for reaping.
pub const RC_SNAPSHOT_REAP_PENDING: u8 = 0x80;

/// A borrowed string: `len` bytes at `ptr` (`{NULL, 0}` is "").
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rc_str_in {
    pub ptr: *const c_char,
    pub len: u32,
}

/// The server, opaque to C.
pub struct rc_server {
    pub(crate) inner: std::sync::Arc<crate::server::Server>,
}

/// Log sink: `level` 0 error, 2 debug; `msg` and `file` live for the call only.
pub type rc_log_fn =
    Option<extern "C" fn(ctx: *mut c_void, level: c_int, msg: *const c_char, file: *const c_char, line: c_int)>;
/// Terminal notification: one per session, when it is destroyed.
pub type rc_terminal_fn = Option<extern "C" fn(ctx: *mut c_void, id: *const c_char, outcome: c_int, bytes: u64)>;
/// One record of `rc_server_sessions_snapshot`.
pub type rc_snapshot_cb = Option<extern "C" fn(rec: *const rc_session_snapshot, ctx: *mut c_void)>;

/// `rc_server_init`'s options.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rc_device_opts {
    pub gid_hint: *const c_char,
    pub port: u8,
    pub gid_index: c_int,
    pub max_sessions: u32,
    pub max_user_sessions: u32,
    pub max_staging_bytes: u64,
    pub max_user_staging_bytes: u64,
    pub max_qps: u32,
    pub max_user_qps: u32,
    pub t_prep_ms: u64,
    pub t_exec_ms: u64,
    pub max_ready_slots: u32,
    pub max_stage_slots: u32,
}

/// SHA-256 of the principal.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rc_principal_id {
    pub id: [u8; 32],
}

/// A consume-once lease or view handle; nonce 0 is never valid.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct rc_handle {
    pub session_epoch: u64,
    pub nonce: u64,
}

/// PREPARE's request.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rc_prepare_req {
    pub principal: rc_principal_id,
    pub op: u8,
    pub target: rc_str_in,
    pub offset: u64,
    pub size: u64,
    pub client_psn: u32,
    pub cookie: u32,
    pub client_token: rc_str_in,
}

/// PREPARE's reply.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rc_prepare_resp {
    pub session_id: [c_char; 33],
    pub session_len: u32,
    pub server_qpn: u32,
    pub server_psn: u32,
    pub staging_addr: u64,
    pub staging_rkey: u32,
    pub reply_token: [c_char; 88],
    pub reply_len: u32,
}

/// A GET's staging buffer, lent until `rc_finish_staging`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rc_staging_lease {
    pub buf: *mut u8,
    pub capacity: usize,
    pub handle: rc_handle,
}

/// A PUT's received data, lent until `rc_finish_put`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rc_put_view {
    pub handle: rc_handle,
    pub buf: *const u8,
    pub len: usize,
}

/// READY's request.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rc_ready_req {
    pub principal: rc_principal_id,
    pub session_id: rc_str_in,
    pub cookie: u32,
    pub client_qpn: u32,
    pub client_mr_addr: u64,
    pub client_mr_rkey: u32,
}

/// READY's reply.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rc_ready_resp {
    pub bytes_transferred: u64,
    pub cookie_echo: u32,
    pub outcome: i32,
    pub etag: [c_char; 128],
    pub etag_len: u32,
    pub version_id: [c_char; 128],
    pub version_len: u32,
}

/// `rc_session_info`'s reply.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rc_session_info_resp {
    pub target: [c_char; 2048],
    pub target_len: u32,
    pub op: u8,
}

/// One live session, as `rc_server_sessions_snapshot` hands it out.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rc_session_snapshot {
    pub session_id: [c_char; 33],
    pub op: [c_char; 4],
    pub target: [c_char; 2048],
    pub target_len: u32,
    pub state: u8,
    pub age_ms: u64,
    pub staging_bytes: u64,
}

// The layout versitygw's header gives on x86_64 (tests/c/abi.c checks the
// same numbers from C).
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<rc_str_in>() == 16);
    assert!(size_of::<rc_device_opts>() == 72);
    assert!(offset_of!(rc_device_opts, port) == 8 && offset_of!(rc_device_opts, gid_index) == 12);
    assert!(offset_of!(rc_device_opts, t_prep_ms) == 48 && offset_of!(rc_device_opts, max_stage_slots) == 68);
    assert!(size_of::<rc_handle>() == 16);
    assert!(size_of::<rc_prepare_req>() == 96);
    assert!(offset_of!(rc_prepare_req, op) == 32 && offset_of!(rc_prepare_req, target) == 40);
    assert!(offset_of!(rc_prepare_req, client_psn) == 72 && offset_of!(rc_prepare_req, client_token) == 80);
    assert!(size_of::<rc_prepare_resp>() == 152);
    assert!(offset_of!(rc_prepare_resp, session_len) == 36 && offset_of!(rc_prepare_resp, staging_addr) == 48);
    assert!(offset_of!(rc_prepare_resp, reply_token) == 60 && offset_of!(rc_prepare_resp, reply_len) == 148);
    assert!(size_of::<rc_staging_lease>() == 32 && offset_of!(rc_staging_lease, handle) == 16);
    assert!(size_of::<rc_put_view>() == 32 && offset_of!(rc_put_view, buf) == 16);
    assert!(size_of::<rc_ready_req>() == 72);
    assert!(offset_of!(rc_ready_req, session_id) == 32 && offset_of!(rc_ready_req, cookie) == 48);
    assert!(offset_of!(rc_ready_req, client_mr_addr) == 56 && offset_of!(rc_ready_req, client_mr_rkey) == 64);
    assert!(size_of::<rc_ready_resp>() == 280);
    assert!(offset_of!(rc_ready_resp, etag) == 16 && offset_of!(rc_ready_resp, etag_len) == 144);
    assert!(offset_of!(rc_ready_resp, version_id) == 148 && offset_of!(rc_ready_resp, version_len) == 276);
    assert!(size_of::<rc_session_info_resp>() == 2056 && offset_of!(rc_session_info_resp, op) == 2052);
    assert!(size_of::<rc_session_snapshot>() == 2112);
    assert!(offset_of!(rc_session_snapshot, op) == 33 && offset_of!(rc_session_snapshot, target) == 37);
    assert!(offset_of!(rc_session_snapshot, target_len) == 2088 && offset_of!(rc_session_snapshot, state) == 2092);
    assert!(offset_of!(rc_session_snapshot, age_ms) == 2096 && offset_of!(rc_session_snapshot, staging_bytes) == 2104);
};
