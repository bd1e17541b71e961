//! The connection manager's calls: ids, address and route resolution, QPs
//! and SRQs on an id, connect, listen, accept, reject, disconnect, the
//! endpoint helpers (`rdma_create_ep`), options, and the devices.
//!
//! Resolution is local: an address selects the device that owns it (or,
//! for a destination, the first device), and ADDR_RESOLVED and
//! ROUTE_RESOLVED are queued at once. The CM exchange (REQ, REP, RTU, REJ,
//! DREQ, DREP) is the engine's, through the CM port of rctb's libibverbs
//! (`capi/ibverbs/src/cmport.rs`); its events arrive through `id::sink`.
//!
//! A synchronous id (created with no channel) has a channel of its own,
//! and the calls that wait for an event on it (resolve, connect, accept,
//! `rdma_get_request`) return when it came, with errno the event's
//! failure; the event stays in `id->event` until the next such call or
//! `rdma_destroy_id`, as rdma-core keeps it.
//!
//! Multicast and ECE fail with EOPNOTSUPP for good: rctb's device is RC
//! only. The `_ex` creation calls and the 1.4 address-info calls fail with
//! ENOSYS: not implemented yet.
//!
//! This file holds what the calls share (errno returns, the id and device
//! behind a pointer, the wait of a synchronous call); the calls are in
//! `ids.rs` (ids, binding, resolution, migration, options), `qp.rs` (QPs,
//! SRQs and CQs on an id), `conn.rs` (connect, listen, accept, reject,
//! disconnect), `ep.rs` (`rdma_create_ep`, `rdma_get_request`,
//! `rdma_destroy_ep`), `info.rs` (devices, event names, ports) and
//! `unsupported.rs` (what fails for good or for now).

use std::ffi::c_int;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU16, Ordering};

use crate::abi::set_errno;
use crate::id::{Event, Id};
use crate::sys::*;
use crate::verbs::{self, Cm};

mod conn;
mod ep;
mod ids;
mod info;
mod qp;
mod unsupported;

/// The most READs and atomics in flight each way this device takes.
const MAX_RD_ATOMIC: u8 = 16;
/// The most private data a REQ carries past the CMA header.
const MAX_REQ_PRIVATE_DATA: u8 = 56;
/// The most private data a REP carries.
const MAX_REP_PRIVATE_DATA: u8 = 196;

/// -1 with errno `e`, or 0.
fn ret(r: Result<(), c_int>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// An errno-returning port call as a Result.
fn ok(e: c_int) -> Result<(), c_int> {
    if e == 0 { Ok(()) } else { Err(e) }
}

/// A port of the ephemeral range (49152..=65535), one after another from
/// a start that differs by process.
fn ephemeral_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let start = (std::process::id() % 0x4000) as u16;
    0xC000 | (start.wrapping_add(n) & 0x3FFF)
}

/// The id behind `id`, or EINVAL.
///
/// # Safety
/// `id` is NULL or a live id of this library.
unsafe fn id_of<'a>(id: *mut rdma_cm_id) -> Result<&'a Id, c_int> {
    if id.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's promise.
    Ok(unsafe { Id::of(id) })
}

/// The device an id is on, and the CM.
fn dev_of(id: &Id) -> Result<(&'static Cm, usize), c_int> {
    let cm = verbs::get()?;
    let dev = id.lock().dev.ok_or(libc::EINVAL)?;
    Ok((cm, dev))
}

/// Acknowledges the event a synchronous call left in `id->event`.
fn ack_pending(id: &Id) {
    // SAFETY: the id's own event field; the program does not write it.
    let ev = unsafe { std::mem::replace(&mut (*id.c()).event, null_mut()) };
    if !ev.is_null() {
        // SAFETY: an event handed out to the id, not yet taken back.
        unsafe { Event::take_back(ev) };
    }
}

/// For a synchronous id: waits for the event that ends a call, keeps it
/// in `id->event`, and turns a failure into the call's errno.
fn complete(id: &Id, want: rdma_cm_event_type) -> Result<(), c_int> {
    if !id.lock().own_channel {
        return Ok(());
    }
    ack_pending(id);
    let ev = Event::hand_out(id.channel().next()?);
    // SAFETY: the id's own event field; `ev` is live until acknowledged.
    let (event, status) = unsafe {
        (*id.c()).event = ev;
        ((*ev).event, (*ev).status)
    };
    match (event, status) {
        (e, 0) if e == want => Ok(()),
        (RDMA_CM_EVENT_REJECTED, _) => Err(libc::ECONNREFUSED),
        (_, s) if s < 0 => Err(-s),
        (_, 0) => Err(libc::EPROTO),
        (_, s) => Err(s),
    }
}
