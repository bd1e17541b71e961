//! Completion channels and CQs, and the CQ events a channel delivers.

use super::*;

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
