//! Event channels: `rdma_create_event_channel`, `rdma_destroy_event_channel`,
//! `rdma_get_cm_event`, `rdma_ack_cm_event`.
//!
//! A channel is a pipe. Its read end is the `fd` the program sees (it may
//! poll it, or make it non-blocking with `fcntl`, as SPDK does); the write
//! end stays with the library, one byte per queued event. `rdma_get_cm_event`
//! reads one byte, so it blocks on an empty channel, or fails with EAGAIN
//! when the program made the fd non-blocking, or with EINTR when a signal
//! interrupts it: what a read of rdma-core's `/dev/infiniband/rdma_cm` does.
//!
//! Nothing posts events yet: the connection manager that will (address and
//! route resolution, connect, accept, disconnect) is the next step, and
//! with it the queue of events behind the bytes.

use std::ffi::c_int;
use std::io::{PipeReader, PipeWriter};
use std::os::fd::AsRawFd;
use std::ptr::null_mut;

use crate::abi::set_errno;
use crate::sys::{rdma_cm_event, rdma_event_channel};

/// What `rdma_create_event_channel` hands out: the C struct first, so a
/// pointer to one is a pointer to the other.
#[repr(C)]
struct EventChannel {
    c: rdma_event_channel,
    /// The read end, whose number is `c.fd`; closed with the channel.
    rx: PipeReader,
    /// The write end: open for as long as the channel is, so that reading
    /// an empty channel blocks rather than sees end of file.
    _tx: PipeWriter,
}

export!(
    "RDMACM_1.0",
    null_mut(),
    fn rdma_create_event_channel() -> *mut rdma_event_channel {
        // std's pipe is close-on-exec, as rdma-core's channel fd is.
        match std::io::pipe() {
            Ok((rx, tx)) => {
                let c = rdma_event_channel { fd: rx.as_raw_fd() };
                Box::into_raw(Box::new(EventChannel { c, rx, _tx: tx })).cast()
            }
            Err(e) => {
                set_errno(e.raw_os_error().unwrap_or(libc::EMFILE));
                null_mut()
            }
        }
    }
);

export!(
    "RDMACM_1.0",
    (),
    fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
        if !channel.is_null() {
            // SAFETY: a non-NULL channel came from rdma_create_event_channel,
            // which boxed an EventChannel whose first field it points at, and
            // the program destroys it once (closing both ends of its pipe).
            drop(unsafe { Box::from_raw(channel.cast::<EventChannel>()) });
        }
    }
);

export!(
    "RDMACM_1.0",
    -1,
    fn rdma_get_cm_event(channel: *mut rdma_event_channel, event: *mut *mut rdma_cm_event) -> c_int {
        if channel.is_null() || event.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: a non-NULL channel is one of ours (rdma_create_event_channel)
        // and alive until rdma_destroy_event_channel; `rx` is its read end.
        let fd = unsafe { (*channel.cast::<EventChannel>()).rx.as_raw_fd() };
        let mut byte = 0u8;
        // SAFETY: reads at most one byte into a local byte; `fd` is open.
        // Not std's Read: the program may have set O_NONBLOCK on the fd, and
        // the errno of the read (EAGAIN, EINTR) is the call's errno.
        let n = unsafe { libc::read(fd, (&raw mut byte).cast(), 1) };
        match n {
            // EAGAIN (non-blocking and empty), EINTR, ...: errno is the read's.
            ..0 => -1,
            // No event is ever queued yet (see the module doc), so a byte,
            // or the end of the pipe, means there is nothing to hand out.
            _ => {
                set_errno(libc::ENODATA);
                -1
            }
        }
    }
);

export!(
    "RDMACM_1.0",
    -1,
    fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
        // rdma_get_cm_event has handed out no event to acknowledge yet.
        set_errno(libc::EINVAL);
        -1
    }
);
