//! Event channels: `rdma_create_event_channel`, `rdma_destroy_event_channel`,
//! `rdma_get_cm_event`, `rdma_ack_cm_event`.
//!
//! A channel is a queue of events and a pipe. The pipe's read end is the
//! `fd` the program sees (it may poll it, or make it non-blocking with
//! `fcntl`, as SPDK does); the library writes one byte per queued event.
//! `rdma_get_cm_event` reads one byte, so it blocks on an empty channel,
//! or fails with EAGAIN when the program made the fd non-blocking, or
//! with EINTR when a signal interrupts it: what a read of rdma-core's
//! `/dev/infiniband/rdma_cm` does. Then it takes the queue's first event.
//! An event whose id was destroyed before the program took it leaves the
//! queue with its id; its byte stays, and a read that finds no event
//! behind its byte reads again.

use std::collections::VecDeque;
use std::ffi::c_int;
use std::io::{PipeReader, PipeWriter};
use std::os::fd::AsRawFd;
use std::ptr::null_mut;
use std::sync::Mutex;

use crate::abi::set_errno;
use crate::id::{Event, Id};
use crate::sys::{rdma_cm_event, rdma_event_channel};

/// What `rdma_create_event_channel` hands out: the C struct first, so a
/// pointer to one is a pointer to the other.
#[repr(C)]
pub(crate) struct EventChannel {
    c: rdma_event_channel,
    /// The read end, whose number is `c.fd`; closed with the channel.
    rx: PipeReader,
    /// The write end: one byte per queued event.
    tx: PipeWriter,
    queue: Mutex<VecDeque<Box<Event>>>,
}

impl EventChannel {
    /// A new channel, boxed and leaked: the program (or a synchronous id)
    /// owns it until `destroy`.
    pub fn create() -> Result<*mut rdma_event_channel, c_int> {
        // std's pipe is close-on-exec, as rdma-core's channel fd is.
        let (rx, tx) = std::io::pipe().map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?;
        let c = rdma_event_channel { fd: rx.as_raw_fd() };
        let ch = EventChannel { c, rx, tx, queue: Mutex::new(VecDeque::new()) };
        Ok(Box::into_raw(Box::new(ch)).cast())
    }

    /// The channel behind a program's pointer.
    ///
    /// # Safety
    /// `ch` must be a live channel of this library.
    pub unsafe fn of<'a>(ch: *mut rdma_event_channel) -> &'a EventChannel {
        // SAFETY: the caller's promise; the C struct is the first field.
        unsafe { &*ch.cast::<EventChannel>() }
    }

    /// Frees a channel.
    ///
    /// # Safety
    /// `ch` must be a live channel of this library, destroyed once.
    pub unsafe fn destroy(ch: *mut rdma_event_channel) {
        // SAFETY: the caller's promise: the box leaked by `create`.
        drop(unsafe { Box::from_raw(ch.cast::<EventChannel>()) });
    }

    /// Queues an event and makes the descriptor readable.
    pub fn push(&self, ev: Box<Event>) {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).push_back(ev);
        // SAFETY: writes one byte from a local to the pipe's write end. A
        // full pipe (64 Ki events unread) still leaves the fd readable.
        let _ = unsafe { libc::write(self.tx.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
    }

    /// Takes out the queued events `drop_it` says belong to a going id.
    // Boxed: an event keeps its address from the sink to its acknowledgement.
    #[allow(clippy::vec_box)]
    pub fn take_where(&self, mut drop_it: impl FnMut(&Event) -> bool) -> Vec<Box<Event>> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let (gone, kept): (Vec<_>, Vec<_>) = q.drain(..).partition(|e| drop_it(e));
        q.extend(kept);
        gone
    }

    /// Waits for the next event (as `rdma_get_cm_event`): errno on failure.
    pub fn next(&self) -> Result<Box<Event>, c_int> {
        loop {
            let mut byte = 0u8;
            // SAFETY: reads at most one byte into a local byte; the fd is
            // open. Not std's Read: the program may have set O_NONBLOCK on
            // the fd, and the read's errno (EAGAIN, EINTR) is the call's.
            let n = unsafe { libc::read(self.rx.as_raw_fd(), (&raw mut byte).cast(), 1) };
            if n < 0 {
                // SAFETY: the calling thread's errno, just set by read.
                return Err(unsafe { *libc::__errno_location() });
            }
            if n == 0 {
                // The channel was destroyed while this thread waited on it
                // (rping's CM thread is left so when its main thread
                // tears down). rdma-core's read would go on waiting, the
                // kernel holding the file; so does this one, touching
                // nothing of the freed channel, until a signal.
                // SAFETY: pause takes nothing and returns on a signal.
                unsafe { libc::pause() };
                return Err(libc::EINTR);
            }
            if let Some(ev) = self.queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front() {
                return Ok(ev);
            }
        }
    }
}

export!(
    "RDMACM_1.0",
    null_mut(),
    fn rdma_create_event_channel() -> *mut rdma_event_channel {
        EventChannel::create().unwrap_or_else(|e| {
            set_errno(e);
            null_mut()
        })
    }
);

export!(
    "RDMACM_1.0",
    (),
    fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
        if !channel.is_null() {
            // SAFETY: a channel from rdma_create_event_channel, destroyed
            // once by the program (its ids are gone first, as rdma-core
            // requires).
            unsafe { EventChannel::destroy(channel) };
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
        // SAFETY: a live channel of this library.
        let ch = unsafe { EventChannel::of(channel) };
        match ch.next() {
            Ok(ev) => {
                // SAFETY: the caller's out pointer.
                unsafe { *event = Event::hand_out(ev) };
                0
            }
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    }
);

export!(
    "RDMACM_1.0",
    -1,
    fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
        if event.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: an event rdma_get_cm_event handed out, acknowledged once.
        unsafe { Event::take_back(event) };
        0
    }
);

/// The ids whose events are queued on `ch` and `id` is their listener: for
/// a listener going away with requests not yet taken.
#[allow(clippy::vec_box)]
pub(crate) fn queued_requests_of(ch: &EventChannel, id: *const Id) -> Vec<Box<Event>> {
    ch.take_where(|e| e.c.listen_id.cast_const().cast::<Id>() == id)
}
