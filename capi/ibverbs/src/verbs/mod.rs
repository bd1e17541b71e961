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

mod context;
mod cq;
mod events;
mod memory;
mod qp;
mod system;

pub(crate) use context::{device_attr, write_port_attr};
pub(crate) use memory::access_of;
pub(crate) use qp::attr_of_transition;

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

/// The library's object behind a program's pointer.
///
/// # Safety
/// `p` must be a live object of type `T` this library returned.
pub(crate) unsafe fn obj<'a, T, C>(p: *mut C) -> &'a T {
    // SAFETY: every object's first field is the C struct (repr(C)).
    unsafe { &*(p as *const T) }
}

/// A string literal that carries its own NUL, as the `*const c_char` the
/// `*_str` verbs return.
fn c_str(s: &'static str) -> *const c_char {
    s.as_ptr() as *const c_char
}
