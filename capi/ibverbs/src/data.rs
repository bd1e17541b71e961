//! The data path: what the inline verbs of `verbs.h` call through the
//! context's operations (`post_send`, `post_recv`, `post_srq_recv`,
//! `poll_cq`, `req_notify_cq`) and through the `verbs_context`
//! (`query_port`, `query_device_ex`).
//!
//! A post translates the program's work requests (SGEs by lkey and
//! address) into the engine's (regions by handle and offset), posts them
//! and turns the driver once so the frames leave from the caller's thread.
//! A poll that finds its CQ empty turns the driver too: a program that
//! spins on its CQ makes progress without waiting for the thread.

use std::ffi::c_int;
use std::sync::atomic::Ordering;

use rctb_core::transport::*;

use crate::abi::guard;
use crate::device::{MrLink, Owner};
use crate::objects::*;
use crate::sys;
use crate::verbs::{MAX_INLINE, device_attr, errno_of, obj, write_port_attr};

/// A handle the engine never gives (its ids start at 1): an SGE whose lkey
/// names no region becomes an SGE of no region, which the engine completes
/// with a local protection error, as a NIC does.
const NO_REGION: MrId = MrId(0);

/// The engine's SGE for a program's (lkey, address, length). `write`: the
/// device writes through it (a receive, a READ or atomic's local buffer),
/// which a region registered without LOCAL_WRITE forbids; the engine does
/// not check that, so such an SGE becomes one of no region, and the WR
/// completes with a local protection error as on a NIC.
fn sge_of(mrs: &std::collections::BTreeMap<u32, MrLink>, s: &sys::ibv_sge, write: bool) -> Sge {
    match mrs.get(&s.lkey) {
        Some(m) if write && !m.local_write => Sge::new(NO_REGION, 0, s.length),
        Some(m) if s.addr >= m.iova => Sge::new(m.id, s.addr - m.iova, s.length),
        // Below the region: an offset past any region's end (a length error).
        Some(m) => Sge::new(m.id, u64::MAX - u64::from(s.length), s.length),
        None => Sge::new(NO_REGION, 0, s.length),
    }
}

/// The program's SGE list as a slice (empty for none).
///
/// # Safety
/// `list` points to `n` SGEs when `n > 0`.
unsafe fn sges<'a>(list: *const sys::ibv_sge, n: c_int) -> &'a [sys::ibv_sge] {
    if n <= 0 || list.is_null() {
        return &[];
    }
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts(list, n as usize) }
}

fn send_op(wr: &sys::ibv_send_wr) -> Option<SendOp> {
    // SAFETY: union fields read as the opcode says they were written.
    let (rdma, atomic, imm) = unsafe { (wr.wr.rdma, wr.wr.atomic, wr.__bindgen_anon_1.imm_data) };
    let remote = RemoteAddr { addr: rdma.remote_addr, rkey: rdma.rkey };
    let imm = u32::from_be(imm);
    Some(match wr.opcode {
        sys::IBV_WR_SEND => SendOp::Send,
        sys::IBV_WR_SEND_WITH_IMM => SendOp::SendWithImm { imm },
        sys::IBV_WR_RDMA_WRITE => SendOp::Write { remote },
        sys::IBV_WR_RDMA_WRITE_WITH_IMM => SendOp::WriteWithImm { remote, imm },
        sys::IBV_WR_RDMA_READ => SendOp::Read { remote },
        sys::IBV_WR_ATOMIC_CMP_AND_SWP => SendOp::CompareSwap {
            remote: RemoteAddr { addr: atomic.remote_addr, rkey: atomic.rkey },
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        sys::IBV_WR_ATOMIC_FETCH_AND_ADD => SendOp::FetchAdd {
            remote: RemoteAddr { addr: atomic.remote_addr, rkey: atomic.rkey },
            add: atomic.compare_add,
        },
        _ => return None,
    })
}

/// Posts one send WR; an errno when it is refused.
fn post_one(st: &mut rctb_udp::progress::State<Owner>, q: &Qp, wr: &sys::ibv_send_wr) -> Result<(), c_int> {
    let op = send_op(wr).ok_or(libc::EINVAL)?;
    // SAFETY: the program's SGE list of `num_sge` entries.
    let list = unsafe { sges(wr.sg_list, wr.num_sge) };
    if list.len() > rctb_engine::MAX_SGE as usize {
        return Err(libc::EINVAL);
    }
    let mut engine_sges = [Sge::new(NO_REGION, 0, 0); rctb_engine::MAX_SGE as usize];
    let flags = wr.send_flags;
    let inline = flags & sys::IBV_SEND_INLINE != 0 && !op.is_read_or_atomic();
    let n = if inline {
        // The data is copied now, into the QP's bounce slot: the program
        // may reuse its buffer as soon as the post returns.
        let mut bounce = q.bounce.lock().unwrap_or_else(|e| e.into_inner());
        let b = bounce.as_mut().ok_or(libc::EINVAL)?;
        let total: u64 = list.iter().map(|s| u64::from(s.length)).sum();
        if total > u64::from(b.slot.min(MAX_INLINE)) {
            return Err(libc::EINVAL);
        }
        let mut data = Vec::with_capacity(total as usize);
        for s in list {
            // SAFETY: an inline SGE names the program's bytes by address
            // alone (its lkey is ignored), valid for the call.
            data.extend_from_slice(unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.length as usize) });
        }
        let offset = (b.next % u64::from(b.slots)) * u64::from(b.slot);
        st.driver.engine_mut_at_last(0).0.mr_write(b.mr, offset, &data).map_err(|e| errno_of(&e))?;
        engine_sges[0] = Sge::new(b.mr, offset, total as u32);
        usize::from(total > 0)
    } else {
        for (dst, s) in engine_sges.iter_mut().zip(list) {
            *dst = sge_of(&st.owner.mrs, s, op.is_read_or_atomic());
        }
        list.len()
    };
    let send = SendWr {
        wr_id: wr.wr_id,
        op,
        sges: &engine_sges[..n],
        signaled: flags & sys::IBV_SEND_SIGNALED != 0,
        solicited: flags & sys::IBV_SEND_SOLICITED != 0,
    };
    // The clock was read once for the whole list (`post_send`).
    let (engine, now) = st.driver.engine_mut_at_last(0);
    engine.post_send(now, q.id, &send).map_err(|e| errno_of(&e))?;
    if inline && let Some(b) = q.bounce.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        b.next += 1;
    }
    Ok(())
}

/// A work request of a program's linked list.
trait Linked {
    fn next(&self) -> *mut Self;
}

impl Linked for sys::ibv_send_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
}

impl Linked for sys::ibv_recv_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
}

/// Posts each WR of the list from `first` in order with `post`; at the
/// first it refuses, points `*bad_wr` at it and returns its errno, as the
/// verbs do. 0 when every WR was posted.
///
/// # Safety
/// `first` is NULL or the head of a list of WRs valid for the call, and
/// `bad_wr` is NULL or the caller's out pointer.
unsafe fn each_wr<W: Linked>(
    first: *mut W,
    bad_wr: *mut *mut W,
    mut post: impl FnMut(&W) -> Result<(), c_int>,
) -> c_int {
    let mut cur = first;
    while !cur.is_null() {
        // SAFETY: the caller's promise: each WR of the list is valid.
        let w = unsafe { &*cur };
        if let Err(e) = post(w) {
            if !bad_wr.is_null() {
                // SAFETY: the caller's out pointer.
                unsafe { *bad_wr = cur };
            }
            return e;
        }
        cur = w.next();
    }
    0
}

pub(crate) unsafe extern "C" fn post_send(
    qp: *mut sys::ibv_qp,
    wr: *mut sys::ibv_send_wr,
    bad_wr: *mut *mut sys::ibv_send_wr,
) -> c_int {
    guard("ibv_post_send", libc::EIO, || {
        if qp.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live QP of a live context.
        let (q, ctx) = unsafe { (obj::<Qp, _>(qp), Context::from_ibv((*qp).context)) };
        let mut st = ctx.rt.progress.lock();
        st.driver.advance();
        // SAFETY: the program's WR list and out pointer.
        let rc = unsafe { each_wr(wr, bad_wr, |w| post_one(&mut st, q, w)) };
        // The frames leave now, from this thread; what a turn leaves
        // (a long message) the progress thread sends.
        let _ = st.turn_after_advance();
        // A post turned the driver: to the thread, as good as a poll.
        st.note_poller();
        let next = st.driver.next_wake();
        drop(st);
        // Frames left to send, or an ACK timeout sooner than the thread
        // would wake for.
        ctx.rt.progress.wake_for(next);
        if next == Some(rctb_core::time::Instant::ZERO) {
            ctx.rt.progress.ring();
        }
        rc
    })
}

fn recv_sges(owner: &Owner, list: &[sys::ibv_sge], out: &mut [Sge]) -> Result<usize, c_int> {
    if list.len() > out.len() {
        return Err(libc::EINVAL);
    }
    for (dst, s) in out.iter_mut().zip(list) {
        *dst = sge_of(&owner.mrs, s, true);
    }
    Ok(list.len())
}

pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut sys::ibv_qp,
    wr: *mut sys::ibv_recv_wr,
    bad_wr: *mut *mut sys::ibv_recv_wr,
) -> c_int {
    guard("ibv_post_recv", libc::EIO, || {
        if qp.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live QP of a live context.
        let (q, ctx) = unsafe { (obj::<Qp, _>(qp), Context::from_ibv((*qp).context)) };
        let mut st = ctx.rt.progress.lock();
        let mut engine_sges = [Sge::new(NO_REGION, 0, 0); rctb_engine::MAX_SGE as usize];
        let post = |w: &sys::ibv_recv_wr| {
            // SAFETY: the WR's SGE list, valid for the call.
            let list = unsafe { sges(w.sg_list, w.num_sge) };
            let n = recv_sges(&st.owner, list, &mut engine_sges)?;
            // A receive starts no protocol work: no clock reading for it.
            let (engine, now) = st.driver.engine_mut_at_last(0);
            engine.post_recv(now, q.id, &RecvWr::new(w.wr_id, &engine_sges[..n])).map_err(|e| errno_of(&e))
        };
        // SAFETY: the program's WR list and out pointer.
        let rc = unsafe { each_wr(wr, bad_wr, post) };
        // A receive posted to a QP in ERR completes at once: its channel
        // hears of it now.
        let State { driver, owner, .. } = &mut *st;
        rctb_udp::progress::Owner::after_turn(owner, driver);
        rc
    })
}

use rctb_udp::progress::State;

pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut sys::ibv_srq,
    wr: *mut sys::ibv_recv_wr,
    bad_wr: *mut *mut sys::ibv_recv_wr,
) -> c_int {
    guard("ibv_post_srq_recv", libc::EIO, || {
        if srq.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live SRQ of a live context.
        let (s, ctx) = unsafe { (obj::<Srq, _>(srq), Context::from_ibv((*srq).context)) };
        let mut st = ctx.rt.progress.lock();
        let mut engine_sges = [Sge::new(NO_REGION, 0, 0); rctb_engine::MAX_SGE as usize];
        let post = |w: &sys::ibv_recv_wr| {
            // SAFETY: the WR's SGE list, valid for the call.
            let list = unsafe { sges(w.sg_list, w.num_sge) };
            let n = recv_sges(&st.owner, list, &mut engine_sges)?;
            // A receive starts no protocol work: no clock reading for it.
            let engine = st.driver.engine_mut_at_last(0).0;
            engine.post_srq_recv(s.id, &RecvWr::new(w.wr_id, &engine_sges[..n])).map_err(|e| errno_of(&e))
        };
        // SAFETY: the program's WR list and out pointer.
        unsafe { each_wr(wr, bad_wr, post) }
    })
}

fn wc_opcode(op: WcOpcode) -> sys::ibv_wc_opcode {
    match op {
        WcOpcode::Send => sys::IBV_WC_SEND,
        WcOpcode::RdmaWrite => sys::IBV_WC_RDMA_WRITE,
        WcOpcode::RdmaRead => sys::IBV_WC_RDMA_READ,
        WcOpcode::CompSwap => sys::IBV_WC_COMP_SWAP,
        WcOpcode::FetchAdd => sys::IBV_WC_FETCH_ADD,
        WcOpcode::Recv => sys::IBV_WC_RECV,
        WcOpcode::RecvRdmaWithImm => sys::IBV_WC_RECV_RDMA_WITH_IMM,
        #[allow(unreachable_patterns)]
        _ => sys::IBV_WC_SEND,
    }
}

/// Moves up to `max` completions of `cq` into the program's array; how many.
fn take(st: &mut State<Owner>, cq: CqId, max: usize, out: *mut sys::ibv_wc) -> Result<usize, c_int> {
    let State { driver, owner, .. } = st;
    owner.scratch.clear();
    let n = driver.engine_mut_at_last(0).0.poll_cq(cq, max, &mut owner.scratch).map_err(|e| errno_of(&e))?;
    for (i, c) in owner.scratch.iter().enumerate() {
        let qp_num = owner.qps.get(&c.qp).map_or(0, |q| q.0);
        let mut wc = sys::ibv_wc {
            wr_id: c.wr_id,
            status: c.status as u32,
            opcode: wc_opcode(c.opcode),
            vendor_err: c.vendor_err,
            byte_len: c.byte_len,
            qp_num,
            ..Default::default()
        };
        if let Some(imm) = c.imm {
            wc.__bindgen_anon_1.imm_data = imm.to_be();
            wc.wc_flags = sys::IBV_WC_WITH_IMM;
        }
        // SAFETY: the program's array has room for `max` >= n entries.
        unsafe { out.add(i).write(wc) };
    }
    Ok(n)
}

pub(crate) unsafe extern "C" fn poll_cq(cq: *mut sys::ibv_cq, num_entries: c_int, wc: *mut sys::ibv_wc) -> c_int {
    guard("ibv_poll_cq", -1, || {
        if cq.is_null() || num_entries < 0 || (wc.is_null() && num_entries > 0) {
            return -1;
        }
        if num_entries == 0 {
            return 0;
        }
        // SAFETY: a live CQ of a live context.
        let (c, ctx) = unsafe { (obj::<Cq, _>(cq), Context::from_ibv((*cq).context)) };
        // The progress thread is turning the driver: a busy poller (its CQ
        // never armed) hears "nothing yet" rather than wait for it, and
        // comes back at once. A CQ used with events waits.
        let mut st = if c.armed_ever.load(Ordering::Relaxed) {
            ctx.rt.progress.lock()
        } else {
            let Some(st) = ctx.rt.progress.try_lock() else {
                ctx.rt.progress.note_poll_lock_taken();
                return 0;
            };
            st
        };
        let max = num_entries as usize;
        match take(&mut st, c.id, max, wc) {
            Ok(0) => {}
            Ok(n) => {
                // A poll that finds completions is a poller's too: the
                // thread leaves the sockets to it (it turns when it finds
                // the CQ empty).
                st.note_poller();
                return n as c_int;
            }
            Err(_) => return -1,
        }
        // Empty: make progress here rather than wait for the thread. The
        // frames that came go to the program before the ACKs they call
        // for leave: those go with its next call (a post, a poll) or, if it
        // makes none, with the thread's next turn.
        let _ = st.poll_receive();
        let r = take(&mut st, c.id, max, wc);
        if !matches!(r, Ok(n) if n > 0) {
            let _ = st.poll_flush();
            // What this turn armed (an RNR wait, say), the thread keeps if
            // the program now blocks without another call.
            let next = st.driver.next_wake();
            drop(st);
            ctx.rt.progress.wake_for(next);
        } else if st.driver.next_wake() == Some(rctb_core::time::Instant::ZERO) {
            drop(st);
            ctx.rt.progress.nudge();
        }
        match r {
            Ok(n) => n as c_int,
            Err(_) => -1,
        }
    })
}

pub(crate) unsafe extern "C" fn req_notify_cq(cq: *mut sys::ibv_cq, solicited_only: c_int) -> c_int {
    guard("ibv_req_notify_cq", libc::EIO, || {
        if cq.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live CQ of a live context.
        let (c, ctx) = unsafe { (obj::<Cq, _>(cq), Context::from_ibv((*cq).context)) };
        c.armed_ever.store(true, Ordering::Relaxed);
        let (r, next) = {
            let mut st = ctx.rt.progress.lock();
            let r = st.driver.engine_mut_at_last(0).0.req_notify_cq(c.id, solicited_only != 0);
            (r, st.driver.next_wake())
        };
        // The caller will block on the channel next: if it polled before,
        // the thread takes the sockets back now, and it wakes for the
        // timers the caller's polls armed.
        ctx.rt.progress.stop_watching();
        ctx.rt.progress.wake_for(next);
        match r {
            Ok(()) => 0,
            Err(e) => errno_of(&e),
        }
    })
}

pub(crate) unsafe extern "C" fn vctx_query_port(
    context: *mut sys::ibv_context,
    port_num: u8,
    port_attr: *mut sys::ibv_port_attr,
    port_attr_len: usize,
) -> c_int {
    guard("ibv_query_port", libc::EIO, || {
        if context.is_null() || port_attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live context; the caller's struct of `port_attr_len` bytes.
        write_port_attr(unsafe { Context::from_ibv(context) }, port_num, port_attr, port_attr_len)
    })
}

pub(crate) unsafe extern "C" fn vctx_query_device_ex(
    context: *mut sys::ibv_context,
    input: *const sys::ibv_query_device_ex_input,
    attr: *mut sys::ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    guard("ibv_query_device_ex", libc::EIO, || {
        if context.is_null() || attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: NULL or the caller's input.
        if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
            return libc::EINVAL;
        }
        // SAFETY: a live context.
        let ctx = unsafe { Context::from_ibv(context) };
        let mut a = sys::ibv_device_attr_ex { orig_attr: device_attr(ctx), ..Default::default() };
        a.max_dm_size = 0;
        let n = attr_size.min(std::mem::size_of::<sys::ibv_device_attr_ex>());
        // SAFETY: the caller's struct holds `attr_size` bytes.
        unsafe { std::ptr::copy_nonoverlapping(&a as *const _ as *const u8, attr as *mut u8, n) };
        0
    })
}
